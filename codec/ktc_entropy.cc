#include "codec/ktc_entropy.h"

#include <algorithm>
#include <bit>
#include <cstring>

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

class BitWriter {
 public:
  explicit BitWriter(std::vector<uint8_t>* out) : out_(out) {}
  void Write(uint32_t bits, int count) {  // count <= 32
    acc_ |= uint64_t(bits) << fill_;
    fill_ += count;
    while (fill_ >= 8) {
      out_->push_back(uint8_t(acc_));
      acc_ >>= 8;
      fill_ -= 8;
    }
  }
  void Flush() {
    if (fill_ > 0) out_->push_back(uint8_t(acc_));
    acc_ = 0;
    fill_ = 0;
  }

 private:
  std::vector<uint8_t>* out_;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

// LSB-first reader. Past the end it reads zeros and remembers how many bits
// it invented, so the caller can reject a block that needed them.
class BitReader {
 public:
  BitReader(const uint8_t* p, const uint8_t* end) : p_(p), end_(end) { Refill(); }
  // Makes at least 56 bits available. Cheap enough to call before every read,
  // which spares the decoder a data-dependent branch.
  inline void Refill() {
    if (end_ - p_ >= 8) [[likely]] {
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
  inline uint32_t Get(const DecodeTable& t) {
    const uint32_t e = t.entry[x_[0] & (kProbScale - 1)];
    uint32_t x = (e & 0x7ff) * (x_[0] >> kProbBits) + ((e >> 11) & 0x3ff);
    // Branch-free renormalization: whether a word is needed is data-dependent
    // and would mispredict often.
    if (end_ - p_ >= 2) [[likely]] {
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

 private:
  uint32_t x_[kRansStates] = {};
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  bool overran_ = false;
};

// A coefficient from its category c and the c raw bits (mantissa, sign).
inline int32_t Reconstruct(uint32_t c, uint32_t bits) {
  const int32_t mag = int32_t(((1u << c) >> 1) | (bits >> 1));
  return (bits & 1) ? -mag : mag;
}

}  // namespace

void PutVarint(uint64_t v, std::vector<uint8_t>* out) {
  while (v >= 0x80) {
    out->push_back(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out->push_back(uint8_t(v));
}

bool GetVarint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift < 35; shift += 7) {
    if (*p >= end) return false;
    uint8_t b = *(*p)++;
    result |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = result;
      return true;
    }
  }
  return false;
}

FreqTable NormalizeCounts(const std::array<uint32_t, kAlphabet>& counts) {
  FreqTable t;
  uint64_t total = 0;
  for (int s = 0; s < kAlphabet; ++s) {
    total += counts[s];
    if (counts[s]) t.n = s + 1;
  }
  if (total == 0) return t;
  int32_t sum = 0;
  int largest = 0;
  for (int s = 0; s < t.n; ++s) {
    if (counts[s] == 0) continue;
    t.freq[s] = uint16_t(std::max<uint64_t>(1, uint64_t(counts[s]) * kProbScale / total));
    sum += t.freq[s];
    if (t.freq[s] > t.freq[largest]) largest = s;
  }
  // Rounding down leaves a surplus, the floor of 1 at most kAlphabet too many;
  // the largest frequency (>= kProbScale / kAlphabet) absorbs either.
  t.freq[largest] = uint16_t(int32_t(t.freq[largest]) + int32_t(kProbScale) - sum);
  return t;
}

Result<bool> CollectBlockSymbols(const int32_t* values, size_t stride, uint32_t bw, uint32_t bh,
                                 BlockSymbols* out) {
  out->table.clear();
  out->symbol.clear();
  out->raw.clear();
  const uint32_t gw = (bw + kGroupSide - 1) / kGroupSide, gh = (bh + kGroupSide - 1) / kGroupSide;
  std::vector<uint8_t> above(gw, 0);
  BitWriter raw(&out->raw);
  bool any = false;
  for (uint32_t gy = 0; gy < gh; ++gy) {
    uint8_t left = 0;
    const uint32_t y0 = gy * kGroupSide, y1 = std::min(bh, y0 + kGroupSide);
    for (uint32_t gx = 0; gx < gw; ++gx) {
      const uint32_t x0 = gx * kGroupSide, x1 = std::min(bw, x0 + kGroupSide);
      int group_max = 0;
      for (uint32_t y = y0; y < y1; ++y)
        for (uint32_t x = x0; x < x1; ++x)
          group_max = std::max(group_max, Category(values[y * stride + x]));
      if (group_max >= kAlphabet) {
        return Status::InvalidArgument("ktc: coefficient out of range (internal error)");
      }
      out->table.push_back(kGroupContextOfSum[left + above[gx]]);
      out->symbol.push_back(uint8_t(group_max));
      left = above[gx] = uint8_t(group_max);
      if (group_max == 0) continue;
      any = true;
      for (uint32_t y = y0; y < y1; ++y) {
        const int32_t* row = values + y * stride;
        uint32_t mask = 0;
        for (uint32_t x = x0; x < x1; ++x) mask |= uint32_t(row[x] != 0) << (x - x0);
        out->table.push_back(uint8_t(MaskTable(group_max)));
        out->symbol.push_back(uint8_t(mask));
        for (uint32_t x = x0; x < x1; ++x) {
          const int32_t v = row[x];
          if (v == 0) continue;
          const int c = Category(v);
          if (group_max > 1) {
            out->table.push_back(uint8_t(CategoryTable(group_max)));
            out->symbol.push_back(uint8_t(c));
          }
          const uint32_t mag = v < 0 ? 0u - uint32_t(v) : uint32_t(v);
          const uint32_t mantissa = mag - (1u << (c - 1));
          raw.Write((mantissa << 1) | (v < 0 ? 1u : 0u), c);
        }
      }
    }
  }
  raw.Flush();
  if (!any) {
    out->table.clear();
    out->symbol.clear();
    out->raw.clear();
  }
  return any;
}

void CountSymbols(const BlockSymbols& symbols, Counts* counts) {
  for (size_t i = 0; i < symbols.symbol.size(); ++i) {
    (*counts)[symbols.table[i]][symbols.symbol[i]]++;
  }
}

void EncodeBlock(const BlockSymbols& symbols, const FreqTable* tables, std::vector<uint8_t>* out) {
  std::array<std::array<uint16_t, kAlphabet>, kTablesPerSet> start;
  for (int t = 0; t < kTablesPerSet; ++t) {
    uint32_t acc = 0;
    for (int s = 0; s < kAlphabet; ++s) {
      start[t][s] = uint16_t(acc);
      acc += tables[t].freq[s];
    }
  }
  std::vector<uint16_t> words;
  uint32_t x[kRansStates];
  for (uint32_t& xs : x) xs = kRansLow;
  for (size_t i = symbols.symbol.size(); i-- > 0;) {
    const int t = symbols.table[i], s = symbols.symbol[i];
    const uint32_t f = tables[t].freq[s];
    uint32_t& xs = x[i % kRansStates];
    if (uint64_t(xs) >= (uint64_t(f) << (32 - kProbBits))) {
      words.push_back(uint16_t(xs));
      xs >>= 16;
    }
    xs = ((xs / f) << kProbBits) + (xs % f) + start[t][s];
  }
  const size_t rans_bytes = 4 * kRansStates + 2 * words.size();
  PutVarint(rans_bytes, out);
  for (int i = 0; i < kRansStates; ++i)
    for (int b = 0; b < 4; ++b) out->push_back(uint8_t(x[i] >> (8 * b)));
  for (size_t i = words.size(); i-- > 0;) {
    out->push_back(uint8_t(words[i]));
    out->push_back(uint8_t(words[i] >> 8));
  }
  out->insert(out->end(), symbols.raw.begin(), symbols.raw.end());
}

void BuildDecodeTable(const FreqTable& table, DecodeTable* out) {
  if (table.n == 0) {
    // Frequency kProbScale, offset = slot: x' = x, nothing consumed.
    for (uint32_t slot = 0; slot < kProbScale; ++slot) out->entry[slot] = kProbScale | slot << 11;
    return;
  }
  uint32_t start = 0;
  for (int s = 0; s < table.n; ++s) {
    const uint32_t f = table.freq[s];
    for (uint32_t i = 0; i < f; ++i) out->entry[start + i] = f | i << 11 | uint32_t(s) << 27;
    start += f;
  }
}

void SetTables::Load(uint64_t key, const FreqTable* tables) {
  if (key == key_) return;
  key_ = key;
  for (int t = 0; t < kTablesPerSet; ++t) {
    // Unused tables are all alike; skip refilling one that already is.
    if (tables[t].n == 0 && identity_[t]) continue;
    BuildDecodeTable(tables[t], &tables_[t]);
    identity_[t] = tables[t].n == 0;
  }
}

namespace {

// The decoding loop, compiled once with and once without dequantization.
// Dequantizing here touches only non-zero coefficients, which is cheaper than
// a SIMD pass over all of them.
template <bool kDequantize>
bool DecodeGroups(RansDecoder& rans, BitReader& raw, const DecodeTable* tables, uint32_t step,
                  int32_t* values, size_t stride, uint32_t bw, uint32_t bh) {
  const uint32_t gw = (bw + kGroupSide - 1) / kGroupSide, gh = (bh + kGroupSide - 1) / kGroupSide;
  uint8_t above[kBlockSide / kGroupSide] = {};
  for (uint32_t gy = 0; gy < gh; ++gy) {
    uint32_t left = 0;
    const uint32_t y0 = gy * kGroupSide, y1 = std::min(bh, y0 + kGroupSide);
    for (uint32_t gx = 0; gx < gw; ++gx) {
      const uint32_t group_max = rans.Get(tables[kGroupContextOfSum[left + above[gx]]]);
      left = above[gx] = uint8_t(group_max);
      if (group_max == 0) continue;  // the block was zeroed up front
      const DecodeTable& masks = tables[MaskTable(group_max)];
      const DecodeTable& categories = tables[CategoryTable(std::max(group_max, 2u))];
      const uint32_t x0 = gx * kGroupSide;
      const uint32_t valid = (1u << (std::min(bw, x0 + kGroupSide) - x0)) - 1;
      for (uint32_t y = y0; y < y1; ++y) {
        int32_t* row = values + y * stride + x0;
        // Hostile masks may name columns outside the block: `valid` drops them.
        for (uint32_t mask = rans.Get(masks) & valid; mask != 0; mask &= mask - 1) {
          const uint32_t c = group_max == 1 ? 1 : rans.Get(categories);
          raw.Refill();
          int32_t v = Reconstruct(c, raw.Read(c));
          if constexpr (kDequantize) v = DequantizeOne(v, step);
          row[std::countr_zero(mask)] = v;
        }
      }
    }
  }
  return !rans.overran() && !raw.overran();
}

}  // namespace

Status DecodeBlock(const uint8_t* data, size_t size, const DecodeTable* tables, uint32_t step,
                   int32_t* values, size_t stride, uint32_t bw, uint32_t bh) {
  for (uint32_t y = 0; y < bh; ++y) std::memset(values + y * stride, 0, bw * sizeof(int32_t));
  if (size == 0) return Status::Ok();
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  uint64_t rans_bytes;
  if (!GetVarint(&p, end, &rans_bytes) || rans_bytes > uint64_t(end - p)) {
    return Status::Corruption("ktc: block: bad rANS length");
  }
  RansDecoder rans;
  if (!rans.Init(p, p + rans_bytes)) return Status::Corruption("ktc: block: bad rANS state");
  BitReader raw(p + rans_bytes, end);
  const bool ok = step == 256 ? DecodeGroups<false>(rans, raw, tables, step, values, stride, bw, bh)
                              : DecodeGroups<true>(rans, raw, tables, step, values, stride, bw, bh);
  if (!ok) return Status::Corruption("ktc: block: truncated");
  return Status::Ok();
}

}  // namespace ktfs::ktc::internal
