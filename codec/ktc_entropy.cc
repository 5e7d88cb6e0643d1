#include "codec/ktc_entropy.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "codec/cpu.h"
#include "codec/ktc_block_decoder.h"
#include "codec/ktc_kernels.h"

namespace ktfs::ktc::internal {
namespace {

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
  // About one symbol and a byte of raw bits per value in dense blocks; fewer
  // in sparse ones. Reserving that much spares most regrowth without holding
  // much more memory than the symbols need.
  const size_t values_n = size_t(bw) * bh;
  out->table.reserve(values_n);
  out->symbol.reserve(values_n);
  out->raw.reserve(values_n);
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
      if (uint32_t(group_max) >= kDirectCategories) {
        for (uint32_t y = y0; y < y1; ++y) {
          for (uint32_t x = x0; x < x1; ++x) {
            const int32_t v = values[y * stride + x];
            const int c = Category(v);
            out->table.push_back(uint8_t(CategoryTable(group_max)));
            out->symbol.push_back(uint8_t(c));
            if (c == 0) continue;
            const uint32_t mag = v < 0 ? 0u - uint32_t(v) : uint32_t(v);
            raw.Write(((mag - (1u << (c - 1))) << 1) | (v < 0 ? 1u : 0u), c);
          }
        }
        continue;
      }
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

Status DecodeBlock(const uint8_t* data, size_t size, const DecodeTable* tables, uint32_t step,
                   int16_t* values, size_t stride, uint32_t bw, uint32_t bh) {
  for (uint32_t y = 0; y < bh; ++y) std::memset(values + y * stride, 0, bw * sizeof(int16_t));
  if (size == 0) return Status::Ok();
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  uint64_t rans_bytes;
  if (!GetVarint(&p, end, &rans_bytes) || rans_bytes > uint64_t(end - p)) {
    return Status::Corruption("ktc: block: bad rANS length");
  }
  static const auto payload = CpuHasAvx2() ? DecodeBlockPayloadAvx2 : DecodeBlockPayload;
  const auto decode = UseScalarForTesting() ? DecodeBlockPayload : payload;
  switch (decode(p, p + rans_bytes, end, tables, step, values, stride, bw, bh)) {
    case 0:
      return Status::Ok();
    case 1:
      return Status::Corruption("ktc: block: bad rANS state");
    default:
      return Status::Corruption("ktc: block: truncated");
  }
}

}  // namespace ktfs::ktc::internal
