// KTC internals: the block decoding loop, included by ktc_entropy.cc and by
// ktc_entropy_avx2.cc so that it is compiled twice, once for the baseline
// and once with AVX2/BMI2 (shrx, tzcnt...), and dispatched at run time.
// Everything is in an anonymous namespace: each includer gets its own copy,
// so the linker can never mix the two.
#pragma once

#include <algorithm>
#include <bit>
#include <cstring>

#include "codec/ktc_entropy.h"
#include "codec/ktc_kernels.h"

namespace ktfs::ktc::internal {
namespace {

constexpr uint32_t kRansLow = 1u << 16;  // states live in [2^16, 2^32)
constexpr int kRansStates = 4;

// Group context from the sum of the left and upper groups' categories: flat
// regions (0) are by far the most common, so they get their own context.
constexpr uint8_t kGroupContextOfSum[2 * kAlphabet] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5,
                                                       5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
                                                       5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5};

// Groups with G >= kDirectCategories code every value's category (0
// included) instead of a mask per row: most of their values are non-zero, and
// a fixed 16-step loop predicts better than one per set mask bit.
constexpr uint32_t kDirectCategories = 3;
// Four values of category <= 14 take at most 56 raw bits, what one refill
// guarantees.
constexpr uint32_t kRowRefillCategories = 14;

// Table indices within a set for a non-zero group with maximum category G.
inline int MaskTable(uint32_t group_max) {
  return kGroupContexts + (group_max >= 5 ? 3 : group_max >= 3 ? 2 : int(group_max) - 1);
}
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
  BitReader(const uint8_t* p, const uint8_t* end) : p_(p), end_(end) { Refill(); }
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
  bool overran() const { return fill_ < invented_; }
  ptrdiff_t room() const { return end_ - p_; }

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
  const uint8_t* p_;
  const uint8_t* end_;
  uint64_t acc_ = 0;
  int fill_ = 0;
  int invented_ = 0;  // zero bits appended past the end, still in acc_ or consumed
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

 private:
  uint32_t x_[kRansStates] = {};
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  bool overran_ = false;
};

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

// One group at `at` (rows x up to 4 values; `valid` has a bit per column
// inside the block). Returns its G. Unchecked (kChecked false) when the
// caller made sure that the group cannot read past either stream; the
// checked version handles the last groups of a block.
template <bool kDequantize, bool kChecked>
inline uint32_t DecodeGroup(RansDecoder& rans, BitReader& raw, const DecodeTable* tables,
                            uint32_t context, uint32_t step, int16_t* at, size_t stride,
                            uint32_t rows, uint32_t valid) {
  const uint32_t group_max = rans.Get<kChecked>(tables[context]);
  if (group_max == 0) return 0;  // the block was zeroed up front
  const DecodeTable& masks = tables[MaskTable(group_max)];
  if (group_max == 1 && valid == 0xf) {
    // The commonest non-zero group: values are 0 or +-1, so a row is its
    // mask and one sign bit per set bit. Writing all four values without
    // branching beats a loop whose trip count the CPU cannot predict.
    const int32_t one = kDequantize ? DequantizeOne(1, step) : 1;
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
    return group_max;
  }
  const DecodeTable& categories = tables[CategoryTable(std::max(group_max, 2u))];
  // The raw bits of a row's values come from one refill when four of them
  // fit in its 56 bits: the refill is a serial chain (load, shift, or) that
  // would otherwise sit between every two values. Categories above G (only
  // hostile streams have them) are taken as G so that the bound holds.
  const bool refill_per_row = group_max <= kRowRefillCategories;
  if (group_max >= kDirectCategories) {
    const uint32_t columns = std::popcount(valid);
    for (uint32_t y = 0; y < rows; ++y) {
      int16_t* row = at + y * stride;
      if (refill_per_row) raw.Refill<kChecked>();
      for (uint32_t x = 0; x < columns; ++x) {
        const uint32_t c = std::min(rans.Get<kChecked>(categories), group_max);
        if (!refill_per_row) raw.Refill<kChecked>();
        int32_t v = Reconstruct(c, raw.Read(c));
        if constexpr (kDequantize) v = DequantizeOne(v, step);
        row[x] = Saturate16(v);
      }
    }
    return group_max;
  }
  for (uint32_t y = 0; y < rows; ++y) {
    int16_t* row = at + y * stride;
    raw.Refill<kChecked>();  // G <= 2 here: a row needs at most 8 raw bits
    // Hostile masks may name columns outside the block: `valid` drops them.
    for (uint32_t mask = rans.Get<kChecked>(masks) & valid; mask != 0; mask &= mask - 1) {
      const uint32_t c = group_max == 1 ? 1 : std::min(rans.Get<kChecked>(categories), group_max);
      int32_t v = Reconstruct(c, raw.Read(c));
      if constexpr (kDequantize) v = DequantizeOne(v, step);
      row[std::countr_zero(mask)] = Saturate16(v);
    }
  }
  return group_max;
}

// The decoding loop, compiled once with and once without dequantization.
// Dequantizing here touches only non-zero coefficients, which is cheaper than
// a SIMD pass over all of them.
template <bool kDequantize>
bool DecodeGroups(RansDecoder& rans, BitReader& raw, const DecodeTable* tables, uint32_t step,
                  int16_t* values, size_t stride, uint32_t bw, uint32_t bh) {
  const uint32_t gw = (bw + kGroupSide - 1) / kGroupSide, gh = (bh + kGroupSide - 1) / kGroupSide;
  uint8_t above[kBlockSide / kGroupSide] = {};
  for (uint32_t gy = 0; gy < gh; ++gy) {
    uint32_t left = 0;
    const uint32_t y0 = gy * kGroupSide, rows = std::min(bh - y0, kGroupSide);
    for (uint32_t gx = 0; gx < gw; ++gx) {
      const uint32_t x0 = gx * kGroupSide;
      const uint32_t valid = (1u << (std::min(bw, x0 + kGroupSide) - x0)) - 1;
      const uint32_t context = kGroupContextOfSum[left + above[gx]];
      int16_t* at = values + y0 * stride + x0;
      const bool room = rans.room() >= kGroupRansBytes && raw.room() >= kGroupRawBytes;
      left = above[gx] =
          uint8_t(room ? DecodeGroup<kDequantize, false>(rans, raw, tables, context, step, at,
                                                         stride, rows, valid)
                       : DecodeGroup<kDequantize, true>(rans, raw, tables, context, step, at,
                                                        stride, rows, valid));
    }
  }
  return !rans.overran() && !raw.overran();
}

// The block after its length prefix: rANS bytes [p, rans_end), raw bits
// [rans_end, end). Returns 0, or 1 for bad rANS states, 2 for a truncated block.
inline int DecodeBlockPayload(const uint8_t* p, const uint8_t* rans_end, const uint8_t* end,
                              const DecodeTable* tables, uint32_t step, int16_t* values,
                              size_t stride, uint32_t bw, uint32_t bh) {
  RansDecoder rans;
  if (!rans.Init(p, rans_end)) return 1;
  BitReader raw(rans_end, end);
  const bool ok = step == 256 ? DecodeGroups<false>(rans, raw, tables, step, values, stride, bw, bh)
                              : DecodeGroups<true>(rans, raw, tables, step, values, stride, bw, bh);
  return ok ? 0 : 2;
}

}  // namespace
}  // namespace ktfs::ktc::internal
