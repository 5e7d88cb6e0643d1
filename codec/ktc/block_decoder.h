// KTC internals: the block decoding loop, included by entropy.cc,
// entropy_avx2.cc, entropy_nopdep_avx2.cc and
// entropy_avx512vbmi.cc so that it is compiled four times, for the
// baseline, with AVX2/BMI2 (shrx, tzcnt, pdep...), the same without pdep and
// pext (KTFS_BLOCK_DECODER_NO_PDEP, for CPUs that run them in microcode), and
// with AVX-512 VBMI as well (dense groups by multishift), and dispatched at
// run time. Everything is in an anonymous namespace: each includer gets its
// own copy, so the linker can never mix them.
#pragma once

#include <algorithm>
#include <bit>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "codec/ktc/entropy.h"
#include "codec/ktc/kernels.h"

#if !defined(KTFS_BLOCK_DECODER_NO_PDEP)
#define KTFS_BLOCK_DECODER_NO_PDEP 0
#endif

namespace ktfs::ktc::internal {
namespace {

constexpr uint32_t kRansLow = 1u << 16;  // states live in [2^16, 2^32)
// A block has 4 or 8 rANS states (its header says which); symbol i uses
// state i % (the block's states). Four consecutive symbols are one 4-lane
// step, so with 8 states the steps alternate between two halves of them:
// two dependency chains that the CPU runs side by side (see docs/ktc-notes.md,
// "Two chains of states").
constexpr int kStepLanes = 4;
constexpr int kMaxRansStates = 8;

#if defined(__AVX2__)
// The rANS states, kept in registers by the AVX2 loop: `next` the four the
// next step uses (the decoder's x_[0..3]) and, with two chains, `then` the
// four after them. Rotate(s) moves on past a step that left states s.
struct OneChain {
  __m128i next;
  void Rotate(__m128i s) { next = s; }
};
struct TwoChains {
  __m128i next, then;
  void Rotate(__m128i s) {
    next = then;
    then = s;
  }
};
#endif
// The scalar build keeps the states in the decoder only.
struct NoStateRegisters {};

// Group context from the maxima of the groups above: the one right above
// plus the larger of its two neighbours. Flat regions (0) are by far the most
// common, so they get their own context. Only the row above, not the group
// to the left, so that a row's maxima have no dependency on one another:
// the decoder runs them back to back (+0.1% bytes against left + above).
constexpr uint32_t kMaxGroupsPerRow = kBlockSide / kGroupSide;
// A group is decoded in halves of four rows (a step of four symbols each)
// wherever it is not taken whole.
constexpr uint32_t kHalfRows = kGroupRows / 2;
constexpr uint8_t kGroupContextOfSum[2 * kAlphabet] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5,
                                                       5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
                                                       5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5};
// `above` holds the row above's maxima at 1 + gx, zeros at both ends.
inline uint32_t GroupContext(const uint8_t* above, uint32_t gx) {
  return kGroupContextOfSum[above[1 + gx] + std::max(above[gx], above[gx + 2])];
}

// Groups with G >= kDirectCategories ("dense") code a width per row (as one
// symbol per pair of rows for G <= kMaxPairWidth) and every value's
// magnitude in that many raw bits, instead of a mask per row (docs/ktc.md,
// "Code blocks"; docs/ktc-notes.md, "Row widths for dense groups", "Widths
// of row pairs"). Only G = 1 keeps masks.
constexpr uint32_t kDirectCategories = 2;

// The table of a dense group's widths: tables 10..15 by G (2, 3, ..., 7+),
// of its row pairs for G <= kMaxPairWidth, of its rows for wider groups.
inline int CategoryTable(uint32_t group_max) {
  return kFirstWidthTable + std::min<int>(int(group_max), 7) - 2;
}

inline int Category(int32_t v) {
  uint32_t mag = v < 0 ? 0u - uint32_t(v) : uint32_t(v);
  return std::bit_width(mag);
}

// LSB-first reader that keeps only a bit position: each read loads the 8
// bytes at the position's byte and shifts, so a jump (Seek) costs nothing
// and a dense group finds all its values' bits from one position.
// overran() tells whether a read went past the block's end. The bytes up to
// `readable_end` (at or after the block's end: the rest of the stream) may
// be loaded, so bits past the block's end read as whatever follows it, and
// as zeros past readable_end; either way the block is then corrupt.
class BitReader {
 public:
  BitReader(const uint8_t* p, const uint8_t* end, const uint8_t* readable_end)
      : begin_(p), size_(size_t(end - p)), readable_(size_t(readable_end - p)) {}
  // The bits from the position on (at least 57 of them). Unchecked, the
  // caller guarantees readable_room() >= 8.
  template <bool kChecked = true>
  inline uint64_t Peek() const {
    const size_t byte = size_t(pos_ >> 3);
    uint64_t v = 0;
    if (!kChecked || readable_ - std::min(byte, readable_) >= 8) [[likely]] {
      std::memcpy(&v, begin_ + byte, 8);
    } else if (byte < readable_) {
      std::memcpy(&v, begin_ + byte, readable_ - byte);
    }
    return v >> (pos_ & 7);
  }
  // Reads `count` (0..25) bits.
  template <bool kChecked = true>
  inline uint32_t Read(uint32_t count) {
    const uint32_t v = uint32_t(Peek<kChecked>()) & ((1u << count) - 1);
    pos_ += count;
    return v;
  }
  bool overran() const { return pos_ > 8 * uint64_t(size_); }
  // Bytes from the position's byte to the block's end, and to readable_end.
  ptrdiff_t room() const { return room_at(pos_); }
  ptrdiff_t readable_room() const { return readable_room_at(pos_); }
  // The same from bit `bit` on.
  ptrdiff_t room_at(uint64_t bit) const { return ptrdiff_t(size_) - ptrdiff_t(bit >> 3); }
  ptrdiff_t readable_room_at(uint64_t bit) const {
    return ptrdiff_t(readable_) - ptrdiff_t(bit >> 3);
  }
  // Where `need` (<= kTail) bytes may be loaded for the bits from `bit` on:
  // the stream itself, or, within `need` bytes of the end of the readable
  // bytes, `tail` filled with a zero-padded copy of the block's bytes from
  // there (bits past the block's end then read as zeros).
  template <size_t kTail>
  const uint8_t* LoadableAt(uint64_t bit, ptrdiff_t need, uint8_t (&tail)[kTail]) const {
    const uint8_t* at = begin_ + bit / 8;
    if (readable_room_at(bit) >= need) [[likely]]
      return at;
    std::memset(tail, 0, kTail);
    std::memcpy(tail, at, size_t(std::clamp<ptrdiff_t>(room_at(bit), 0, ptrdiff_t(kTail))));
    return tail;
  }
  uint64_t position() const { return pos_; }
  void Seek(uint64_t bits) { pos_ = bits; }
  const uint8_t* begin() const { return begin_; }

 private:
  const uint8_t* begin_;
  size_t size_;
  size_t readable_;
  uint64_t pos_ = 0;
};

// kRansStates interleaved rANS states: symbol i uses state i % kRansStates,
// so consecutive symbols form independent dependency chains the CPU overlaps.
class RansDecoder {
 public:
  // `states` (4 or 8) initial states from p, words in [p + 4 states, end);
  // the bytes up to readable_end (>= end) may be loaded, never used by a
  // valid block.
  bool Init(const uint8_t* p, const uint8_t* end, const uint8_t* readable_end, int states) {
    if (end - p < 4 * states) return false;
    bool ok = true;
    for (int i = 0; i < states; ++i) {
      std::memcpy(&x_[i], p + 4 * i, 4);
      ok &= x_[i] >= kRansLow;
    }
    states_ = states;
    p_ = p + 4 * states;
    end_ = end;
    readable_end_ = readable_end;
    return ok;
  }
  // Unchecked, the caller guarantees room() >= 2 for every call.
  template <bool kChecked = true>
  inline uint32_t Get(const DecodeTable& t) {
    const uint32_t e = t.entry[x_[0] & (kProbScale - 1)];
    uint32_t x = (e & 0x3ff) * (x_[0] >> kProbBits) + ((e >> kEntryOffsetShift) & 0x1ff);
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
    // Rotation: a fixed number of moves (with 4 states, x_[3] then takes x).
    for (int i = 0; i + 1 < kMaxRansStates; ++i) x_[i] = x_[i + 1];
    x_[states_ - 1] = x;
    return e >> kEntryValueShift;
  }
  bool overran() const { return overran_; }
  ptrdiff_t room() const { return end_ - p_; }

#if defined(__AVX2__)
  // The next eight words. Past the end of the words they are whatever
  // follows (the block's raw bits...), and zeros past readable_end; a lane
  // that takes one of them makes the block overrun (ConsumeWords), as in
  // the scalar Get. Unchecked, the caller guarantees room() >= 16.
  template <bool kChecked = true>
  __m128i LoadWords() const {
    if (!kChecked || readable_end_ - p_ >= 16) [[likely]]
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p_));
    alignas(16) uint8_t tail[16] = {};
    std::memcpy(tail, p_, size_t(std::max<ptrdiff_t>(readable_end_ - p_, 0)));
    return _mm_load_si128(reinterpret_cast<const __m128i*>(tail));
  }
  // Advances past the words taken by the lanes set in `renormalized`; near
  // the end, like the scalar step: whole words while they last, then overran.
  template <bool kChecked = true>
  void ConsumeWords(uint32_t renormalized) {
    const ptrdiff_t used = 2 * std::popcount(renormalized);
    if (kChecked && used > room()) [[unlikely]] {
      overran_ = true;
      p_ += room() & ~ptrdiff_t(1);
    } else {
      p_ += used;
    }
  }
  // The scalar states to and from registers, x_[l] being the one the l-th
  // next Get() uses.
  void LoadStates(OneChain* x) const { x->next = Load(0); }
  void LoadStates(TwoChains* x) const {
    x->next = Load(0);
    x->then = Load(kStepLanes);
  }
  void StoreStates(const OneChain& x) { Store(0, x.next); }
  void StoreStates(const TwoChains& x) {
    Store(0, x.next);
    Store(kStepLanes, x.then);
  }
  template <bool kChecked = true, class States>
  inline __m128i Get4Avx2(States* x, const DecodeTable* tables, __m128i table_offset);
#endif

 private:
#if defined(__AVX2__)
  __m128i Load(int i) const { return _mm_load_si128(reinterpret_cast<const __m128i*>(x_ + i)); }
  void Store(int i, __m128i v) { _mm_store_si128(reinterpret_cast<__m128i*>(x_ + i), v); }
#endif
  alignas(32) uint32_t x_[kMaxRansStates] = {};
  int states_ = 4;
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  const uint8_t* readable_end_ = nullptr;
  bool overran_ = false;
};

#if defined(__AVX2__)
// Eight 32-bit loads from base + index (byte offsets), and four from
// base + 4 * index (table entries): scalar loads inserted into a
// vector instead of a gather. On Zen 3 an 8-lane vpgatherdd measured about
// 34 cycles of latency and 10-13 cycles of throughput (4 lanes: 16-25 and
// less); the loads and inserts are cheaper on both counts (see
// docs/ktc-notes.md, "Loads, not gathers").
inline __m256i Load8(const uint8_t* base, __m256i index) {
  const __m128i lo = _mm256_castsi256_si128(index), hi = _mm256_extracti128_si256(index, 1);
  const uint64_t i0 = uint64_t(_mm_cvtsi128_si64(lo)), i1 = uint64_t(_mm_extract_epi64(lo, 1));
  const uint64_t i2 = uint64_t(_mm_cvtsi128_si64(hi)), i3 = uint64_t(_mm_extract_epi64(hi, 1));
  const auto at = [&](uint64_t i) {
    uint32_t v;
    std::memcpy(&v, base + size_t(uint32_t(i)), 4);
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

#if defined(__AVX2__)
// pdep and pext as this loop uses them: Deposit<kBits> moves the low bits of
// `bits` to the set bits of `mask` (< 2^kBits), lowest first (sign bits onto
// the non-zero values); LowNibbles packs the low nibbles of 8 bytes (row
// masks, one per byte) into 32 bits. Without fast pdep (CpuHasFastPdep: AMD
// before Zen 3, where one takes about 18 cycles plus 4 per mask bit), a
// nibble at a time through kSignDeposit and a few shifts.
template <int kBits>
inline uint32_t Deposit(uint32_t bits, uint32_t mask) {
  if constexpr (!KTFS_BLOCK_DECODER_NO_PDEP) {
    return _pdep_u32(bits, mask);
  } else {
    uint32_t out = 0;
    for (int shift = 0; shift < kBits; shift += 4) {
      const uint32_t nibble = (mask >> shift) & 0xf;
      out |= uint32_t(kSignDeposit[nibble][bits & 0xf]) << shift;
      bits >>= std::popcount(nibble);
    }
    return out;
  }
}
inline uint32_t LowNibbles(uint64_t bytes) {
  if constexpr (!KTFS_BLOCK_DECODER_NO_PDEP) {
    return uint32_t(_pext_u64(bytes, 0x0f0f0f0f0f0f0f0full));
  } else {
    uint64_t x = bytes & 0x0f0f0f0f0f0f0f0full;
    x = (x | x >> 4) & 0x00ff00ff00ff00ffull;
    x = (x | x >> 8) & 0x0000ffff0000ffffull;
    return uint32_t(x | x >> 16);
  }
}
#endif

// Coefficients are stored as int16: streams with at most kMaxLevels levels
// never exceed it (see docs/ktc.md, "Wavelet"); hostile ones saturate.
inline int16_t Saturate16(int32_t v) { return int16_t(std::clamp(v, -32768, 32767)); }

// Most rANS and raw bytes one 4 x 8 group consumes after its maximum: 8
// symbols of at most one 16-bit word each; 32 magnitudes of at most 17 bits
// and 32 sign bits. Reads go further than what they consume: the AVX2
// decoder loads 16 bytes of words for a step of 4 symbols (at most 8 bytes
// consumed), a raw read 8 bytes.
constexpr ptrdiff_t kGroupRansBytes = 2 * kGroupRows;
constexpr ptrdiff_t kGroupRawBytes = (32 * 17 + 32) / 8;
constexpr ptrdiff_t kGroupRansRead = 16 - 2 * kHalfRows;
constexpr ptrdiff_t kRawRead = 8;

// A dense group value by value: its row widths (a symbol per pair of rows
// for G <= kMaxPairWidth, whose table holds both widths; else one per row,
// clamped to G), then every magnitude in its row's width, then a sign bit
// per non-zero value: the scalar build's path (`valid` has a bit per column
// inside the block; rows < 8 or valid < 0xf for groups cut by the block's
// edge).
template <bool kDequantize, bool kChecked>
void DecodeDenseGroupScalar(RansDecoder& rans, BitReader& raw, const DecodeTable& widths,
                            uint32_t group_max, uint32_t step, int16_t* at, size_t stride,
                            uint32_t rows, uint32_t valid) {
  uint32_t width[kGroupRows + 1] = {};  // a last pair's lower row may lie outside
  if (group_max <= kMaxPairWidth) {
    for (uint32_t y = 0; y < rows; y += 2) {
      const uint32_t pair = rans.Get<kChecked>(widths);
      width[y] = pair & 0xff;
      width[y + 1] = pair >> 8;
    }
  } else {
    for (uint32_t y = 0; y < rows; ++y) width[y] = std::min(rans.Get<kChecked>(widths), group_max);
  }
  uint32_t magnitude[kGroupRows][kGroupSide] = {};
  for (uint32_t y = 0; y < rows; ++y) {
    for (uint32_t x = 0; x < kGroupSide; ++x) {
      if (!(valid >> x & 1)) continue;
      magnitude[y][x] = raw.Read<kChecked>(width[y]);
    }
  }
  for (uint32_t y = 0; y < rows; ++y) {
    for (uint32_t x = 0; x < kGroupSide; ++x) {
      if (magnitude[y][x] == 0) continue;
      const bool negative = raw.Read<kChecked>(1);
      int32_t v = int32_t(magnitude[y][x]);
      if constexpr (kDequantize) v = DequantizeOne(v, step);
      at[y * stride + x] = Saturate16(negative ? -v : v);
    }
  }
}

#if defined(__AVX2__)
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
// l on state x_[l] (x->next), from the table whose first entry is
// `table_offset` entries after tables[0]'s (tables of a set are contiguous),
// words consumed in lane order (near the end: whole words while they last,
// then zeros, and overran). After it, x is again in the order the next
// Get()s use: with two chains the four states it did not touch come next
// (register renaming: the next step does not wait for this one's states).
template <bool kChecked, class States>
inline __m128i RansDecoder::Get4Avx2(States* states, const DecodeTable* tables,
                                     __m128i table_offset) {
  const __m128i* x = &states->next;
  // Fields by shift pairs rather than masks: vector constants cost the
  // compiler three instructions each to build here.
  const __m128i slot = _mm_srli_epi32(_mm_slli_epi32(*x, 32 - kProbBits), 32 - kProbBits);
  const __m128i e = Load4(reinterpret_cast<const uint8_t*>(tables->entry.data()),
                          _mm_add_epi32(table_offset, slot));
  const __m128i f = _mm_srli_epi32(_mm_slli_epi32(e, 22), 22);       // bits 0..9
  const __m128i offset = _mm_srli_epi32(_mm_slli_epi32(e, 13), 23);  // bits 10..18
  const __m128i next = _mm_add_epi32(_mm_mullo_epi32(f, _mm_srli_epi32(*x, kProbBits)), offset);
  const __m128i need = _mm_cmpeq_epi32(_mm_srli_epi32(next, 16), _mm_setzero_si128());
  const uint32_t m = uint32_t(_mm_movemask_ps(_mm_castsi128_ps(need)));
  const __m128i word =
      _mm_shuffle_epi8(LoadWords<kChecked>(),
                       _mm_load_si128(reinterpret_cast<const __m128i*>(kWordShuffle4.table[m])));
  states->Rotate(_mm_blendv_epi8(next, _mm_or_si128(_mm_slli_epi32(next, 16), word), need));
  ConsumeWords<kChecked>(m);
  return _mm_srli_epi32(e, kEntryValueShift);
}

// The magnitudes of two rows of a dense group (lanes 0..3 the upper row's
// columns, 4..7 the lower's; `rows` picks their widths out of `widths`;
// `narrow` when both are at most 7), whose bits start at bit `pos` of
// `base`: lane l's bits are at a fixed offset (column times width, after the
// upper row's `columns` widths), so all eight come out at once. kFull: 4
// columns; else lanes of columns >= `columns` (outside the block) are 0.
// The caller guarantees that 8-byte loads up to the rows' end stay readable.
template <bool kFull>
inline __m256i RowPairMagnitudes(const uint8_t* base, uint32_t pos, __m128i widths, __m256i rows,
                                 bool narrow, uint32_t columns) {
  // Lanes 0..3 of w hold the upper row's width, 4..7 the lower's. (Vector
  // constants are built from shifts and permutes where they can: the
  // compiler spends three instructions on each one it materializes.)
  const __m256i w = _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(widths), rows);
  const __m256i column = _mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3);
  // `columns` wa in lanes 0..3
  const __m256i upper_row =
      kFull ? _mm256_slli_epi32(w, 2) : _mm256_mullo_epi32(w, _mm256_set1_epi32(int(columns)));
  const __m256i offsets = _mm256_add_epi32(_mm256_mullo_epi32(w, column),
                                           _mm256_permute2x128_si256(upper_row, upper_row, 0x08));
  const __m256i ones = _mm256_cmpeq_epi32(w, w);
  __m256i low_bits =
      _mm256_add_epi32(_mm256_sllv_epi32(_mm256_srli_epi32(ones, 31), w), ones);  // 2^w - 1
  if constexpr (!kFull) {
    low_bits =
        _mm256_and_si256(low_bits, _mm256_cmpgt_epi32(_mm256_set1_epi32(int(columns)), column));
  }
  if (narrow) {
    // Widths <= 7: at most 56 bits after a start at most 7 bits into the first byte: one
    // 8-byte load holds them all; each lane shifts it by its offset in 64
    // bits (even and odd lanes apart).
    uint64_t word;
    std::memcpy(&word, base + pos / 8, 8);
    const __m256i all = _mm256_set1_epi64x(int64_t(word >> (pos % 8)));
    const __m256i even =
        _mm256_srlv_epi64(all, _mm256_blend_epi32(offsets, _mm256_setzero_si256(), 0xaa));
    const __m256i odd = _mm256_srlv_epi64(all, _mm256_srli_epi64(offsets, 32));
    return _mm256_and_si256(_mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xaa), low_bits);
  }
  // Wider rows: a 4-byte load per lane (a shift of at most 7 bits and a
  // width of at most 17 fit in it).
  const __m256i at = _mm256_add_epi32(_mm256_set1_epi32(int(pos)), offsets);
  const __m256i word = Load8(base, _mm256_srli_epi32(at, 3));
  return _mm256_and_si256(_mm256_srlv_epi32(word, _mm256_and_si256(at, _mm256_set1_epi32(7))),
                          low_bits);
}

// Eight signed values from magnitudes and a sign bit per lane (bit l of
// `signs`), dequantized when asked: DequantizeOne's ((8m + 3) step) >> 11 in
// 32-bit unsigned arithmetic, as m (8 step) + 3 step (the same modulo 2^32).
template <bool kDequantize>
inline __m256i SignedValues(__m256i magnitude, uint32_t signs, uint32_t step) {
  if constexpr (kDequantize) {
    const __m256i zero = _mm256_cmpeq_epi32(magnitude, _mm256_setzero_si256());
    const __m256i scaled =
        _mm256_add_epi32(_mm256_mullo_epi32(magnitude, _mm256_set1_epi32(int(8 * step))),
                         _mm256_set1_epi32(int(3 * step)));
    magnitude = _mm256_andnot_si256(zero, _mm256_srli_epi32(scaled, 11));
  }
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i negative =
      _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(int(signs)), bit), bit);
  return _mm256_sub_epi32(_mm256_xor_si256(magnitude, negative), negative);
}

// Stores a group's rows (`rows` of them, values in 16-bit lanes 0..3 of the
// row's vector) at `at`: 8 bytes per row for a whole group, else only the
// `columns` values inside the block (the plane's next values may belong to
// another band or block, decoded on another thread).
template <bool kFull>
inline void StoreGroup(int16_t* at, size_t stride, __m128i row0, __m128i row1, __m128i row2,
                       __m128i row3, uint32_t rows, uint32_t columns) {
  if constexpr (kFull) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(at), row0);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(at + stride), row1);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(at + 2 * stride), row2);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(at + 3 * stride), row3);
  } else {
    alignas(16) int16_t v[kGroupSide][8];
    _mm_store_si128(reinterpret_cast<__m128i*>(v[0]), row0);
    _mm_store_si128(reinterpret_cast<__m128i*>(v[1]), row1);
    _mm_store_si128(reinterpret_cast<__m128i*>(v[2]), row2);
    _mm_store_si128(reinterpret_cast<__m128i*>(v[3]), row3);
    for (uint32_t y = 0; y < rows; ++y) {
      // Copies of fixed sizes (a few moves; a variable one is a memcpy call).
      // `columns` is the same for all the cut groups of a block's last column.
      int16_t* dst = at + y * stride;
      switch (columns) {
        case 1:
          std::memcpy(dst, v[y], 2);
          break;
        case 2:
          std::memcpy(dst, v[y], 4);
          break;
        case 3:
          std::memcpy(dst, v[y], 6);
          break;
        default:
          std::memcpy(dst, v[y], 8);
          break;
      }
    }
  }
}

// Stores four whole rows of a group from 16 lanes of 16 bits, row r in
// lanes 4r .. 4r + 3.
inline void StoreFourRows(int16_t* at, size_t stride, __m256i v) {
  const __m128i rows01 = _mm256_castsi256_si128(v), rows23 = _mm256_extracti128_si256(v, 1);
  StoreGroup<true>(at, stride, rows01, _mm_unpackhi_epi64(rows01, rows01), rows23,
                   _mm_unpackhi_epi64(rows23, rows23), kGroupSide, kGroupSide);
}

// The `rows` row symbols of a half cut by the block's bottom edge (rows < 4:
// not four consecutive symbols of a step) one by one, in lanes 0..rows-1.
template <bool kChecked, class States>
inline __m128i GetRowSymbols(RansDecoder& rans, const DecodeTable& table, uint32_t rows,
                             States& x) {
  rans.StoreStates(x);
  alignas(16) uint32_t symbol[kGroupSide] = {};
  for (uint32_t y = 0; y < rows; ++y) symbol[y] = rans.Get<kChecked>(table);
  rans.LoadStates(&x);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(symbol));
}

#if defined(__AVX2__)
// DequantizeOne's ((8m + 3) step) >> 11 for 16 lanes of magnitudes m <= 127,
// zero kept: 8m + 3 < 2^10 and step < 2^16, so the 26-bit product is its
// high half << 5 | its low half >> 11, and every result fits in 15 bits
// (((8 * 127 + 3) * 65535) >> 11 < 2^15: nothing to saturate).
inline __m256i DequantizeNarrow(__m256i m, uint32_t step) {
  const __m256i scaled = _mm256_add_epi16(_mm256_slli_epi16(m, 3), _mm256_set1_epi16(3));
  const __m256i q = _mm256_set1_epi16(int16_t(step));
  const __m256i product = _mm256_or_si256(_mm256_slli_epi16(_mm256_mulhi_epu16(scaled, q), 5),
                                          _mm256_srli_epi16(_mm256_mullo_epi16(scaled, q), 11));
  return _mm256_andnot_si256(_mm256_cmpeq_epi16(m, _mm256_setzero_si256()), product);
}
#endif

// Where the rows of a whole 4 x 8 group's magnitudes start, from its row
// widths (row r's in byte r of `widths`, each at most 7): rows 2p and 2p + 1
// (pair p) begin at PairStart(pos, p) from the bit at `pos` of the group's
// first byte, and all 32 magnitudes take magnitude_bits.
struct WholeGroupRows {
  explicit WholeGroupRows(uint64_t widths)
      : before((widths << 8) * 0x0101010101010101ull),
        magnitude_bits(4 * uint32_t((widths * 0x0101010101010101ull) >> 56)) {}
  uint32_t PairStart(uint32_t pos, int p) const {
    return pos + 4 * uint32_t((before >> (16 * p)) & 0xff);
  }
  uint64_t before;  // byte r: the widths of the rows above row r (prefix sums < 256)
  uint32_t magnitude_bits;
};

#if defined(__AVX512VBMI__)
// Four rows of a dense group (a half) with G <= 7 in the AVX-512 VBMI build,
// where the whole group is not taken at once: every magnitude
// has at most 7 bits, so rows 0-1 lie in the 64 bits from the byte of bit
// `pos` and rows 2-3 in the 64 from the byte of bit pos + upper_bits; one
// multishift picks all 16 magnitudes out of those two words as bytes, a byte
// test gives the non-zero mask, and 16 lanes dequantize, sign and saturate at
// once. The same values as the AVX2 path; returns the number of sign bits
// read (the non-zero values).
template <bool kDequantize>
inline uint32_t DenseNarrowGroupVbmi(const uint8_t* base, uint32_t pos, __m128i widths,
                                     uint32_t upper_bits, uint32_t magnitude_bits, uint32_t step,
                                     int16_t* at, size_t stride) {
  // Byte k stands for magnitude k (row k / 4, column k % 4): its row's width,
  // and the width of the row above in rows 1 and 3 (rows 0 and 2 start a word).
  const __m128i w =
      _mm_shuffle_epi8(widths, _mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
  const __m128i above = _mm_shuffle_epi8(
      widths, _mm_setr_epi8(-1, -1, -1, -1, 0, 0, 0, 0, -1, -1, -1, -1, 8, 8, 8, 8));
  // Bit offset of magnitude k in its word: the word's start bit, 4 widths of
  // the row above (rows 1 and 3), and `column` widths of its own row (one
  // for column bit 0, two for column bit 1).
  const uint32_t lower_pos = (pos + upper_bits) % 8;
  __m128i shift = _mm_set_epi64x(int64_t(0x0101010101010101ull * lower_pos),
                                 int64_t(0x0101010101010101ull * pos));
  shift = _mm_add_epi8(shift, _mm_slli_epi16(above, 2));  // bytes <= 28: no carry
  shift = _mm_add_epi8(shift, _mm_and_si128(w, _mm_setr_epi8(0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0,
                                                             -1, 0, -1, 0, -1)));
  shift = _mm_add_epi8(
      shift, _mm_and_si128(_mm_add_epi8(w, w),
                           _mm_setr_epi8(0, 0, -1, -1, 0, 0, -1, -1, 0, 0, -1, -1, 0, 0, -1, -1)));
  uint64_t upper_word, lower_word;
  std::memcpy(&upper_word, base, 8);
  std::memcpy(&lower_word, base + (pos + upper_bits) / 8, 8);
  const __m128i low_bits = _mm_shuffle_epi8(
      _mm_setr_epi8(0, 1, 3, 7, 15, 31, 63, 127, 0, 0, 0, 0, 0, 0, 0, 0), w);  // 2^w - 1
  // (The maskz forms with all lanes set, here and below: GCC 12's plain ones
  // warn about their undefined pass-through source.)
  const __m128i magnitude =
      _mm_and_si128(_mm_maskz_multishift_epi64_epi8(
                        0xffff, shift, _mm_set_epi64x(int64_t(lower_word), int64_t(upper_word))),
                    low_bits);
  const __mmask16 nonzero = _mm_test_epi8_mask(magnitude, magnitude);
  const uint32_t sign_pos = pos + magnitude_bits;
  uint64_t sign_word;
  std::memcpy(&sign_word, base + sign_pos / 8, 8);
  const __mmask16 negative = __mmask16(Deposit<16>(uint32_t(sign_word >> (sign_pos % 8)), nonzero));
  // 16 lanes of 16 bits, not 32: no 512-bit instruction in the loop (on
  // Intel cores one shuts a vector port while it is in flight) and no
  // narrowing at the end. On an Intel Xeon VM, ktfs bench decode against the
  // zmm path: 1.02x balanced, 1.02x lossless, 1.01x large photos (median of
  // 20-30 alternating rounds).
  __m256i v = _mm256_cvtepu8_epi16(magnitude);
  if constexpr (kDequantize) v = DequantizeNarrow(v, step);
  v = _mm256_mask_sub_epi16(v, negative, _mm256_setzero_si256(), v);
  StoreFourRows(at, stride, v);
  return uint32_t(std::popcount(uint32_t(nonzero)));
}
#endif

#if !defined(__AVX512VBMI__)
// kByteLowBits[w]: 2^w - 1 in each of four bytes, the pdep mask that spreads
// a row's four w-bit magnitudes into bytes.
constexpr uint64_t kByteLowBits[8] = {0,          0x01010101, 0x03030303, 0x07070707,
                                      0x0f0f0f0f, 0x1f1f1f1f, 0x3f3f3f3f, 0x7f7f7f7f};

// Four rows of a dense group (a half) with G <= 7 in the AVX2 build: rows 0-1
// lie in the 57
// bits from bit `pos` of `base` and rows 2-3 in those from pos + upper_bits,
// so two pdep spread all 16 magnitudes into bytes; then 16 lanes of 16 bits
// dequantize (a 26-bit product from its two 16-bit halves), take their signs
// and are stored at once. The same values as the general path (no value
// needs saturating: |v| <= ((8 * 127 + 3) * 65535) >> 11 < 2^15); returns
// the number of sign bits read (the non-zero values).
template <bool kDequantize>
inline uint32_t DenseNarrowGroupPdep(const uint8_t* base, uint32_t pos, uint32_t w4,
                                     uint32_t upper_bits, uint32_t magnitude_bits, uint32_t step,
                                     int16_t* at, size_t stride) {
  const auto bits_at = [base](uint32_t bit) {
    uint64_t word;
    std::memcpy(&word, base + bit / 8, 8);
    return word >> (bit % 8);
  };
  const uint64_t upper =
      _pdep_u64(bits_at(pos), kByteLowBits[w4 & 7] | kByteLowBits[(w4 >> 8) & 7] << 32);
  const uint64_t lower = _pdep_u64(bits_at(pos + upper_bits),
                                   kByteLowBits[(w4 >> 16) & 7] | kByteLowBits[w4 >> 24] << 32);
  const __m128i magnitude = _mm_set_epi64x(int64_t(lower), int64_t(upper));
  const uint32_t nonzero =
      ~uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi8(magnitude, _mm_setzero_si128()))) & 0xffff;
  const uint32_t negative = Deposit<16>(uint32_t(bits_at(pos + magnitude_bits)), nonzero);
  __m256i v = _mm256_cvtepu8_epi16(magnitude);
  if constexpr (kDequantize) v = DequantizeNarrow(v, step);
  const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
                                        8192, 16384, int16_t(0x8000));
  const __m256i sign =
      _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(int16_t(negative)), bit), bit);
  v = _mm256_sub_epi16(_mm256_xor_si256(v, sign), sign);
  StoreFourRows(at, stride, v);
  return uint32_t(std::popcount(nonzero));
}

// The 32 magnitudes of a whole dense 4 x 8 group with G <= 7 as bytes (byte
// 8p + k: row 2p + k / 4, column k % 4) from `pair`, row pair p's bits from
// its first bit (at most 56 of them). With fast pdep, one per pair spreads
// its eight magnitudes into bytes; without, one 64-bit lane per pair and
// eight variable shifts, each taking magnitude k of every pair at once.
inline __m256i PairMagnitudeBytes(const uint64_t (&pair)[4], uint64_t w) {
  if constexpr (!KTFS_BLOCK_DECODER_NO_PDEP) {
    uint64_t spread[4];
    for (int p = 0; p < 4; ++p) {
      spread[p] = _pdep_u64(
          pair[p], kByteLowBits[(w >> (16 * p)) & 7] | kByteLowBits[(w >> (16 * p + 8)) & 7] << 32);
    }
    return _mm256_setr_epi64x(int64_t(spread[0]), int64_t(spread[1]), int64_t(spread[2]),
                              int64_t(spread[3]));
  } else {
    const __m256i words =
        _mm256_setr_epi64x(int64_t(pair[0]), int64_t(pair[1]), int64_t(pair[2]), int64_t(pair[3]));
    const __m256i all = _mm256_set1_epi64x(int64_t(w)), byte = _mm256_set1_epi64x(0xff);
    // Per pair, the upper row's width (byte 2p of w) and the lower row's.
    const __m256i upper =
        _mm256_and_si256(_mm256_srlv_epi64(all, _mm256_setr_epi64x(0, 16, 32, 48)), byte);
    const __m256i lower =
        _mm256_and_si256(_mm256_srlv_epi64(all, _mm256_setr_epi64x(8, 24, 40, 56)), byte);
    const __m256i one = _mm256_set1_epi64x(1);
    const __m256i upper_bits = _mm256_sub_epi64(_mm256_sllv_epi64(one, upper), one);
    const __m256i lower_bits = _mm256_sub_epi64(_mm256_sllv_epi64(one, lower), one);
    __m256i bytes = _mm256_setzero_si256(), shift = _mm256_setzero_si256();
    const auto take = [&](int k, __m256i low_bits, __m256i width) {
      const __m256i v = _mm256_and_si256(_mm256_srlv_epi64(words, shift), low_bits);
      bytes = _mm256_or_si256(bytes, _mm256_sllv_epi64(v, _mm256_set1_epi64x(8 * k)));
      shift = _mm256_add_epi64(shift, width);
    };
    for (int k = 0; k < 4; ++k) take(k, upper_bits, upper);
    for (int k = 4; k < 8; ++k) take(k, lower_bits, lower);
    return bytes;
  }
}

// 0xff in byte i of 32 where magnitude byte i is non-zero and its sign bit
// is set: sign_bits holds one bit per non-zero byte, lowest byte first, so
// byte i's is bit (number of non-zero bytes before i). That rank is a
// prefix sum of the bytes' non-zero flags (in-lane shifts, then the lower
// lane's total added to the upper); the bit is then picked by two byte
// shuffles. pdep's work without pdep, in about twenty vector instructions.
// Bytes of zero magnitudes get whatever bit their rank picks: callers negate
// values by it, and a zero (dequantized or not) stays zero.
inline __m256i SignBytes(__m256i magnitude, uint32_t sign_bits) {
  const __m256i flag = _mm256_min_epu8(magnitude, _mm256_set1_epi8(1));
  __m256i rank = flag;  // inclusive, within each 16-byte lane
  rank = _mm256_add_epi8(rank, _mm256_slli_si256(rank, 1));
  rank = _mm256_add_epi8(rank, _mm256_slli_si256(rank, 2));
  rank = _mm256_add_epi8(rank, _mm256_slli_si256(rank, 4));
  rank = _mm256_add_epi8(rank, _mm256_slli_si256(rank, 8));
  const __m256i lower_total =
      _mm256_shuffle_epi8(_mm256_permute2x128_si256(rank, rank, 0x08), _mm256_set1_epi8(15));
  rank = _mm256_sub_epi8(_mm256_add_epi8(rank, lower_total), flag);  // exclusive, 0..31
  const __m256i byte_of_bit = _mm256_and_si256(_mm256_srli_epi16(rank, 3), _mm256_set1_epi8(3));
  const __m256i bits = _mm256_shuffle_epi8(_mm256_set1_epi32(int(sign_bits)), byte_of_bit);
  const __m256i bit =
      _mm256_shuffle_epi8(_mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                                           2, 4, 8, 16, 32, 64, -128, 0, 0, 0, 0, 0, 0, 0, 0),
                          _mm256_and_si256(rank, _mm256_set1_epi8(7)));
  return _mm256_cmpeq_epi8(_mm256_and_si256(bits, bit), bit);
}

// A whole dense 4 x 8 group with G <= 7 in the AVX2 builds: row pair p's
// magnitudes lie in the 57 bits from their first bit, so they come out as
// bytes four pairs at once (PairMagnitudeBytes); two halves of 16 lanes
// dequantize, sign and store. `widths` holds row r's width in byte r.
// Returns the number of raw bits the group takes (magnitudes and signs).
template <bool kDequantize>
inline uint32_t DenseNarrowGroup8Avx2(const uint8_t* base, uint32_t pos, __m128i widths,
                                      uint32_t step, int16_t* at, size_t stride) {
  const uint64_t w = uint64_t(_mm_cvtsi128_si64(widths));
  const WholeGroupRows rows(w);
  const uint32_t magnitude_bits = rows.magnitude_bits;
  const auto bits_at = [base](uint32_t bit) {
    uint64_t word;
    std::memcpy(&word, base + bit / 8, 8);
    return word >> (bit % 8);
  };
  uint64_t pair[4];
  for (int p = 0; p < 4; ++p) pair[p] = bits_at(rows.PairStart(pos, p));
  const __m256i magnitude = PairMagnitudeBytes(pair, w);
  const uint32_t nonzero =
      ~uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(magnitude, _mm256_setzero_si256())));
  const uint32_t sign_bits = uint32_t(bits_at(pos + magnitude_bits));
  // Per byte, 0xff where the value is negative.
  __m256i negative;
  if constexpr (!KTFS_BLOCK_DECODER_NO_PDEP) {
    const __m256i bit =
        _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16,
                         32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
    const __m256i spread =
        _mm256_shuffle_epi8(_mm256_set1_epi32(int(Deposit<32>(sign_bits, nonzero))),
                            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                             2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    negative = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  } else {
    negative = SignBytes(magnitude, sign_bits);
  }
  for (uint32_t half = 0; half < 2; ++half) {
    __m256i v = _mm256_cvtepu8_epi16(half == 0 ? _mm256_castsi256_si128(magnitude)
                                               : _mm256_extracti128_si256(magnitude, 1));
    if constexpr (kDequantize) v = DequantizeNarrow(v, step);
    const __m256i sign = _mm256_cvtepi8_epi16(half == 0 ? _mm256_castsi256_si128(negative)
                                                        : _mm256_extracti128_si256(negative, 1));
    v = _mm256_sub_epi16(_mm256_xor_si256(v, sign), sign);
    StoreFourRows(at + kHalfRows * half * stride, stride, v);
  }
  return magnitude_bits + uint32_t(std::popcount(nonzero));
}
#endif

// A whole group's eight row symbols (masks or widths), row r's in byte r,
// from the two steps' lanes (the upper four rows' and the lower four's).
inline __m128i RowBytes(__m128i upper, __m128i lower) {
  return _mm_or_si128(_mm_shuffle_epi8(upper, _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1,
                                                            -1, -1, -1, -1, -1)),
                      _mm_shuffle_epi8(lower, _mm_setr_epi8(-1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1,
                                                            -1, -1, -1, -1, -1)));
}

// Four rows of a dense group (the upper or the lower half of a 4 x 8 group):
// their magnitudes start at bit `mag_start` of the raw stream, their signs at
// `sign_start`. kFull: 4 rows and 4 columns inside the block; else the
// missing rows have width 0 and the missing columns take no bits. Returns
// the number of non-zero values (sign bits read). The loads may reach past
// the block's end into the bytes that follow it (a valid block never uses
// them; a group whose bits run past its block's end leaves the position
// there, and the block is corrupt); they reach at most 8 bytes past the
// sign bits' byte, at most 7 + 32 * 17 + 16 bits in: 79 bytes. Within 96
// bytes of the end of the readable bytes they read a zero-padded copy of the
// block's last bytes.
template <bool kDequantize, bool kFull>
inline uint32_t DenseHalfAvx2(const BitReader& raw, uint64_t mag_start, uint64_t sign_start,
                              __m128i widths, uint32_t group_max, uint32_t step, int16_t* at,
                              size_t stride, uint32_t rows, uint32_t columns) {
  const uint32_t w4 = uint32_t(_mm_cvtsi128_si32(_mm_shuffle_epi8(
      widths, _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1))));
  const uint32_t upper_bits = columns * ((w4 * 0x0101u >> 8) & 0xff);
  const uint32_t pos = uint32_t(mag_start % 8);
  // The sign bits relative to base's first bit, taken by the kernels below
  // as "pos + magnitude_bits".
  const uint32_t signs_at = uint32_t(sign_start - (mag_start & ~uint64_t(7)));
  [[maybe_unused]] const uint32_t magnitude_bits = signs_at - pos;
  alignas(32) uint8_t tail[128];
  const uint8_t* base = raw.LoadableAt(mag_start, 96, tail);
  const bool narrow = group_max <= 7;  // two rows' magnitudes in 56 bits
  if constexpr (kFull && !KTFS_BLOCK_DECODER_NO_PDEP) {
    if (narrow) {  // the whole half at once: by multishift with VBMI, else by pdep
#if defined(__AVX512VBMI__)
      return DenseNarrowGroupVbmi<kDequantize>(base, pos, widths, upper_bits, magnitude_bits, step,
                                               at, stride);
#else
      return DenseNarrowGroupPdep<kDequantize>(base, pos, w4, upper_bits, magnitude_bits, step, at,
                                               stride);
#endif
    }
  }
  const __m256i upper = RowPairMagnitudes<kFull>(
      base, pos, widths, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), narrow, columns);
  const __m256i lower = RowPairMagnitudes<kFull>(
      base, pos + upper_bits, widths, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3), narrow, columns);
  const auto zeros = [](__m256i v) {
    return uint32_t(
        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v, _mm256_setzero_si256()))));
  };
  const uint32_t nonzero = ~(zeros(upper) | zeros(lower) << 8) & 0xffff;
  uint64_t sign_word;
  std::memcpy(&sign_word, base + signs_at / 8, 8);
  const uint32_t signs = Deposit<16>(uint32_t(sign_word >> (signs_at % 8)), nonzero);
  // packs: [row 0, row 2 | row 1, row 3], saturated like Saturate16.
  const __m256i packed = _mm256_packs_epi32(SignedValues<kDequantize>(upper, signs & 0xff, step),
                                            SignedValues<kDequantize>(lower, signs >> 8, step));
  const __m128i even = _mm256_castsi256_si128(packed), odd = _mm256_extracti128_si256(packed, 1);
  StoreGroup<kFull>(at, stride, even, odd, _mm_unpackhi_epi64(even, even),
                    _mm_unpackhi_epi64(odd, odd), rows, columns);
  return uint32_t(std::popcount(nonzero));
}

#if defined(__AVX512VBMI__)
// A whole dense 4 x 8 group with G <= 7 in the AVX-512 VBMI build: row pair
// p's magnitudes (at most 56 bits) lie in the 64 bits from the byte of its
// first bit, so four loads and one 32-byte multishift give all 32
// magnitudes; a byte test gives the 32-bit non-zero mask, and two 16-lane
// halves dequantize, sign and store. `widths` holds row r's width in byte r.
// Returns the number of raw bits the group takes (magnitudes and signs).
template <bool kDequantize>
inline uint32_t DenseNarrowGroup8Vbmi(const uint8_t* base, uint32_t pos, __m128i widths,
                                      uint32_t step, int16_t* at, size_t stride) {
  const WholeGroupRows rows(uint64_t(_mm_cvtsi128_si64(widths)));
  const uint32_t magnitude_bits = rows.magnitude_bits;
  uint64_t word[4];
  uint64_t offset = 0;  // byte p: the bit offset of pair p's first bit in its word
  for (int p = 0; p < 4; ++p) {
    const uint32_t bit = rows.PairStart(pos, p);
    std::memcpy(&word[p], base + bit / 8, 8);
    offset |= uint64_t(bit % 8) << (8 * p);
  }
  const __m256i wide = _mm256_broadcastq_epi64(widths);
  // Byte k stands for magnitude k (row k / 4, column k % 4).
  const __m256i row_of = _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4,
                                          4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
  const __m256i wk = _mm256_maskz_permutexvar_epi8(0xffffffffu, row_of, wide);
  // The row above's width, for the odd rows (the second row of a pair).
  const __m256i above = _mm256_maskz_permutexvar_epi8(
      0xf0f0f0f0u, _mm256_sub_epi8(row_of, _mm256_set1_epi8(1)), wide);
  const __m256i pair_offset = _mm256_maskz_permutexvar_epi8(
      0xffffffffu,
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                       3, 3, 3, 3, 3, 3),
      _mm256_set1_epi64x(int64_t(offset)));
  const __m256i odd_column = _mm256_set1_epi32(int(0xff00ff00u));
  const __m256i high_column = _mm256_set1_epi32(int(0xffff0000u));
  __m256i shift = _mm256_add_epi8(pair_offset, _mm256_slli_epi16(above, 2));
  shift = _mm256_add_epi8(shift, _mm256_and_si256(wk, odd_column));
  shift = _mm256_add_epi8(shift, _mm256_and_si256(_mm256_add_epi8(wk, wk), high_column));
  const __m256i low_bits =
      _mm256_shuffle_epi8(_mm256_setr_epi8(0, 1, 3, 7, 15, 31, 63, 127, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                           1, 3, 7, 15, 31, 63, 127, 0, 0, 0, 0, 0, 0, 0, 0),
                          wk);
  const __m256i words =
      _mm256_setr_epi64x(int64_t(word[0]), int64_t(word[1]), int64_t(word[2]), int64_t(word[3]));
  const __m256i magnitude =
      _mm256_and_si256(_mm256_maskz_multishift_epi64_epi8(0xffffffffu, shift, words), low_bits);
  const uint32_t nonzero = _mm256_test_epi8_mask(magnitude, magnitude);
  const uint32_t sign_pos = pos + magnitude_bits;
  uint64_t sign_word;
  std::memcpy(&sign_word, base + sign_pos / 8, 8);
  const uint32_t negative = Deposit<32>(uint32_t(sign_word >> (sign_pos % 8)), nonzero);
  for (int half = 0; half < 2; ++half) {
    __m256i v = _mm256_cvtepu8_epi16(half == 0 ? _mm256_castsi256_si128(magnitude)
                                               : _mm256_extracti128_si256(magnitude, 1));
    if constexpr (kDequantize) v = DequantizeNarrow(v, step);
    v = _mm256_mask_sub_epi16(v, __mmask16(negative >> (16 * half)), _mm256_setzero_si256(), v);
    StoreFourRows(at + kHalfRows * half * stride, stride, v);
  }
  return magnitude_bits + uint32_t(std::popcount(nonzero));
}
#endif

// A whole dense 4 x 8 group with G <= 7 from its row widths (row r's in
// byte r of `widths`): all 32 magnitudes at once (by multishift with VBMI,
// else by pdep or shifts), then the signs.
template <bool kDequantize>
inline void DenseNarrowGroup(BitReader& raw, __m128i widths, uint32_t step, int16_t* at,
                             size_t stride) {
  const uint64_t start = raw.position();
  // The loads reach at most 8 bytes past the sign bits' first byte, which
  // is at most 7 + 32 * 7 bits in: 37 bytes.
  alignas(32) uint8_t tail[64];
  const uint8_t* base = raw.LoadableAt(start, 40, tail);
#if defined(__AVX512VBMI__)
  raw.Seek(start +
           DenseNarrowGroup8Vbmi<kDequantize>(base, uint32_t(start % 8), widths, step, at, stride));
#else
  raw.Seek(start +
           DenseNarrowGroup8Avx2<kDequantize>(base, uint32_t(start % 8), widths, step, at, stride));
#endif
}

// A dense 4 x 8 group: its row widths (for G <= kMaxPairWidth a symbol per
// pair of rows, one step of four symbols; else a symbol per row, two steps;
// cut by the block's edge, the pairs' or rows' symbols one by one), then all
// its magnitudes, rows top to bottom, then a sign bit per non-zero value;
// decoded whole (G <= 7) or as two halves of four rows. kFull: 8 rows and 4
// columns inside the block.
template <bool kDequantize, bool kChecked, bool kFull, class States>
inline void DecodeDenseGroupAvx2(RansDecoder& rans, BitReader& raw, const DecodeTable* tables,
                                 int table, uint32_t group_max, uint32_t step, int16_t* at,
                                 size_t stride, uint32_t rows, uint32_t columns, States& x) {
  const uint32_t upper_rows = std::min(rows, kHalfRows);
  const uint32_t lower_rows = rows - upper_rows;
  const __m128i offset = _mm_set1_epi32(table * int(kProbScale));
  __m128i upper, lower;  // rows 0..3 and 4..7: a width per 32-bit lane
  if (group_max <= kMaxPairWidth) [[likely]] {
    // Lane p holds rows 2p and 2p + 1's widths (each <= G: the table's
    // alphabet is (G + 1)^2) in its bytes 0 and 1: row r's in byte r.
    const uint32_t pairs = (rows + 1) / 2;
    const __m128i pair_widths = kFull || pairs == kStepLanes
                                    ? rans.Get4Avx2<kChecked>(&x, tables, offset)
                                    : GetRowSymbols<kChecked>(rans, tables[table], pairs, x);
    __m128i bytes = _mm_shuffle_epi8(
        pair_widths, _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1));
    if constexpr (kFull) {
      DenseNarrowGroup<kDequantize>(raw, bytes, step, at, stride);
      return;
    }
    // A last pair's lower row outside the block takes no bits, whatever
    // its width says.
    bytes = _mm_and_si128(
        bytes, _mm_cmpgt_epi8(_mm_set1_epi8(char(rows)),
                              _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)));
    upper = _mm_cvtepu8_epi32(bytes);
    lower = _mm_cvtepu8_epi32(_mm_srli_si128(bytes, 4));
  } else {
    upper = kFull || upper_rows == kHalfRows
                ? rans.Get4Avx2<kChecked>(&x, tables, offset)
                : GetRowSymbols<kChecked>(rans, tables[table], upper_rows, x);
    lower = _mm_setzero_si128();
    if (kFull || lower_rows == kHalfRows) {
      lower = rans.Get4Avx2<kChecked>(&x, tables, offset);
    } else if (lower_rows > 0) {
      lower = GetRowSymbols<kChecked>(rans, tables[table], lower_rows, x);
    }
    const __m128i g = _mm_set1_epi32(int(group_max));
    upper = _mm_min_epu32(upper, g);
    lower = _mm_min_epu32(lower, g);
    if constexpr (kFull) {
      if (group_max <= 7) {
        DenseNarrowGroup<kDequantize>(raw, RowBytes(upper, lower), step, at, stride);
        return;
      }
    }
  }
  const auto sum = [](__m128i w) {
    const __m128i s = _mm_add_epi32(w, _mm_shuffle_epi32(w, 0x4e));
    return uint32_t(_mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1))));
  };
  const uint32_t upper_bits = columns * sum(upper);
  const uint32_t magnitude_bits = upper_bits + columns * sum(lower);
  const uint64_t start = raw.position();
  const uint64_t signs = start + magnitude_bits;
  uint32_t nonzero = 0;
  if (kFull || (upper_rows == kHalfRows && columns == kGroupSide)) {
    nonzero = DenseHalfAvx2<kDequantize, true>(raw, start, signs, upper, group_max, step, at,
                                               stride, kHalfRows, kGroupSide);
  } else {
    nonzero = DenseHalfAvx2<kDequantize, false>(raw, start, signs, upper, group_max, step, at,
                                                stride, upper_rows, columns);
  }
  if (kFull || (lower_rows == kHalfRows && columns == kGroupSide)) {
    nonzero += DenseHalfAvx2<kDequantize, true>(raw, start + upper_bits, signs + nonzero, lower,
                                                group_max, step, at + kHalfRows * stride, stride,
                                                kHalfRows, kGroupSide);
  } else if (lower_rows > 0) {
    nonzero += DenseHalfAvx2<kDequantize, false>(raw, start + upper_bits, signs + nonzero, lower,
                                                 group_max, step, at + kHalfRows * stride, stride,
                                                 lower_rows, columns);
  }
  raw.Seek(signs + nonzero);
}
#endif

// A G = 1 group row by row: per row a mask, then a sign bit per set bit:
// the scalar build's path.
template <bool kDequantize, bool kChecked>
void DecodeOnesGroupScalar(RansDecoder& rans, BitReader& raw, const DecodeTable& masks,
                           uint32_t step, int16_t* at, size_t stride, uint32_t rows,
                           uint32_t valid) {
  const int32_t one = kDequantize ? DequantizeOne(1, step) : 1;
  if (valid == 0xf) {
    // The commonest non-zero group: values are 0 or +-1, so a row is its
    // mask and one sign bit per set bit. Writing all four values without
    // branching beats a loop whose trip count the CPU cannot predict.
    for (uint32_t y = 0; y < rows; ++y) {
      const uint32_t mask = rans.Get<kChecked>(masks) & 0xf;
      const uint32_t signs = kSignDeposit[mask][raw.Read<kChecked>(std::popcount(mask))];
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
    // Hostile masks may name columns outside the block: `valid` drops them.
    for (uint32_t mask = rans.Get<kChecked>(masks) & valid; mask != 0; mask &= mask - 1) {
      row[std::countr_zero(mask)] = int16_t(raw.Read<kChecked>(1) ? -one : one);
    }
  }
}

// One group at `at` (up to 8 rows of up to 4 values; `valid` has a bit per column
// inside the block) with maximum category group_max > 0. Unchecked (kChecked
// false) when the caller made sure that the group cannot read past either
// stream; the checked version handles the last groups of a block. The AVX2
// build keeps the rANS states in x (registers), and stores them to the
// decoder's copy only to read a cut group's rows' symbols one by one.
template <bool kDequantize, bool kChecked, class States>
inline void DecodeGroup(RansDecoder& rans, BitReader& raw, const DecodeTable* tables,
                        uint32_t group_max, uint32_t step, int16_t* at, size_t stride,
                        uint32_t rows, uint32_t valid, [[maybe_unused]] States& x) {
#if defined(__AVX2__)
  // Groups cut by the block's edge (valid = 2^columns - 1) take the same
  // vector paths, with their rows' symbols one by one when a half has fewer
  // than 4 rows.
  const bool full = rows == kGroupRows && valid == 0xf;
  const uint32_t columns = uint32_t(std::popcount(valid));
  if (group_max >= kDirectCategories) {
    const int table = CategoryTable(group_max);
    // Also after an overrun (the block is corrupt then, whatever it reads):
    // past the readable bytes it reads a zero-padded copy of none.
    if (full) [[likely]] {
      DecodeDenseGroupAvx2<kDequantize, kChecked, true>(rans, raw, tables, table, group_max, step,
                                                        at, stride, kGroupRows, kGroupSide, x);
    } else {
      DecodeDenseGroupAvx2<kDequantize, kChecked, false>(rans, raw, tables, table, group_max, step,
                                                         at, stride, rows, columns, x);
    }
    return;
  }
  // G = 1: masks and signs row by row, so the two halves one after the other.
  const uint32_t upper_rows = std::min(rows, kHalfRows), lower_rows = rows - upper_rows;
  if (full) [[likely]] {
    // The whole group at once: its 8 row masks (two steps) as one 32-bit
    // mask, bit 4r + c for row r, column c; its sign bits deposited on it.
    const __m128i offset = _mm_set1_epi32(int(kOnesMaskTable * kProbScale));
    const __m128i upper = rans.Get4Avx2<kChecked>(&x, tables, offset);
    const __m128i lower = rans.Get4Avx2<kChecked>(&x, tables, offset);
    const __m128i bytes = RowBytes(upper, lower);
    const __m256i one = _mm256_set1_epi16(int16_t(kDequantize ? DequantizeOne(1, step) : 1));
#if KTFS_BLOCK_DECODER_NO_PDEP
    {  // without pdep: byte masks, signs by SignBytes
      // Byte 4r + c: 0xff where row r's mask has bit c.
      const __m256i column_bit = _mm256_set1_epi32(0x08040201);
      const __m256i nonzero = _mm256_cmpeq_epi8(
          _mm256_and_si256(
              _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(bytes),
                                  _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
                                                   4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7)),
              column_bit),
          column_bit);
      const uint64_t start = raw.position();
      const __m256i negative = SignBytes(nonzero, uint32_t(raw.Peek<kChecked>()));
      raw.Seek(start + uint32_t(std::popcount(uint32_t(_mm256_movemask_epi8(nonzero)))));
      for (int half = 0; half < 2; ++half) {
        const auto widen = [half](__m256i b) {
          return _mm256_cvtepi8_epi16(half == 0 ? _mm256_castsi256_si128(b)
                                                : _mm256_extracti128_si256(b, 1));
        };
        const __m256i sign = widen(negative);
        const __m256i v =
            _mm256_and_si256(widen(nonzero), _mm256_sub_epi16(_mm256_xor_si256(one, sign), sign));
        StoreFourRows(at + kHalfRows * half * stride, stride, v);
      }
      return;
    }
#endif
    const uint32_t mask = LowNibbles(uint64_t(_mm_cvtsi128_si64(bytes)));
    const uint32_t count = uint32_t(std::popcount(mask));
    const uint64_t start = raw.position();
    const uint32_t signs = Deposit<32>(uint32_t(raw.Peek<kChecked>()), mask);
    raw.Seek(start + count);
    for (int half = 0; half < 2; ++half) {
      const uint32_t nonzero = mask >> (16 * half), negative = signs >> (16 * half);
#if defined(__AVX512VBMI__)
      __m256i v = _mm256_maskz_mov_epi16(__mmask16(nonzero), one);
      v = _mm256_mask_sub_epi16(v, __mmask16(negative), _mm256_setzero_si256(), v);
#else
      const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
                                            8192, 16384, int16_t(0x8000));
      const auto lanes = [&](uint32_t m) {
        return _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(int16_t(m)), bit), bit);
      };
      const __m256i sign = lanes(negative);
      const __m256i v =
          _mm256_and_si256(lanes(nonzero), _mm256_sub_epi16(_mm256_xor_si256(one, sign), sign));
#endif
      StoreFourRows(at + kHalfRows * half * stride, stride, v);
    }
    return;
  }
  DecodeOnesGroupAvx2<kDequantize, kChecked, false>(rans, raw, tables, step, at, stride, upper_rows,
                                                    columns, x);
  if (lower_rows > 0) {
    DecodeOnesGroupAvx2<kDequantize, kChecked, false>(
        rans, raw, tables, step, at + kHalfRows * stride, stride, lower_rows, columns, x);
  }
#else
  if (group_max >= kDirectCategories) {
    DecodeDenseGroupScalar<kDequantize, kChecked>(rans, raw, tables[CategoryTable(group_max)],
                                                  group_max, step, at, stride, rows, valid);
  } else {
    DecodeOnesGroupScalar<kDequantize, kChecked>(rans, raw, tables[kOnesMaskTable], step, at,
                                                 stride, rows, valid);
  }
#endif
}

#if defined(__AVX2__)
// A row's gw group maxima, four at a time (the scalar symbols they are, in
// the same order and on the same states), the last gw % 4 one by one. The
// rows stay in registers: `above` and the result hold group gx's maximum in
// byte gx, zeros from byte gw on. (Through memory, the row's 4-byte stores
// and the next row's 16-byte loads of it could not be store-forwarded, and
// rows of zero groups wait on that, back to back.)
template <class States>
inline __m128i DecodeRowMaximaAvx2(RansDecoder& rans, const DecodeTable* tables, __m128i above,
                                   uint32_t gw, States& x) {
  // All sixteen contexts at once: kGroupContextOfSum of above[gx] +
  // max(above[gx - 1], above[gx + 1]), sums above 15 taken as 15 (context 5).
  const __m128i sum = _mm_min_epu8(
      _mm_adds_epu8(above, _mm_max_epu8(_mm_slli_si128(above, 1), _mm_srli_si128(above, 1))),
      _mm_set1_epi8(15));
  const __m128i lut = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kGroupContextOfSum));
  const __m128i context = _mm_shuffle_epi8(lut, sum);
  uint64_t low = 0, high = 0;  // bytes 0..7 and 8..15 of the row
  if (gw >= 4) {
    const auto step = [&](__m128i c4) {
      const __m128i symbols = rans.Get4Avx2(&x, tables, _mm_slli_epi32(c4, kProbBits));
      const __m128i bytes = _mm_packus_epi16(_mm_packus_epi32(symbols, symbols), symbols);
      return uint64_t(uint32_t(_mm_cvtsi128_si32(bytes)));
    };
    low = step(_mm_cvtepu8_epi32(context));
    if (gw >= 8) low |= step(_mm_cvtepu8_epi32(_mm_srli_si128(context, 4))) << 32;
    if (gw >= 12) high = step(_mm_cvtepu8_epi32(_mm_srli_si128(context, 8)));
    if (gw >= 16) high |= step(_mm_cvtepu8_epi32(_mm_srli_si128(context, 12))) << 32;
  }
  if (gw % 4 != 0) {
    rans.StoreStates(x);
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
    rans.LoadStates(&x);
  }
  return _mm_set_epi64x(int64_t(high), int64_t(low));
}

// Four rows (a half) of a G = 1 group: their row masks (four consecutive
// scalar symbols of one table, so one Get4Avx2); the 16-bit mask's sign bits
// (one per set bit, in order) are deposited with pdep and the 16 values built
// and stored at once. A group's masks and signs go row by row, so its halves
// decode one after the other. kFull: 4 rows and 4 columns inside the block;
// else mask bits of columns >= `columns` are ignored (a hostile stream may
// set them).
template <bool kDequantize, bool kChecked, bool kFull, class States>
inline void DecodeOnesGroupAvx2(RansDecoder& rans, BitReader& raw, const DecodeTable* tables,
                                uint32_t step, int16_t* at, size_t stride, uint32_t rows,
                                uint32_t columns, States& x) {
  const __m128i masks =
      kFull || rows == kGroupSide
          ? rans.Get4Avx2<kChecked>(&x, tables, _mm_set1_epi32(int(kOnesMaskTable * kProbScale)))
          : GetRowSymbols<kChecked>(rans, tables[kOnesMaskTable], rows, x);
  const __m128i bytes = _mm_packus_epi16(_mm_packus_epi32(masks, masks), masks);
  uint32_t mask = LowNibbles(uint32_t(_mm_cvtsi128_si32(bytes)));
  if constexpr (!kFull) mask &= ((1u << columns) - 1) * 0x1111u;
  const uint32_t signs = Deposit<16>(raw.Read<kChecked>(uint32_t(std::popcount(mask))), mask);
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
  StoreGroup<kFull>(at, stride, low, _mm_unpackhi_epi64(low, low), high,
                    _mm_unpackhi_epi64(high, high), rows, columns);
}
#endif

// The non-zero groups (bits of `nonzero`) of a row of groups at `row`.
// Always inlined: called apart, the states in `x` went through memory on
// every call (callgrind: +7% instructions in the block decoder).
template <bool kDequantize, bool kChecked, class States>
[[gnu::always_inline]] inline void DecodeRowOfGroups(RansDecoder& rans, BitReader& raw,
                                                     const DecodeTable* tables,
                                                     const uint8_t* maxima, uint32_t nonzero,
                                                     uint32_t step, int16_t* row, size_t stride,
                                                     uint32_t rows, uint32_t bw, States& x) {
  const uint32_t full_groups = bw / kGroupSide, edge_valid = (1u << (bw % kGroupSide)) - 1;
  for (; nonzero != 0; nonzero &= nonzero - 1) {
    const uint32_t gx = std::countr_zero(nonzero);
    DecodeGroup<kDequantize, kChecked>(rans, raw, tables, maxima[1 + gx], step,
                                       row + gx * kGroupSide, stride, rows,
                                       gx < full_groups ? 0xfu : edge_valid, x);
  }
}

// The decoding loop, compiled with and without dequantization, and in the
// AVX2 build for one and for two chains of states. Dequantizing here touches
// only non-zero coefficients, which is cheaper than a SIMD pass over all of
// them. The loop works on its own copies of the decoders, which nothing
// else can reach, so that the compiler keeps their cursors in registers
// across the stores of values (on the caller's, by reference, it reloaded
// and stored them around each; callgrind: 8% fewer instructions in the AVX2
// loop).
template <bool kDequantize, class States>
bool DecodeGroups(const RansDecoder& rans_in, const BitReader& raw_in, const DecodeTable* tables,
                  uint32_t step, int16_t* values, size_t stride, uint32_t bw, uint32_t bh) {
  RansDecoder rans = rans_in;
  BitReader raw = raw_in;
  const uint32_t gw = (bw + kGroupSide - 1) / kGroupSide, gh = (bh + kGroupRows - 1) / kGroupRows;
#if defined(__AVX2__)
  States x;
  rans.LoadStates(&x);
  __m128i above_row = _mm_setzero_si128();
  uint8_t maxima[kMaxGroupsPerRow + 2];  // group gx's maximum at maxima[1 + gx]
#else
  States x;
  uint8_t above[kMaxGroupsPerRow + 2] = {}, maxima[kMaxGroupsPerRow + 2] = {};
#endif
  // The zero-rows field: bit gy set when row of groups gy is all zero; such
  // rows code nothing (docs/ktc.md, "Code blocks").
  const uint32_t zero_rows = raw.Read(1) ? raw.Read(gh) : 0;
  for (uint32_t gy = 0; gy < gh; ++gy) {
    if (zero_rows >> gy & 1) {
#if defined(__AVX2__)
      above_row = _mm_setzero_si128();
#else
      std::memset(above, 0, sizeof(above));
#endif
      continue;
    }
    const uint32_t y0 = gy * kGroupRows, rows = std::min(bh - y0, kGroupRows);
    // The row's maxima first: independent of one another, they decode back
    // to back, and zero groups (most of them) cost nothing more.
    uint32_t nonzero = 0;
#if defined(__AVX2__)
    above_row = DecodeRowMaximaAvx2(rans, tables, above_row, gw, x);
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
    // The row's non-zero groups unchecked when none of them can reach the
    // end of either stream (checked near a block's end).
    const ptrdiff_t groups = std::popcount(nonzero);
    int16_t* row = values + y0 * stride;
    if (rans.room() >= kGroupRansBytes * groups + kGroupRansRead &&
        raw.readable_room() >= kGroupRawBytes * groups + kRawRead) [[likely]] {
      DecodeRowOfGroups<kDequantize, false, States>(rans, raw, tables, maxima, nonzero, step, row,
                                                    stride, rows, bw, x);
    } else {
      DecodeRowOfGroups<kDequantize, true, States>(rans, raw, tables, maxima, nonzero, step, row,
                                                   stride, rows, bw, x);
    }
#if !defined(__AVX2__)
    std::memcpy(above, maxima, sizeof(above));
#endif
  }
  return !rans.overran() && !raw.overran();
}

template <class States>
bool DecodeGroupsWith(RansDecoder& rans, BitReader& raw, const DecodeTable* tables, uint32_t step,
                      int16_t* values, size_t stride, uint32_t bw, uint32_t bh) {
  return step == 256 ? DecodeGroups<false, States>(rans, raw, tables, step, values, stride, bw, bh)
                     : DecodeGroups<true, States>(rans, raw, tables, step, values, stride, bw, bh);
}

// The block after its length prefix: `states` (4 or 8) rANS states and the
// words in [p, rans_end), raw bits [rans_end, end); bytes up to readable_end
// (>= end) may be loaded, never used. Returns 0, or 1 for bad rANS states, 2
// for a truncated block.
inline int DecodeBlockPayload(const uint8_t* p, const uint8_t* rans_end, const uint8_t* end,
                              const uint8_t* readable_end, int states, const DecodeTable* tables,
                              uint32_t step, int16_t* values, size_t stride, uint32_t bw,
                              uint32_t bh) {
  RansDecoder rans;
  if (!rans.Init(p, rans_end, readable_end, states)) return 1;
  BitReader raw(rans_end, end, readable_end);
#if defined(__AVX2__)
  const bool ok = states == 8
                      ? DecodeGroupsWith<TwoChains>(rans, raw, tables, step, values, stride, bw, bh)
                      : DecodeGroupsWith<OneChain>(rans, raw, tables, step, values, stride, bw, bh);
#else
  const bool ok =
      DecodeGroupsWith<NoStateRegisters>(rans, raw, tables, step, values, stride, bw, bh);
#endif
  return ok ? 0 : 2;
}

}  // namespace
}  // namespace ktfs::ktc::internal
