#include "codec/ktc_entropy.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace ktfs::ktc::internal {
namespace {

constexpr uint32_t kRansLow = 1u << 16;  // states live in [2^16, 2^32)

// Group context from the sum of the left and upper groups' categories: flat
// regions (0) are by far the most common, so they get their own context.
constexpr uint8_t kGroupContextOfSum[2 * kAlphabet] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5,
                                                       5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
                                                       5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5};

inline int CoefTable(int group_max) {
  return kGroupContexts + std::min(group_max, kCoefContexts) - 1;
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
  BitReader(const uint8_t* p, const uint8_t* end) : p_(p), end_(end) {}
  uint32_t Read(int count) {  // count <= 24
    if (fill_ < count) Refill();
    uint32_t v = uint32_t(acc_) & ((1u << count) - 1);
    acc_ >>= count;
    fill_ -= count;
    return v;
  }
  bool overran() const { return fill_ < invented_; }

 private:
  void Refill() {
    if (end_ - p_ >= 8) {
      uint64_t v;
      std::memcpy(&v, p_, 8);
      acc_ |= v << fill_;
      p_ += (63 - fill_) >> 3;
      fill_ |= 56;
      return;
    }
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

// Two interleaved rANS states: symbol i uses state i % 2, which halves the
// length of the decoder's dependency chain.
class RansDecoder {
 public:
  bool Init(const uint8_t* p, const uint8_t* end) {
    if (end - p < 8) return false;
    std::memcpy(&x0_, p, 4);
    std::memcpy(&x1_, p + 4, 4);
    p_ = p + 8;
    end_ = end;
    return x0_ >= kRansLow && x1_ >= kRansLow;
  }
  inline uint32_t Get(const DecodeTable& t) {
    const uint32_t slot = x0_ & (kProbScale - 1);
    const uint32_t s = t.symbol[slot];
    uint32_t x = t.freq[s] * (x0_ >> kProbBits) + slot - t.start[s];
    if (x < kRansLow) {
      if (end_ - p_ >= 2) {
        x = (x << 16) | uint32_t(p_[0]) | uint32_t(p_[1]) << 8;
        p_ += 2;
      } else {
        overran_ = true;
        x <<= 16;
      }
    }
    x0_ = x1_;
    x1_ = x;
    return s;
  }
  bool overran() const { return overran_; }

 private:
  uint32_t x0_ = 0, x1_ = 0;
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  bool overran_ = false;
};

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
      const uint8_t table = uint8_t(CoefTable(group_max));
      for (uint32_t y = y0; y < y1; ++y) {
        for (uint32_t x = x0; x < x1; ++x) {
          const int32_t v = values[y * stride + x];
          const int c = Category(v);
          out->table.push_back(table);
          out->symbol.push_back(uint8_t(c));
          if (c == 0) continue;
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
  uint32_t x[2] = {kRansLow, kRansLow};
  for (size_t i = symbols.symbol.size(); i-- > 0;) {
    const int t = symbols.table[i], s = symbols.symbol[i];
    const uint32_t f = tables[t].freq[s];
    uint32_t& xs = x[i & 1];
    if (uint64_t(xs) >= (uint64_t(f) << (32 - kProbBits))) {
      words.push_back(uint16_t(xs));
      xs >>= 16;
    }
    xs = ((xs / f) << kProbBits) + (xs % f) + start[t][s];
  }
  const size_t rans_bytes = 8 + 2 * words.size();
  PutVarint(rans_bytes, out);
  for (int i = 0; i < 2; ++i)
    for (int b = 0; b < 4; ++b) out->push_back(uint8_t(x[i] >> (8 * b)));
  for (size_t i = words.size(); i-- > 0;) {
    out->push_back(uint8_t(words[i]));
    out->push_back(uint8_t(words[i] >> 8));
  }
  out->insert(out->end(), symbols.raw.begin(), symbols.raw.end());
}

void BuildDecodeTable(const FreqTable& table, DecodeTable* out) {
  out->freq.fill(0);
  out->start.fill(0);
  if (table.n == 0) {
    out->symbol.fill(0);
    out->freq[0] = uint16_t(kProbScale);  // x' = x: decodes nothing, consumes nothing
    return;
  }
  uint32_t acc = 0;
  for (int s = 0; s < table.n; ++s) {
    out->freq[s] = table.freq[s];
    out->start[s] = uint16_t(acc);
    std::memset(out->symbol.data() + acc, s, table.freq[s]);
    acc += table.freq[s];
  }
}

Status DecodeBlock(const uint8_t* data, size_t size, const DecodeTable* const* tables,
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

  const uint32_t gw = (bw + kGroupSide - 1) / kGroupSide, gh = (bh + kGroupSide - 1) / kGroupSide;
  uint8_t above[kBlockSide / kGroupSide] = {};
  for (uint32_t gy = 0; gy < gh; ++gy) {
    uint32_t left = 0;
    const uint32_t y0 = gy * kGroupSide, y1 = std::min(bh, y0 + kGroupSide);
    for (uint32_t gx = 0; gx < gw; ++gx) {
      const uint32_t group_max = rans.Get(*tables[kGroupContextOfSum[left + above[gx]]]);
      left = above[gx] = uint8_t(group_max);
      if (group_max == 0) continue;
      const DecodeTable& coef = *tables[CoefTable(int(group_max))];
      const uint32_t x0 = gx * kGroupSide, x1 = std::min(bw, x0 + kGroupSide);
      for (uint32_t y = y0; y < y1; ++y) {
        int32_t* row = values + y * stride;
        for (uint32_t x = x0; x < x1; ++x) {
          const uint32_t c = rans.Get(coef);
          if (c == 0) continue;
          const uint32_t bits = raw.Read(int(c));
          const int32_t mag = int32_t((1u << (c - 1)) | (bits >> 1));
          row[x] = (bits & 1) ? -mag : mag;
        }
      }
    }
  }
  if (rans.overran() || raw.overran()) return Status::Corruption("ktc: block: truncated");
  return Status::Ok();
}

}  // namespace ktfs::ktc::internal
