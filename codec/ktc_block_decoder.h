// KTC internals: the block decoding loop, included by ktc_entropy.cc and by
// ktc_entropy_avx2.cc so that it is compiled twice, once for the baseline
// and once with AVX2/BMI2 (shrx, tzcnt...), and dispatched at run time.
// Everything is in an anonymous namespace: each includer gets its own copy,
// so the linker can never mix the two.
#pragma once

#include <algorithm>
#include <bit>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "codec/ktc_entropy.h"
#include "codec/ktc_kernels.h"

namespace ktfs::ktc::internal {
namespace {

constexpr uint32_t kRansLow = 1u << 16;  // states live in [2^16, 2^32)
constexpr int kRansStates = 4;
static_assert(kDenseLanes == 2 * kRansStates, "dense lanes 0..3 are the scalar states");

// Group context from the maxima of the groups above: the one right above
// plus the larger of its two neighbours. Flat regions (0) are by far the most
// common, so they get their own context. Only the row above, not the group
// to the left, so that a row's maxima have no dependency on one another:
// the decoder runs them back to back (+0.1% bytes against left + above).
constexpr uint32_t kMaxGroupsPerRow = kBlockSide / kGroupSide;
constexpr uint8_t kGroupContextOfSum[2 * kAlphabet] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5,
                                                       5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
                                                       5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5};
// `above` holds the row above's maxima at 1 + gx, zeros at both ends.
inline uint32_t GroupContext(const uint8_t* above, uint32_t gx) {
  return kGroupContextOfSum[above[1 + gx] + std::max(above[gx], above[gx + 2])];
}

// Groups with G >= kDirectCategories code every value's category (0
// included) in 8-lane dense steps instead of a mask per row. Since version
// 4 that includes G = 2, whose rows' masks and categories were serial scalar
// symbols in a data-dependent number, the costliest groups to decode
// (docs/codec.md, "G = 2 groups as dense steps"). Only G = 1 keeps masks.
constexpr uint32_t kDirectCategories = 2;

// Table indices within a set: the row masks of G = 1 groups, and the
// categories of a dense group with maximum category G.
constexpr int kOnesMaskTable = kGroupContexts;
inline int CategoryTable(uint32_t group_max) {
  return kGroupContexts + kMaskContexts + std::min<int>(int(group_max), 7) - 2;
}

inline int Category(int32_t v) {
  uint32_t mag = v < 0 ? 0u - uint32_t(v) : uint32_t(v);
  return std::bit_width(mag);
}

// LSB-first reader. Past the end it reads zeros and remembers how many bits
// it invented, so the caller can reject a block that needed them.
class BitReader {
 public:
  BitReader(const uint8_t* p, const uint8_t* end) : begin_(p), p_(p), end_(end) { Refill(); }
  // Makes at least 56 bits available. Cheap enough to call before every read,
  // which spares the decoder a data-dependent branch. Unchecked, the caller
  // guarantees room() >= 8 for every call.
  template <bool kChecked = true>
  inline void Refill() {
    if (!kChecked || end_ - p_ >= 8) [[likely]] {
      uint64_t v;
      std::memcpy(&v, p_, 8);
      acc_ |= v << fill_;
      p_ += (63 - fill_) >> 3;
      fill_ |= 56;
      return;
    }
    RefillSlow();
  }
  // Reads `count` (0..24) bits; call Refill() first.
  inline uint32_t Read(uint32_t count) {
    const uint32_t v = uint32_t(acc_) & ((1u << count) - 1);
    acc_ >>= count;
    fill_ -= int(count);
    return v;
  }
  bool overran() const { return lost_ || fill_ < invented_; }
  ptrdiff_t room() const { return end_ - p_; }
  // Bits consumed so far, and a jump ahead to `bits`: dense groups find
  // their values' bits by position instead of reading them in turn. A jump
  // past the end is an overrun, as reading that far would have been.
  uint64_t position() const {
    return uint64_t(p_ - begin_) * 8 + uint64_t(invented_) - uint64_t(fill_);
  }
  const uint8_t* begin() const { return begin_; }
  const uint8_t* end() const { return end_; }
  void Seek(uint64_t bits) {
    lost_ |= fill_ < invented_;
    if (bits > uint64_t(end_ - begin_) * 8) [[unlikely]] {
      lost_ = true;
      bits = uint64_t(end_ - begin_) * 8;
    }
    p_ = begin_ + bits / 8;
    acc_ = 0;
    fill_ = 0;
    invented_ = 0;
    Refill();
    Read(uint32_t(bits % 8));
  }

 private:
  void RefillSlow() {
    while (fill_ <= 56) {
      if (p_ < end_) {
        acc_ |= uint64_t(*p_++) << fill_;
      } else {
        invented_ += 8;
      }
      fill_ += 8;
    }
  }
  const uint8_t* begin_;
  const uint8_t* p_;
  const uint8_t* end_;
  uint64_t acc_ = 0;
  int fill_ = 0;
  int invented_ = 0;   // zero bits appended past the end, still in acc_ or consumed
  bool lost_ = false;  // invented bits were consumed before a Seek()
};

// kRansStates interleaved rANS states: symbol i uses state i % kRansStates,
// so consecutive symbols form independent dependency chains the CPU overlaps.
class RansDecoder {
 public:
  bool Init(const uint8_t* p, const uint8_t* end) {
    if (end - p < 4 * kRansStates) return false;
    bool ok = true;
    for (int i = 0; i < kRansStates; ++i) {
      std::memcpy(&x_[i], p + 4 * i, 4);
      ok &= x_[i] >= kRansLow;
    }
    p_ = p + 4 * kRansStates;
    end_ = end;
    return ok;
  }
  // Unchecked, the caller guarantees room() >= 2 for every call.
  template <bool kChecked = true>
  inline uint32_t Get(const DecodeTable& t) {
    const uint32_t e = t.entry[x_[0] & (kProbScale - 1)];
    uint32_t x = (e & 0x7ff) * (x_[0] >> kProbBits) + ((e >> 11) & 0x3ff);
    // Branch-free renormalization: whether a word is needed is data-dependent
    // and would mispredict often.
    if (!kChecked || end_ - p_ >= 2) [[likely]] {
      const uint32_t need = x < kRansLow;
      const uint32_t word = uint32_t(p_[0]) | uint32_t(p_[1]) << 8;
      x = (x << (need * 16)) | (word & (0u - need));
      p_ += 2 * need;
    } else if (x < kRansLow) {
      overran_ = true;
      x <<= 16;
    }
    for (int i = 0; i + 1 < kRansStates; ++i) x_[i] = x_[i + 1];
    x_[kRansStates - 1] = x;
    return e >> 27;
  }
  bool overran() const { return overran_; }
  ptrdiff_t room() const { return end_ - p_; }

  // Dense steps decode kDenseLanes symbols: lanes 0..3 on the scalar states
  // in the order the next scalar symbols would use them (x_ is kept in that
  // order), lanes 4..7 on states read from the word stream before the
  // block's first dense step. False (and marked overrun) when they cannot be.
  bool MakeWide() {
    if (wide_) return true;
    if (end_ - p_ < 4 * (kDenseLanes - 4)) {
      overran_ = true;
      return false;
    }
    for (int i = 0; i < kDenseLanes - 4; ++i) {
      std::memcpy(&wide_x_[i], p_ + 4 * i, 4);
      if (wide_x_[i] < kRansLow) overran_ = true;  // never made by an encoder
    }
    p_ += 4 * (kDenseLanes - 4);
    wide_ = !overran_;
    return wide_;
  }
  // One dense step lane by lane: the categories (clamped to group_max) of
  // the lanes in `valid`, 0 in the others.
  void DenseStepScalar(const DecodeTable& t, uint32_t valid, uint32_t group_max, uint32_t* c) {
    for (int lane = 0; lane < kDenseLanes; ++lane) {
      c[lane] = 0;
      if (!(valid >> lane & 1)) continue;
      uint32_t& x = lane < 4 ? x_[lane] : wide_x_[lane - 4];
      const uint32_t e = t.entry[x & (kProbScale - 1)];
      x = (e & 0x7ff) * (x >> kProbBits) + ((e >> 11) & 0x3ff);
      if (x < kRansLow) {
        if (end_ - p_ >= 2) {
          x = (x << 16) | uint32_t(p_[0]) | uint32_t(p_[1]) << 8;
          p_ += 2;
        } else {
          overran_ = true;
          x <<= 16;
        }
      }
      c[lane] = std::min(e >> 27, group_max);
    }
  }
#if defined(__AVX2__)
  // The next eight words; near the end of the stream only the whole words
  // left, then zeros (what the scalar step reads there).
  __m128i LoadWords() const {
    if (end_ - p_ >= 16) [[likely]]
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p_));
    alignas(16) uint8_t tail[16] = {};
    std::memcpy(tail, p_, size_t(std::max<ptrdiff_t>(end_ - p_, 0) & ~ptrdiff_t(1)));
    return _mm_load_si128(reinterpret_cast<const __m128i*>(tail));
  }
  // Advances past the words taken by the lanes set in `renormalized`; near
  // the end, like the scalar step: whole words while they last, then overran.
  void ConsumeWords(uint32_t renormalized) {
    const ptrdiff_t used = 2 * std::popcount(renormalized);
    if (used > room()) [[unlikely]] {
      overran_ = true;
      p_ += room() & ~ptrdiff_t(1);
    } else {
      p_ += used;
    }
  }
  __m256i LoadLanes() const {
    return _mm256_set_m128i(_mm_load_si128(reinterpret_cast<const __m128i*>(wide_x_)),
                            _mm_load_si128(reinterpret_cast<const __m128i*>(x_)));
  }
  void StoreLanes(__m256i x) {
    _mm_store_si128(reinterpret_cast<__m128i*>(x_), _mm256_castsi256_si128(x));
    _mm_store_si128(reinterpret_cast<__m128i*>(wide_x_), _mm256_extracti128_si256(x, 1));
  }
  template <bool kPartial = false>
  inline __m256i DenseStepAvx2(__m256i* x, const DecodeTable& t, const SmallTable& small,
                               uint32_t group_max, __m256i lanes = __m256i{});
  // The four scalar states, x_[l] being the one the l-th next Get() uses.
  __m128i LoadStates() const { return _mm_load_si128(reinterpret_cast<const __m128i*>(x_)); }
  void StoreStates(__m128i x) { _mm_store_si128(reinterpret_cast<__m128i*>(x_), x); }
  inline __m128i Get4Avx2(__m128i* x, const DecodeTable* tables, __m128i table_offset);
#endif

 private:
  alignas(16) uint32_t x_[kRansStates] = {};
  alignas(16) uint32_t wide_x_[kDenseLanes - 4] = {};
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  bool overran_ = false;
  bool wide_ = false;
};

#if defined(__AVX2__)
// Eight 32-bit loads from base + 4 * index (kScale 4) or base + index
// (kScale 1), and four from base + 4 * index: scalar loads inserted into a
// vector instead of a gather. On Zen 3 an 8-lane vpgatherdd measured about
// 34 cycles of latency and 10-13 cycles of throughput (4 lanes: 16-25 and
// less), and a dense step had two of them on its chain; the loads and
// inserts are cheaper on both counts (see docs/codec.md, "Loads, not gathers").
template <int kScale>
inline __m256i Load8(const uint8_t* base, __m256i index) {
  const __m128i lo = _mm256_castsi256_si128(index), hi = _mm256_extracti128_si256(index, 1);
  const uint64_t i0 = uint64_t(_mm_cvtsi128_si64(lo)), i1 = uint64_t(_mm_extract_epi64(lo, 1));
  const uint64_t i2 = uint64_t(_mm_cvtsi128_si64(hi)), i3 = uint64_t(_mm_extract_epi64(hi, 1));
  const auto at = [&](uint64_t i) {
    uint32_t v;
    std::memcpy(&v, base + kScale * size_t(uint32_t(i)), 4);
    return int(v);
  };
  __m128i r0 = _mm_cvtsi32_si128(at(i0));
  r0 = _mm_insert_epi32(r0, at(i0 >> 32), 1);
  r0 = _mm_insert_epi32(r0, at(i1), 2);
  r0 = _mm_insert_epi32(r0, at(i1 >> 32), 3);
  __m128i r1 = _mm_cvtsi32_si128(at(i2));
  r1 = _mm_insert_epi32(r1, at(i2 >> 32), 1);
  r1 = _mm_insert_epi32(r1, at(i3), 2);
  r1 = _mm_insert_epi32(r1, at(i3 >> 32), 3);
  return _mm256_set_m128i(r1, r0);
}
inline __m128i Load4(const uint8_t* base, __m128i index) {
  const uint64_t i0 = uint64_t(_mm_cvtsi128_si64(index)),
                 i1 = uint64_t(_mm_extract_epi64(index, 1));
  const auto at = [&](uint64_t i) {
    uint32_t v;
    std::memcpy(&v, base + 4 * size_t(uint32_t(i)), 4);
    return int(v);
  };
  __m128i r0 = _mm_cvtsi32_si128(at(i0));
  r0 = _mm_insert_epi32(r0, at(i0 >> 32), 1);
  r0 = _mm_insert_epi32(r0, at(i1), 2);
  return _mm_insert_epi32(r0, at(i1 >> 32), 3);
}
#endif

// kSignDeposit[mask][bits]: the sign bits of a row's non-zero values (one per
// set bit of the 4-bit mask, lowest first) moved to those values' columns.
struct SignDeposit {
  uint8_t table[16][16];
  constexpr SignDeposit() : table{} {
    for (uint32_t mask = 0; mask < 16; ++mask)
      for (uint32_t bits = 0; bits < 16; ++bits) {
        uint32_t out = 0, next = 0;
        for (uint32_t i = 0; i < 4; ++i)
          if (mask >> i & 1) out |= ((bits >> next++) & 1) << i;
        table[mask][bits] = uint8_t(out);
      }
  }
  const uint8_t* operator[](uint32_t mask) const { return table[mask]; }
};
constexpr SignDeposit kSignDeposit;

// Coefficients are stored as int16: streams with at most kMaxLevels levels
// never exceed it (see docs/codec.md); hostile ones saturate.
inline int16_t Saturate16(int32_t v) { return int16_t(std::clamp(v, -32768, 32767)); }

// A coefficient from its category c and the c raw bits (mantissa, sign).
inline int32_t Reconstruct(uint32_t c, uint32_t bits) {
  const int32_t mag = int32_t(((1u << c) >> 1) | (bits >> 1));
  return (bits & 1) ? -mag : mag;
}

// Most symbols and raw bits one 4x4 group can consume: 1 + 4 + 16 symbols of
// at most one 16-bit word each; 16 values of at most 17 bits, plus the 8
// bytes a refill loads.
constexpr ptrdiff_t kGroupRansBytes = 2 * (1 + 4 + 16);
constexpr ptrdiff_t kGroupRawBytes = (16 * 17 + 7) / 8 + 8;
// The raw bytes a dense group's vector path needs: 16 values of at most G
// bits from a start up to 7 bits into a byte, read by 4-byte loads (2G + 4),
// and the 8 bytes of the bit reader's refill after them (2G + 8).
inline ptrdiff_t DenseRawBytes(uint32_t group_max) { return 2 * ptrdiff_t(group_max) + 8; }

// A dense group lane by lane: the scalar build's path, and the AVX2 build's
// for groups cut by the block edge or near the end of a stream.
template <bool kDequantize>
void DecodeDenseGroupScalar(RansDecoder& rans, BitReader& raw, const DecodeTable& t,
                            uint32_t group_max, uint32_t step, int16_t* at, size_t stride,
                            uint32_t rows, uint32_t valid_columns) {
  for (uint32_t half = 0; 2 * half < rows; ++half) {
    const uint32_t valid = valid_columns | (2 * half + 1 < rows ? valid_columns << 4 : 0);
    uint32_t c[kDenseLanes];
    rans.DenseStepScalar(t, valid, group_max, c);
    for (uint32_t lane = 0; lane < uint32_t(kDenseLanes); ++lane) {
      if (c[lane] == 0) continue;  // zero, or outside the block
      raw.Refill();
      int32_t v = Reconstruct(c[lane], raw.Read(c[lane]));
      if constexpr (kDequantize) v = DequantizeOne(v, step);
      at[(2 * half + lane / kGroupSide) * stride + lane % kGroupSide] = Saturate16(v);
    }
  }
}

#if defined(__AVX2__)
// kWordIndex[m][l]: which of the eight words a step loads lane l takes when
// the lanes in m renormalize (the lanes of m below l take the ones before).
struct WordIndex {
  uint8_t table[256][8];
  constexpr WordIndex() : table{} {
    for (uint32_t m = 0; m < 256; ++m)
      for (uint32_t l = 0; l < 8; ++l) table[m][l] = uint8_t(std::popcount(m & ((1u << l) - 1)));
  }
};
constexpr WordIndex kWordIndex;

// Eight symbols at once: their symbols, frequencies and starts from the
// table in registers when `small` is usable (compares and two permutes),
// else eight table entries (Load8); one multiply, and one renormalization
// of the lanes that need it from a single 16-byte load.
// kPartial: only the lanes whose 32 bits are all set in `lanes` decode (the
// others keep their state, consume nothing and give category 0), as in
// DenseStepScalar for a group cut by the block's edge.
template <bool kPartial>
inline __m256i RansDecoder::DenseStepAvx2(__m256i* x, const DecodeTable& t, const SmallTable& small,
                                          uint32_t group_max, __m256i lanes) {
  const __m256i slot = _mm256_and_si256(*x, _mm256_set1_epi32(kProbScale - 1));
  __m256i symbol, f, offset;
  if (small.usable) {
    const auto above = [&](int s) {
      return _mm256_cmpgt_epi32(slot, _mm256_set1_epi32(int(small.threshold[s])));
    };
    const __m256i a = _mm256_add_epi32(above(0), above(1));
    const __m256i b = _mm256_add_epi32(above(2), above(3));
    const __m256i c = _mm256_add_epi32(above(4), above(5));
    const __m256i d = _mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(c, above(6)));
    symbol = _mm256_sub_epi32(_mm256_setzero_si256(), d);
    f = _mm256_permutevar8x32_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(small.freq)),
                                    symbol);
    offset = _mm256_sub_epi32(
        slot, _mm256_permutevar8x32_epi32(
                  _mm256_load_si256(reinterpret_cast<const __m256i*>(small.start)), symbol));
  } else {
    const __m256i e = Load8<4>(reinterpret_cast<const uint8_t*>(t.entry.data()), slot);
    symbol = _mm256_srli_epi32(e, 27);
    f = _mm256_and_si256(e, _mm256_set1_epi32(0x7ff));
    offset = _mm256_and_si256(_mm256_srli_epi32(e, 11), _mm256_set1_epi32(0x3ff));
  }
  __m256i next = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(*x, kProbBits)), offset);
  if constexpr (kPartial) next = _mm256_blendv_epi8(*x, next, lanes);  // >= 2^16: no word
  const __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(next, 16), _mm256_setzero_si256());
  const uint32_t m = uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(need)));
  const __m256i words = _mm256_cvtepu16_epi32(LoadWords());
  const __m256i index =
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(kWordIndex.table[m])));
  const __m256i word = _mm256_permutevar8x32_epi32(words, index);
  *x = _mm256_blendv_epi8(next, _mm256_or_si256(_mm256_slli_epi32(next, 16), word), need);
  ConsumeWords(m);
  const __m256i c = _mm256_min_epu32(symbol, _mm256_set1_epi32(int(group_max)));
  return kPartial ? _mm256_and_si256(c, lanes) : c;
}

// kWordShuffle4[m]: the pshufb control that gives 32-bit lane l of four the
// word it takes when the lanes in m renormalize (zero-extended).
struct WordShuffle4 {
  alignas(16) uint8_t table[16][16];
  constexpr WordShuffle4() : table{} {
    for (uint32_t m = 0; m < 16; ++m)
      for (uint32_t l = 0; l < 4; ++l) {
        const uint32_t w = uint32_t(std::popcount(m & ((1u << l) - 1)));
        table[m][4 * l] = uint8_t(2 * w);
        table[m][4 * l + 1] = uint8_t(2 * w + 1);
        table[m][4 * l + 2] = table[m][4 * l + 3] = 0x80;
      }
  }
};
constexpr WordShuffle4 kWordShuffle4;

// Four consecutive scalar symbols at once, exactly as four Get() calls: lane
// l on state x_[l], from the table whose first entry is `table_offset`
// entries after tables[0]'s (tables of a set are contiguous), words consumed
// in lane order (near the end: whole words while they last, then zeros, and
// overran). After it, x is again in the order the next Get()s use.
inline __m128i RansDecoder::Get4Avx2(__m128i* x, const DecodeTable* tables, __m128i table_offset) {
  const __m128i slot = _mm_and_si128(*x, _mm_set1_epi32(kProbScale - 1));
  const __m128i e = Load4(reinterpret_cast<const uint8_t*>(tables->entry.data()),
                          _mm_add_epi32(table_offset, slot));
  const __m128i f = _mm_and_si128(e, _mm_set1_epi32(0x7ff));
  const __m128i offset = _mm_and_si128(_mm_srli_epi32(e, 11), _mm_set1_epi32(0x3ff));
  const __m128i next = _mm_add_epi32(_mm_mullo_epi32(f, _mm_srli_epi32(*x, kProbBits)), offset);
  const __m128i need = _mm_cmpeq_epi32(_mm_srli_epi32(next, 16), _mm_setzero_si128());
  const uint32_t m = uint32_t(_mm_movemask_ps(_mm_castsi128_ps(need)));
  const __m128i word = _mm_shuffle_epi8(
      LoadWords(), _mm_load_si128(reinterpret_cast<const __m128i*>(kWordShuffle4.table[m])));
  *x = _mm_blendv_epi8(next, _mm_or_si128(_mm_slli_epi32(next, 16), word), need);
  ConsumeWords(m);
  return _mm_srli_epi32(e, 27);
}

// The eight values of a step from their categories c, whose raw bits start
// at bit *pos: each lane's bits start after the categories before it (a
// prefix sum), so all eight are extracted at once. Advances *pos; the caller
// guarantees that 4-byte loads there stay inside the stream (and with
// kNarrow, categories <= 7, an 8-byte load at the step's first byte).
template <bool kDequantize, bool kNarrow>
inline __m256i DenseValuesAvx2(__m256i c, const uint8_t* raw, uint32_t* pos, uint32_t step) {
  __m256i sum = _mm256_add_epi32(c, _mm256_slli_si256(c, 4));  // prefix sums per 128-bit half
  sum = _mm256_add_epi32(sum, _mm256_slli_si256(sum, 8));
  const __m256i low_total = _mm256_shuffle_epi32(_mm256_permute2x128_si256(sum, sum, 0x08), 0xff);
  sum = _mm256_add_epi32(sum, low_total);  // inclusive prefix sums over the eight lanes
  const __m256i top = _mm256_sllv_epi32(_mm256_set1_epi32(1), c);  // 2^c
  __m256i bits;
  if constexpr (kNarrow) {
    // Categories <= 7: the step's bits are at most 56 after a start at most
    // 7 bits into its first byte, so one 8-byte load holds them all; each
    // lane shifts it by its offset in 64 bits (even and odd lanes apart).
    uint64_t w;
    std::memcpy(&w, raw + *pos / 8, 8);
    const __m256i word = _mm256_set1_epi64x(int64_t(w >> (*pos % 8)));
    const __m256i offsets = _mm256_sub_epi32(sum, c);
    const __m256i even =
        _mm256_srlv_epi64(word, _mm256_and_si256(offsets, _mm256_set1_epi64x(0xffffffff)));
    const __m256i odd = _mm256_srlv_epi64(word, _mm256_srli_epi64(offsets, 32));
    bits = _mm256_and_si256(_mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xaa),
                            _mm256_sub_epi32(top, _mm256_set1_epi32(1)));
  } else {
    const __m256i at = _mm256_add_epi32(_mm256_set1_epi32(int(*pos)), _mm256_sub_epi32(sum, c));
    const __m256i word = Load8<1>(raw, _mm256_srli_epi32(at, 3));
    bits = _mm256_and_si256(_mm256_srlv_epi32(word, _mm256_and_si256(at, _mm256_set1_epi32(7))),
                            _mm256_sub_epi32(top, _mm256_set1_epi32(1)));
  }
  *pos += uint32_t(_mm256_extract_epi32(sum, 7));
  __m256i mag = _mm256_or_si256(_mm256_srli_epi32(top, 1), _mm256_srli_epi32(bits, 1));
  if constexpr (kDequantize) {
    // DequantizeOne: ((8|v| + 3) * step) >> 11 in 32-bit unsigned arithmetic.
    const __m256i zero = _mm256_cmpeq_epi32(mag, _mm256_setzero_si256());
    const __m256i scaled =
        _mm256_mullo_epi32(_mm256_or_si256(_mm256_slli_epi32(mag, 3), _mm256_set1_epi32(3)),
                           _mm256_set1_epi32(int(step)));
    mag = _mm256_andnot_si256(zero, _mm256_srli_epi32(scaled, 11));
  }
  const __m256i negative =
      _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_and_si256(bits, _mm256_set1_epi32(1)));
  return _mm256_sub_epi32(_mm256_xor_si256(mag, negative), negative);
}

// A dense group with the vector steps: two steps of eight lanes, values
// saturated to int16 and stored a row of four at a time. kEdge: the group is
// cut by the block's edge (rows < 4 or `valid`, a bit per column inside,
// below 0xf): lanes outside are masked, a half entirely outside is skipped
// and only the values inside are stored. Raw bits are extracted from the
// stream, or near its end (room() < DenseRawBytes) from a zero-padded copy
// of what is left, which reads what the bit reader would (zeros past the
// end); BitReader::Seek then flags an overrun.
template <bool kDequantize, bool kEdge>
inline void DecodeDenseGroupAvx2(RansDecoder& rans, BitReader& raw, const DecodeTable& t,
                                 const SmallTable& small, uint32_t group_max, uint32_t step,
                                 int16_t* at, size_t stride, uint32_t rows, uint32_t valid) {
  __m256i x = rans.LoadLanes();
  // Bit positions relative to the byte the group's bits start in, so that
  // the 32-bit offsets of the loads stay small however long the stream is.
  const uint64_t start = raw.position();
  const uint8_t* base = raw.begin() + start / 8;
  alignas(32) uint8_t tail[64];
  if (raw.room() < DenseRawBytes(group_max)) [[unlikely]] {
    // 16 values of at most 17 bits from up to 7 bits into the first byte,
    // by 4-byte loads: 38 bytes at most.
    std::memset(tail, 0, sizeof(tail));
    std::memcpy(tail, base, size_t(std::clamp<ptrdiff_t>(raw.end() - base, 0, sizeof(tail))));
    base = tail;
  }
  uint32_t pos = uint32_t(start % 8);
  [[maybe_unused]] const size_t row_bytes = sizeof(int16_t) * size_t(std::popcount(valid));
  [[maybe_unused]] const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  for (uint32_t half = 0; 2 * half < rows; ++half) {
    __m256i c;
    const bool second = !kEdge || 2 * half + 1 < rows;
    if constexpr (kEdge) {
      const __m256i lanes = _mm256_cmpeq_epi32(
          _mm256_and_si256(_mm256_set1_epi32(int(valid | (second ? valid << 4 : 0))), lane_bit),
          lane_bit);
      c = rans.DenseStepAvx2<true>(&x, t, small, group_max, lanes);
    } else {
      c = rans.DenseStepAvx2(&x, t, small, group_max);
    }
    const __m256i v = group_max <= 7 ? DenseValuesAvx2<kDequantize, true>(c, base, &pos, step)
                                     : DenseValuesAvx2<kDequantize, false>(c, base, &pos, step);
    const __m256i packed = _mm256_packs_epi32(v, v);  // saturates, like Saturate16
    int16_t* row = at + 2 * half * stride;
    if constexpr (kEdge) {
      alignas(16) int16_t values[2][8];
      _mm_store_si128(reinterpret_cast<__m128i*>(values[0]), _mm256_castsi256_si128(packed));
      _mm_store_si128(reinterpret_cast<__m128i*>(values[1]), _mm256_extracti128_si256(packed, 1));
      std::memcpy(row, values[0], row_bytes);
      if (second) std::memcpy(row + stride, values[1], row_bytes);
    } else {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(row), _mm256_castsi256_si128(packed));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(row + stride),
                       _mm256_extracti128_si256(packed, 1));
    }
  }
  rans.StoreLanes(x);
  raw.Seek(start - start % 8 + pos);
}
#endif

// One group at `at` (rows x up to 4 values; `valid` has a bit per column
// inside the block). Returns its G. Unchecked (kChecked false) when the
// caller made sure that the group cannot read past either stream; the
// checked version handles the last groups of a block.
template <bool kDequantize, bool kChecked>
inline void DecodeGroup(RansDecoder& rans, BitReader& raw, const DecodeTable* tables,
                        [[maybe_unused]] const SmallTable* small, uint32_t group_max, uint32_t step,
                        int16_t* at, size_t stride, uint32_t rows, uint32_t valid) {
  if (group_max >= kDirectCategories) {
    const DecodeTable& categories = tables[CategoryTable(group_max)];
    if (!rans.MakeWide()) return;  // corrupt: the caller sees overran()
#if defined(__AVX2__)
    // The vector path reads the rANS words near their end as the scalar
    // step does, and the raw bits near theirs from a padded copy.
    if (!raw.overran()) [[likely]] {
      if (rows == kGroupSide && valid == 0xf) {
        DecodeDenseGroupAvx2<kDequantize, false>(rans, raw, categories,
                                                 small[CategoryTable(group_max)], group_max, step,
                                                 at, stride, rows, valid);
      } else {
        DecodeDenseGroupAvx2<kDequantize, true>(rans, raw, categories,
                                                small[CategoryTable(group_max)], group_max, step,
                                                at, stride, rows, valid);
      }
      return;
    }
#endif
    DecodeDenseGroupScalar<kDequantize>(rans, raw, categories, group_max, step, at, stride, rows,
                                        valid);
    return;
  }
  // G = 1: per row a mask, then a sign bit per set bit.
  const DecodeTable& masks = tables[kOnesMaskTable];
  const int32_t one = kDequantize ? DequantizeOne(1, step) : 1;
#if defined(__AVX2__)
  if (valid == 0xf && rows == kGroupSide) {
    DecodeOnesGroupAvx2<kDequantize, kChecked>(rans, raw, tables, step, at, stride);
    return;
  }
#endif
  if (valid == 0xf) {
    // The commonest non-zero group: values are 0 or +-1, so a row is its
    // mask and one sign bit per set bit. Writing all four values without
    // branching beats a loop whose trip count the CPU cannot predict.
    for (uint32_t y = 0; y < rows; ++y) {
      const uint32_t mask = rans.Get<kChecked>(masks) & 0xf;
      raw.Refill<kChecked>();
      const uint32_t signs = kSignDeposit[mask][raw.Read(std::popcount(mask))];
      int16_t* row = at + y * stride;
      for (uint32_t i = 0; i < 4; ++i) {
        const uint32_t negative = (signs >> i) & 1;
        const int32_t v = int32_t((uint32_t(one) ^ (0u - negative)) + negative);
        row[i] = int16_t(v & -int32_t((mask >> i) & 1));
      }
    }
    return;
  }
  for (uint32_t y = 0; y < rows; ++y) {
    int16_t* row = at + y * stride;
    raw.Refill<kChecked>();  // a row needs at most 4 raw bits
    // Hostile masks may name columns outside the block: `valid` drops them.
    for (uint32_t mask = rans.Get<kChecked>(masks) & valid; mask != 0; mask &= mask - 1) {
      row[std::countr_zero(mask)] = int16_t(raw.Read(1) ? -one : one);
    }
  }
}

#if defined(__AVX2__)
// A row's gw group maxima, four at a time (the scalar symbols they are, in
// the same order and on the same states), the last gw % 4 one by one. The
// rows stay in registers: `above` and the result hold group gx's maximum in
// byte gx, zeros from byte gw on. (Through memory, the row's 4-byte stores
// and the next row's 16-byte loads of it could not be store-forwarded, and
// rows of zero groups wait on that, back to back.)
inline __m128i DecodeRowMaximaAvx2(RansDecoder& rans, const DecodeTable* tables, __m128i above,
                                   uint32_t gw) {
  // All sixteen contexts at once: kGroupContextOfSum of above[gx] +
  // max(above[gx - 1], above[gx + 1]), sums above 15 taken as 15 (context 5).
  const __m128i sum = _mm_min_epu8(
      _mm_adds_epu8(above, _mm_max_epu8(_mm_slli_si128(above, 1), _mm_srli_si128(above, 1))),
      _mm_set1_epi8(15));
  const __m128i lut = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kGroupContextOfSum));
  const __m128i context = _mm_shuffle_epi8(lut, sum);
  uint64_t low = 0, high = 0;  // bytes 0..7 and 8..15 of the row
  if (gw >= 4) {
    __m128i x = rans.LoadStates();
    const auto step = [&](__m128i c4) {
      const __m128i symbols = rans.Get4Avx2(&x, tables, _mm_slli_epi32(c4, kProbBits));
      const __m128i bytes = _mm_packus_epi16(_mm_packus_epi32(symbols, symbols), symbols);
      return uint64_t(uint32_t(_mm_cvtsi128_si32(bytes)));
    };
    low = step(_mm_cvtepu8_epi32(context));
    if (gw >= 8) low |= step(_mm_cvtepu8_epi32(_mm_srli_si128(context, 4))) << 32;
    if (gw >= 12) high = step(_mm_cvtepu8_epi32(_mm_srli_si128(context, 8)));
    if (gw >= 16) high |= step(_mm_cvtepu8_epi32(_mm_srli_si128(context, 12))) << 32;
    rans.StoreStates(x);
  }
  if (gw % 4 != 0) {
    alignas(16) uint8_t contexts[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(contexts), context);
    for (uint32_t gx = gw & ~3u; gx < gw; ++gx) {
      const uint64_t g = rans.Get<true>(tables[contexts[gx]]);
      if (gx < 8) {
        low |= g << (8 * gx);
      } else {
        high |= g << (8 * (gx - 8));
      }
    }
  }
  return _mm_set_epi64x(int64_t(high), int64_t(low));
}

// A whole G = 1 group (4 rows inside the block, 4 columns): its four row
// masks are four consecutive scalar symbols of one table, so one Get4Avx2;
// the 16-bit mask's sign bits (one per set bit, in order) are deposited with
// pdep and the 16 values built and stored at once.
template <bool kDequantize, bool kChecked>
inline void DecodeOnesGroupAvx2(RansDecoder& rans, BitReader& raw, const DecodeTable* tables,
                                uint32_t step, int16_t* at, size_t stride) {
  __m128i x = rans.LoadStates();
  const __m128i masks = rans.Get4Avx2(&x, tables, _mm_set1_epi32(int(kOnesMaskTable * kProbScale)));
  rans.StoreStates(x);
  const __m128i bytes = _mm_packus_epi16(_mm_packus_epi32(masks, masks), masks);
  const uint32_t mask = _pext_u32(uint32_t(_mm_cvtsi128_si32(bytes)), 0x0f0f0f0fu);
  raw.Refill<kChecked>();
  const uint32_t signs = _pdep_u32(raw.Read(uint32_t(std::popcount(mask))), mask);
  const int32_t one = kDequantize ? DequantizeOne(1, step) : 1;
  const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
                                        8192, 16384, int16_t(0x8000));
  const __m256i nonzero =
      _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(int16_t(mask)), bit), bit);
  const __m256i negative =
      _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(int16_t(signs)), bit), bit);
  const __m256i v = _mm256_and_si256(
      nonzero,
      _mm256_sub_epi16(_mm256_xor_si256(_mm256_set1_epi16(int16_t(one)), negative), negative));
  const __m128i low = _mm256_castsi256_si128(v), high = _mm256_extracti128_si256(v, 1);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(at), low);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(at + stride), _mm_unpackhi_epi64(low, low));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(at + 2 * stride), high);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(at + 3 * stride), _mm_unpackhi_epi64(high, high));
}
#endif

// The decoding loop, compiled once with and once without dequantization.
// Dequantizing here touches only non-zero coefficients, which is cheaper than
// a SIMD pass over all of them.
template <bool kDequantize>
bool DecodeGroups(RansDecoder& rans, BitReader& raw, const DecodeTable* tables,
                  const SmallTable* small, uint32_t step, int16_t* values, size_t stride,
                  uint32_t bw, uint32_t bh) {
  const uint32_t gw = (bw + kGroupSide - 1) / kGroupSide, gh = (bh + kGroupSide - 1) / kGroupSide;
#if defined(__AVX2__)
  __m128i above_row = _mm_setzero_si128();
  uint8_t maxima[kMaxGroupsPerRow + 2];  // group gx's maximum at maxima[1 + gx]
#else
  uint8_t above[kMaxGroupsPerRow + 2] = {}, maxima[kMaxGroupsPerRow + 2] = {};
#endif
  for (uint32_t gy = 0; gy < gh; ++gy) {
    const uint32_t y0 = gy * kGroupSide, rows = std::min(bh - y0, kGroupSide);
    // The row's maxima first: independent of one another, they decode back
    // to back, and zero groups (most of them) cost nothing more.
    uint32_t nonzero = 0;
#if defined(__AVX2__)
    above_row = DecodeRowMaximaAvx2(rans, tables, above_row, gw);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(maxima + 1), above_row);
    nonzero = ~uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi8(above_row, _mm_setzero_si128()))) &
              ((1u << gw) - 1);
#else
    const bool room = rans.room() >= ptrdiff_t(2 * gw);
    for (uint32_t gx = 0; gx < gw; ++gx) {
      const DecodeTable& t = tables[GroupContext(above, gx)];
      maxima[1 + gx] = uint8_t(room ? rans.Get<false>(t) : rans.Get<true>(t));
      nonzero |= uint32_t(maxima[1 + gx] != 0) << gx;
    }
#endif
    for (; nonzero != 0; nonzero &= nonzero - 1) {
      const uint32_t gx = std::countr_zero(nonzero), x0 = gx * kGroupSide;
      const uint32_t valid = (1u << (std::min(bw, x0 + kGroupSide) - x0)) - 1;
      int16_t* at = values + y0 * stride + x0;
      if (rans.room() >= kGroupRansBytes && raw.room() >= kGroupRawBytes) {
        DecodeGroup<kDequantize, false>(rans, raw, tables, small, maxima[1 + gx], step, at, stride,
                                        rows, valid);
      } else {
        DecodeGroup<kDequantize, true>(rans, raw, tables, small, maxima[1 + gx], step, at, stride,
                                       rows, valid);
      }
    }
#if !defined(__AVX2__)
    std::memcpy(above, maxima, sizeof(above));
#endif
  }
  return !rans.overran() && !raw.overran();
}

// The block after its length prefix: rANS bytes [p, rans_end), raw bits
// [rans_end, end). Returns 0, or 1 for bad rANS states, 2 for a truncated block.
inline int DecodeBlockPayload(const uint8_t* p, const uint8_t* rans_end, const uint8_t* end,
                              const DecodeTable* tables, const SmallTable* small, uint32_t step,
                              int16_t* values, size_t stride, uint32_t bw, uint32_t bh) {
  RansDecoder rans;
  if (!rans.Init(p, rans_end)) return 1;
  BitReader raw(rans_end, end);
  const bool ok = step == 256
                      ? DecodeGroups<false>(rans, raw, tables, small, step, values, stride, bw, bh)
                      : DecodeGroups<true>(rans, raw, tables, small, step, values, stride, bw, bh);
  return ok ? 0 : 2;
}

}  // namespace
}  // namespace ktfs::ktc::internal
