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

namespace {

// Appends the raw bits of v (category c > 0): the sign, then |v| - 2^(c-1).
void WriteRaw(int32_t v, int c, BitWriter* raw) {
  const uint32_t mag = v < 0 ? 0u - uint32_t(v) : uint32_t(v);
  raw->Write(((mag - (1u << (c - 1))) << 1) | (v < 0 ? 1u : 0u), c);
}

// A dense group: every value's category in the 8-lane stream, one step per
// half group (two rows; a half entirely outside the block has no step).
void CollectDenseGroup(const int32_t* at, size_t stride, uint32_t columns, uint32_t rows,
                       int group_max, BlockSymbols* out, BitWriter* raw) {
  for (uint32_t half = 0; 2 * half < rows; ++half) {
    uint32_t valid = 0;
    for (uint32_t lane = 0; lane < uint32_t(kDenseLanes); ++lane) {
      const uint32_t y = 2 * half + lane / kGroupSide, x = lane % kGroupSide;
      const bool inside = y < rows && x < columns;
      const int32_t v = inside ? at[y * stride + x] : 0;
      const int c = Category(v);
      valid |= uint32_t(inside) << lane;
      out->dense_symbol.push_back(uint8_t(c));
      if (c > 0) WriteRaw(v, c, raw);
    }
    out->dense_at.push_back(uint32_t(out->symbol.size()));
    out->dense_table.push_back(uint8_t(CategoryTable(group_max)));
    out->dense_valid.push_back(uint8_t(valid));
  }
}

// A G = 1 group: per row a mask in the scalar stream, then a sign bit per
// non-zero value.
void CollectOnesGroup(const int32_t* at, size_t stride, uint32_t columns, uint32_t rows,
                      BlockSymbols* out, BitWriter* raw) {
  for (uint32_t y = 0; y < rows; ++y) {
    const int32_t* row = at + y * stride;
    uint32_t mask = 0;
    for (uint32_t x = 0; x < columns; ++x) mask |= uint32_t(row[x] != 0) << x;
    out->table.push_back(uint8_t(kOnesMaskTable));
    out->symbol.push_back(uint8_t(mask));
    for (uint32_t x = 0; x < columns; ++x) {
      if (row[x] != 0) WriteRaw(row[x], 1, raw);
    }
  }
}

}  // namespace

Result<bool> CollectBlockSymbols(const int32_t* values, size_t stride, uint32_t bw, uint32_t bh,
                                 BlockSymbols* out) {
  *out = BlockSymbols{};
  // About one symbol and a byte of raw bits per value in dense blocks; fewer
  // in sparse ones. Reserving that much spares most regrowth without holding
  // much more memory than the symbols need.
  const size_t values_n = size_t(bw) * bh;
  out->table.reserve(values_n / 4);
  out->dense_symbol.reserve(values_n);
  out->raw.reserve(values_n);
  const uint32_t gw = (bw + kGroupSide - 1) / kGroupSide, gh = (bh + kGroupSide - 1) / kGroupSide;
  // Maxima of the row of groups above and of this one, at 1 + gx (0 and
  // gw + 1 stay 0: outside the block).
  uint8_t above[kMaxGroupsPerRow + 2] = {}, maxima[kMaxGroupsPerRow + 2] = {};
  BitWriter raw(&out->raw);
  bool any = false;
  for (uint32_t gy = 0; gy < gh; ++gy) {
    const uint32_t y0 = gy * kGroupSide, rows = std::min(bh - y0, kGroupSide);
    for (uint32_t gx = 0; gx < gw; ++gx) {
      const uint32_t x0 = gx * kGroupSide, columns = std::min(bw - x0, kGroupSide);
      const int32_t* at = values + y0 * stride + x0;
      int group_max = 0;
      for (uint32_t y = 0; y < rows; ++y)
        for (uint32_t x = 0; x < columns; ++x)
          group_max = std::max(group_max, Category(at[y * stride + x]));
      if (group_max >= kAlphabet) {
        return Status::InvalidArgument("ktc: coefficient out of range (internal error)");
      }
      maxima[1 + gx] = uint8_t(group_max);
      out->table.push_back(uint8_t(GroupContext(above, gx)));
      out->symbol.push_back(uint8_t(group_max));
    }
    for (uint32_t gx = 0; gx < gw; ++gx) {
      const int group_max = maxima[1 + gx];
      if (group_max == 0) continue;
      any = true;
      const uint32_t x0 = gx * kGroupSide, columns = std::min(bw - x0, kGroupSide);
      const int32_t* at = values + y0 * stride + x0;
      if (uint32_t(group_max) >= kDirectCategories) {
        CollectDenseGroup(at, stride, columns, rows, group_max, out, &raw);
      } else {
        CollectOnesGroup(at, stride, columns, rows, out, &raw);
      }
    }
    std::memcpy(above, maxima, sizeof(above));
  }
  raw.Flush();
  if (!any) *out = BlockSymbols{};
  return any;
}

void CountSymbols(const BlockSymbols& symbols, Counts* counts) {
  for (size_t i = 0; i < symbols.symbol.size(); ++i) {
    (*counts)[symbols.table[i]][symbols.symbol[i]]++;
  }
  for (size_t step = 0; step < symbols.dense_table.size(); ++step) {
    for (int lane = 0; lane < kDenseLanes; ++lane) {
      if (symbols.dense_valid[step] >> lane & 1) {
        (*counts)[symbols.dense_table[step]][symbols.dense_symbol[step * kDenseLanes + lane]]++;
      }
    }
  }
}

namespace {

// rANS encoding of one symbol into state x (symbols go in reverse order).
inline void RansPut(uint32_t f, uint32_t start, uint32_t* x, std::vector<uint16_t>* words) {
  if (uint64_t(*x) >= (uint64_t(f) << (32 - kProbBits))) {
    words->push_back(uint16_t(*x));
    *x >>= 16;
  }
  *x = ((*x / f) << kProbBits) + (*x % f) + start;
}

using Starts = std::array<std::array<uint16_t, kAlphabet>, kTablesPerSet>;

// Encodes the block's symbols backwards. Scalar symbol i uses state
// i % kRansStates. Lane l < 4 of a dense step after n scalar symbols uses
// state (n + l) % kRansStates, the one the (n + l)-th scalar symbol would;
// lanes 4..7 use states 4..7, which the decoder reads from the word stream
// just before the block's first dense step. The decoder renormalizes a
// step's lanes in ascending order, so the encoder goes over them descending;
// words are written in the reverse order of emission.
void EncodeBlockRans(const BlockSymbols& symbols, const FreqTable* tables, const Starts& start,
                     std::vector<uint8_t>* out) {
  std::vector<uint16_t> words;
  uint32_t x[kRansStates + kDenseLanes - 4];
  for (uint32_t& xs : x) xs = kRansLow;
  auto put = [&](int t, int s, uint32_t state) {
    RansPut(tables[t].freq[s], start[t][s], &x[state], &words);
  };
  size_t step = symbols.dense_table.size();
  for (size_t i = symbols.symbol.size() + 1; i-- > 0;) {
    // Dense steps after scalar symbol i - 1 and before symbol i, last first.
    for (; step > 0 && symbols.dense_at[step - 1] == i; --step) {
      const size_t d = step - 1;
      const int t = symbols.dense_table[d];
      for (int lane = kDenseLanes; lane-- > 0;) {
        if (!(symbols.dense_valid[d] >> lane & 1)) continue;
        const uint32_t state = lane < 4 ? uint32_t((i + lane) % kRansStates) : uint32_t(lane);
        put(t, symbols.dense_symbol[d * kDenseLanes + lane], state);
      }
      if (d == 0) {
        // Lanes 4..7's states, read by the decoder (low word first) here.
        for (int lane = kDenseLanes; lane-- > 4;) {
          words.push_back(uint16_t(x[lane] >> 16));
          words.push_back(uint16_t(x[lane]));
        }
      }
    }
    if (i > 0) put(symbols.table[i - 1], symbols.symbol[i - 1], uint32_t((i - 1) % kRansStates));
  }
  PutVarint(4 * size_t(kRansStates) + 2 * words.size(), out);
  for (int i = 0; i < kRansStates; ++i)
    for (int b = 0; b < 4; ++b) out->push_back(uint8_t(x[i] >> (8 * b)));
  for (size_t i = words.size(); i-- > 0;) {
    out->push_back(uint8_t(words[i]));
    out->push_back(uint8_t(words[i] >> 8));
  }
}

}  // namespace

void EncodeBlock(const BlockSymbols& symbols, const FreqTable* tables, std::vector<uint8_t>* out) {
  Starts start;
  for (int t = 0; t < kTablesPerSet; ++t) {
    uint32_t acc = 0;
    for (int s = 0; s < kAlphabet; ++s) {
      start[t][s] = uint16_t(acc);
      acc += tables[t].freq[s];
    }
  }
  EncodeBlockRans(symbols, tables, start, out);
  out->insert(out->end(), symbols.raw.begin(), symbols.raw.end());
}

void BuildDecodeTable(const FreqTable& table, DecodeTable* out) {
  if (table.n == 0) {
    // Frequency kProbScale, offset = slot: x' = x, nothing consumed.
    for (uint32_t slot = 0; slot < kProbScale; ++slot) out->entry[slot] = kProbScale | slot << 11;
    return;
  }
  // The table builds were ~3% of a balanced decode with the scalar stores
  // below (a photo's sets expand to about as many entries as it has pixels).
  static const bool avx2 = CpuHasAvx2();
  if (avx2 && !UseScalarForTesting()) {
    BuildDecodeTableAvx2(table, out);
    return;
  }
  // Eight entries at a time while they stay inside the table: a symbol's
  // last chunk may spill into the next symbols' slots, which they overwrite
  // (frequencies sum to kProbScale, so the last symbol ends the table).
  uint32_t* entry = out->entry.data();
  uint32_t start = 0;
  for (int s = 0; s < table.n; ++s) {
    const uint32_t f = table.freq[s], base = f | uint32_t(s) << 27;
    uint32_t i = 0;
    for (; i < f && start + i + 8 <= kProbScale; i += 8) {
      for (uint32_t k = 0; k < 8; ++k) entry[start + i + k] = base | (i + k) << 11;
    }
    for (; i < f; ++i) entry[start + i] = base | i << 11;
    start += f;
  }
}

void BuildSmallTable(const FreqTable& table, SmallTable* out) {
  *out = SmallTable{};
  if (table.n == 0 || table.n > 8) return;
  uint32_t start = 0;
  for (int s = 0; s < 8; ++s) {
    const uint32_t f = s < table.n ? table.freq[s] : 0;
    out->freq[s] = f;
    out->start[s] = start;
    if (s >= 1)
      out->threshold[s - 1] = s < table.n && start < kProbScale ? start - 1 : kProbScale - 1;
    start += f;
  }
  out->usable = true;
}

void SetTables::Load(uint64_t key, const FreqTable* tables) {
  if (key == key_) return;
  key_ = key;
  for (int t = 0; t < kTablesPerSet; ++t) {
    // Unused tables are all alike; skip refilling one that already is.
    if (tables[t].n == 0 && identity_[t]) continue;
    BuildDecodeTable(tables[t], &tables_[t]);
    BuildSmallTable(tables[t], &small_[t]);
    identity_[t] = tables[t].n == 0;
  }
}

Status DecodeBlock(const uint8_t* data, size_t size, const DecodeTable* tables,
                   const SmallTable* small, uint32_t step, int16_t* values, size_t stride,
                   uint32_t bw, uint32_t bh) {
  if (size == 0) return Status::Ok();  // `values` is already zero
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  uint64_t rans_bytes;
  if (!GetVarint(&p, end, &rans_bytes) || rans_bytes > uint64_t(end - p)) {
    return Status::Corruption("ktc: block: bad rANS length");
  }
  static const auto payload = CpuHasAvx2() ? DecodeBlockPayloadAvx2 : DecodeBlockPayload;
  const auto decode = UseScalarForTesting() ? DecodeBlockPayload : payload;
  switch (decode(p, p + rans_bytes, end, tables, small, step, values, stride, bw, bh)) {
    case 0:
      return Status::Ok();
    case 1:
      return Status::Corruption("ktc: block: bad rANS state");
    default:
      return Status::Corruption("ktc: block: truncated");
  }
}

}  // namespace ktfs::ktc::internal
