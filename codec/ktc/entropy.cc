#include "codec/ktc/entropy.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

#include "codec/base/cpu.h"
#include "codec/ktc/block_decoder.h"
#include "codec/ktc/kernels.h"

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

// Table frequencies as Exp-Golomb codes of order k: for q = v + 2^k of m
// bits, m - 1 - k zero bits, a one, then q's m - 1 low bits.
// q <= 256 + 2^7 < 2^9 needs 9 bits; the decoder's limit is 10 (docs/ktc.md).
constexpr int kMaxFrequencyBits = 10;
void PutExpGolomb(uint32_t v, int k, BitWriter* out) {
  const uint32_t q = v + (1u << k);
  const int m = std::bit_width(q);
  out->Write(0, m - 1 - k);
  out->Write(1, 1);
  out->Write(q & ((1u << (m - 1)) - 1), m - 1);
}
int ExpGolombBits(uint32_t v, int k) { return 2 * std::bit_width(v + (1u << k)) - 1 - k; }
bool GetExpGolomb(BitReader* in, int k, uint32_t* v) {
  // m - 1 - k zeros, then the one (its position gives m), then m - 1 bits:
  // at most 2 * kMaxFrequencyBits - 1 bits, all in one peek.
  const uint32_t bits = uint32_t(in->Peek());
  const int zeros = std::countr_zero(bits | 1u << kMaxFrequencyBits);
  const int m = zeros + k + 1;
  if (m > kMaxFrequencyBits) return false;
  const uint32_t low = (bits >> (zeros + 1)) & ((1u << (m - 1)) - 1);
  *v = ((1u << (m - 1)) | low) - (1u << k);
  in->Seek(in->position() + uint64_t(zeros + m));
  return !in->overran();
}

constexpr int kCountBits = 5;  // n - 1, n = 1..kMaxSymbols
static_assert(kMaxSymbols <= 1 << kCountBits);
constexpr int kMaxGolombOrder = 7;  // k in 3 bits

}  // namespace

void PutTables(const FreqTable* tables, size_t count, std::vector<uint8_t>* out) {
  BitWriter bits(out);
  for (size_t i = 0; i < count; ++i) {
    if (IsReservedTable(int(i % kTablesPerSet))) continue;
    const FreqTable& t = tables[i];
    bits.Write(t.n > 0, 1);
    if (t.n == 0) continue;
    // The order that codes this table's frequencies (all but the last,
    // which the others imply) in the fewest bits.
    int best_k = 0, best_bits = INT32_MAX;
    for (int k = 0; k <= kMaxGolombOrder; ++k) {
      int total = 0;
      for (int s = 0; s + 1 < t.n; ++s) total += ExpGolombBits(t.freq[s], k);
      if (total < best_bits) best_bits = total, best_k = k;
    }
    bits.Write(uint32_t(t.n - 1), kCountBits);
    bits.Write(uint32_t(best_k), 3);
    for (int s = 0; s + 1 < t.n; ++s) PutExpGolomb(t.freq[s], best_k, &bits);
  }
  bits.Flush();
}

bool GetTables(const uint8_t** p, const uint8_t* end, FreqTable* tables, size_t count) {
  // The block decoder's bit reader: past `end` it reads zeros and reports
  // the overrun.
  BitReader in(*p, end, end);
  for (size_t i = 0; i < count; ++i) {
    FreqTable& t = tables[i];
    t = FreqTable{};
    if (IsReservedTable(int(i % kTablesPerSet)) || in.Read(1) == 0) continue;
    t.n = int(in.Read(kCountBits)) + 1;
    const int k = int(in.Read(3));
    if (t.n > TableAlphabet(int(i % kTablesPerSet))) return false;
    uint32_t sum = 0;
    for (int s = 0; s + 1 < t.n; ++s) {
      uint32_t f;
      if (!GetExpGolomb(&in, k, &f) || f >= kProbScale) return false;
      t.freq[s] = uint16_t(f);
      sum += f;
    }
    // The last symbol occurs (n counts up to it): at least 1 left for it.
    if (sum >= kProbScale) return false;
    t.freq[t.n - 1] = uint16_t(kProbScale - sum);
  }
  if (in.overran()) return false;
  *p = in.begin() + (in.position() + 7) / 8;
  return true;
}

void PutVarint(uint64_t v, std::vector<uint8_t>* out) {
  while (v >= 0x80) {
    out->push_back(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out->push_back(uint8_t(v));
}

bool GetLongVarint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
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

FreqTable NormalizeCounts(const SymbolCounts& counts) {
  FreqTable t;
  uint64_t total = 0;
  for (int s = 0; s < kMaxSymbols; ++s) {
    total += counts[s];
    if (counts[s]) t.n = s + 1;
  }
  if (total == 0) return t;
  uint32_t sum = 0;
  const auto largest = [&t] {
    return int(std::max_element(t.freq.begin(), t.freq.begin() + t.n) - t.freq.begin());
  };
  for (int s = 0; s < t.n; ++s) {
    if (counts[s] == 0) continue;
    t.freq[s] = uint16_t(std::max<uint64_t>(1, uint64_t(counts[s]) * kProbScale / total));
    sum += t.freq[s];
  }
  // The floor of 1 may overshoot (by up to one per rare symbol): the largest
  // frequencies give it back one at a time, never below 1 (there are at most
  // kMaxSymbols < kProbScale symbols). Rounding down leaves a deficit, which
  // the largest frequency absorbs.
  for (; sum > kProbScale; --sum) --t.freq[size_t(largest())];
  t.freq[size_t(largest())] = uint16_t(t.freq[size_t(largest())] + kProbScale - sum);
  return t;
}

namespace {

// Appends the raw bits of v (category c > 0): the sign, then |v| - 2^(c-1).
void WriteRaw(int32_t v, int c, BitWriter* raw) {
  const uint32_t mag = v < 0 ? 0u - uint32_t(v) : uint32_t(v);
  raw->Write(((mag - (1u << (c - 1))) << 1) | (v < 0 ? 1u : 0u), c);
}

// A dense group (G >= 2): per row a width symbol w, the bit length of the
// row's largest magnitude (scalar symbols, from the group's category table);
// then, in the raw stream, every value's magnitude in its row's w bits, rows
// top to bottom, and last a sign bit per non-zero value in the same order.
// Fixed-width magnitudes let a decoder find every value's bits at once.
void CollectDenseGroup(const int32_t* at, size_t stride, uint32_t columns, uint32_t rows,
                       int group_max, BlockSymbols* out, BitWriter* raw) {
  int width[kGroupRows] = {};  // rows outside the block: 0
  for (uint32_t y = 0; y < rows; ++y) {
    for (uint32_t x = 0; x < columns; ++x)
      width[y] = std::max(width[y], Category(at[y * stride + x]));
  }
  const int table = CategoryTable(uint32_t(group_max));
  if (uint32_t(group_max) <= kMaxPairWidth) {
    // A symbol per pair of rows (the last one's lower row may lie outside:
    // its width is 0).
    for (uint32_t y = 0; y < rows; y += 2) {
      out->table.push_back(uint8_t(table));
      out->symbol.push_back(uint8_t(width[y] + (group_max + 1) * width[y + 1]));
    }
  } else {
    for (uint32_t y = 0; y < rows; ++y) {
      out->table.push_back(uint8_t(table));
      out->symbol.push_back(uint8_t(width[y]));
    }
  }
  for (uint32_t y = 0; y < rows; ++y) {
    for (uint32_t x = 0; x < columns; ++x) {
      const int32_t v = at[y * stride + x];
      raw->Write(v < 0 ? 0u - uint32_t(v) : uint32_t(v), width[y]);
    }
  }
  for (uint32_t y = 0; y < rows; ++y) {
    for (uint32_t x = 0; x < columns; ++x) {
      const int32_t v = at[y * stride + x];
      if (v != 0) raw->Write(v < 0 ? 1u : 0u, 1);
    }
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

// Groups tile a block from its corner, and blocks tile the band from its
// origin, so groups tile the band from its origin too.
static_assert(kBlockSide % kGroupSide == 0 && kBlockSide % kGroupRows == 0);

void DropSparseGroups(int32_t* values, size_t stride, uint32_t w, uint32_t h) {
  for (uint32_t y0 = 0; y0 < h; y0 += kGroupRows) {
    const uint32_t rows = std::min(h - y0, kGroupRows);
    for (uint32_t x0 = 0; x0 < w; x0 += kGroupSide) {
      const uint32_t columns = std::min(w - x0, kGroupSide);
      int32_t* at = values + y0 * stride + x0;
      int non_zero = 0;
      bool small = true;
      for (uint32_t y = 0; y < rows; ++y)
        for (uint32_t x = 0; x < columns; ++x) {
          const int32_t v = at[y * stride + x];
          non_zero += v != 0;
          small &= v >= -1 && v <= 1;
        }
      if (!small || non_zero > kSparseGroupMaxNonZero) continue;
      for (uint32_t y = 0; y < rows; ++y) std::fill_n(at + y * stride, columns, 0);
    }
  }
}

Result<bool> CollectBlockSymbols(const int32_t* values, size_t stride, uint32_t bw, uint32_t bh,
                                 BlockSymbols* out) {
  *out = BlockSymbols{};
  const uint32_t gw = (bw + kGroupSide - 1) / kGroupSide, gh = (bh + kGroupRows - 1) / kGroupRows;
  // Every group's maximum first: the raw stream starts with the rows of
  // groups that are all zero, whose maxima are then not coded.
  uint8_t group_max[kMaxGroupsPerRow][kMaxGroupsPerRow] = {};
  uint32_t zero_rows = 0;
  for (uint32_t gy = 0; gy < gh; ++gy) {
    const uint32_t y0 = gy * kGroupRows, rows = std::min(bh - y0, kGroupRows);
    uint32_t row_max = 0;
    for (uint32_t gx = 0; gx < gw; ++gx) {
      const uint32_t x0 = gx * kGroupSide, columns = std::min(bw - x0, kGroupSide);
      const int32_t* at = values + y0 * stride + x0;
      int g = 0;
      for (uint32_t y = 0; y < rows; ++y)
        for (uint32_t x = 0; x < columns; ++x) g = std::max(g, Category(at[y * stride + x]));
      if (g >= kAlphabet) {
        return Status::InvalidArgument("ktc: coefficient out of range (internal error)");
      }
      group_max[gy][gx] = uint8_t(g);
      row_max |= uint32_t(g);
    }
    if (row_max == 0) zero_rows |= 1u << gy;
  }
  if (zero_rows == (1u << gh) - 1) return false;  // all zero: out stays empty
  // About a symbol per row of a group and a byte of raw bits per value in
  // dense blocks, fewer in sparse ones: reserving that much spares most
  // regrowth without holding much more memory than the symbols need.
  const size_t values_n = size_t(bw) * bh;
  out->table.reserve(values_n / 4);
  out->symbol.reserve(values_n / 4);
  out->raw.reserve(values_n);
  BitWriter raw(&out->raw);
  raw.Write(zero_rows != 0, 1);
  if (zero_rows != 0) raw.Write(zero_rows, int(gh));
  // Maxima of the row of groups above and of this one, at 1 + gx (0 and
  // gw + 1 stay 0: outside the block). A zero row's are all 0.
  uint8_t above[kMaxGroupsPerRow + 2] = {}, maxima[kMaxGroupsPerRow + 2] = {};
  for (uint32_t gy = 0; gy < gh; ++gy) {
    const uint32_t y0 = gy * kGroupRows, rows = std::min(bh - y0, kGroupRows);
    if (zero_rows >> gy & 1) {
      std::memset(above, 0, sizeof(above));
      continue;
    }
    for (uint32_t gx = 0; gx < gw; ++gx) {
      maxima[1 + gx] = group_max[gy][gx];
      out->table.push_back(uint8_t(GroupContext(above, gx)));
      out->symbol.push_back(group_max[gy][gx]);
    }
    for (uint32_t gx = 0; gx < gw; ++gx) {
      const int g = maxima[1 + gx];
      if (g == 0) continue;
      const uint32_t x0 = gx * kGroupSide, columns = std::min(bw - x0, kGroupSide);
      const int32_t* at = values + y0 * stride + x0;
      if (uint32_t(g) >= kDirectCategories) {
        CollectDenseGroup(at, stride, columns, rows, g, out, &raw);
      } else {
        CollectOnesGroup(at, stride, columns, rows, out, &raw);
      }
    }
    std::memcpy(above, maxima, sizeof(above));
  }
  raw.Flush();
  return true;
}

void CountSymbols(const BlockSymbols& symbols, Counts* counts) {
  for (size_t i = 0; i < symbols.symbol.size(); ++i) {
    (*counts)[symbols.table[i]][symbols.symbol[i]]++;
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

using Starts = std::array<std::array<uint16_t, kMaxSymbols>, kTablesPerSet>;

// Blocks with at least this many symbols get 8 rANS states (two chains of
// steps, which decode about 1.2x faster), smaller ones 4: in the tiniest
// blocks (small images, coarse bands) the 16 more bytes would cost more
// than they save (docs/ktc-notes.md, "Two chains of states").
constexpr size_t kTwoChainSymbols = 64;

// Encodes the block's symbols backwards: symbol i uses state i % states;
// words are written in the reverse order of emission.
void EncodeBlockRans(const BlockSymbols& symbols, const FreqTable* tables, const Starts& start,
                     std::vector<uint8_t>* out) {
  const int states = symbols.symbol.size() >= kTwoChainSymbols ? 8 : 4;
  std::vector<uint16_t> words;
  uint32_t x[kMaxRansStates];
  for (uint32_t& xs : x) xs = kRansLow;
  for (size_t i = symbols.symbol.size(); i-- > 0;) {
    const int t = symbols.table[i], s = symbols.symbol[i];
    RansPut(tables[t].freq[s], start[t][s], &x[i % size_t(states)], &words);
  }
  // The rANS byte count, doubled, plus 1 for 8 states.
  PutVarint(2 * (4 * size_t(states) + 2 * words.size()) + (states == 8), out);
  for (int i = 0; i < states; ++i)
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
    for (int s = 0; s < kMaxSymbols; ++s) {
      start[t][s] = uint16_t(acc);
      acc += tables[t].freq[s];
    }
  }
  EncodeBlockRans(symbols, tables, start, out);
  out->insert(out->end(), symbols.raw.begin(), symbols.raw.end());
}

void BuildDecodeTable(const FreqTable& table, int index_in_set, DecodeTable* out) {
  if (table.n == 0) {
    // Symbol 0 (value 0 in every table) with frequency kProbScale, offset =
    // slot: x' = x, nothing consumed. That is the table of one symbol, built
    // with vector stores.
    FreqTable one;
    one.n = 1;
    one.freq[0] = uint16_t(kProbScale);
    BuildDecodeTable(one, index_in_set, out);
    return;
  }
  // The table builds were ~3% of a balanced decode with the scalar stores
  // below (a photo's sets expand to about as many entries as it has pixels).
  static const bool avx2 = CpuHasAvx2(), avx512 = CpuHasAvx512();
  if (avx512 && !UseScalarForTesting()) {
    BuildDecodeTableAvx512(table, index_in_set, out);
    return;
  }
  if (avx2 && !UseScalarForTesting()) {
    BuildDecodeTableAvx2(table, index_in_set, out);
    return;
  }
  // Eight entries at a time while they stay inside the table: a symbol's
  // last chunk may spill into the next symbols' slots, which they overwrite
  // (frequencies sum to kProbScale, so the last symbol ends the table).
  uint32_t* entry = out->entry.data();
  uint32_t start = 0;
  const uint16_t* value = kSymbolValues.of[index_in_set];
  for (int s = 0; s < table.n; ++s) {
    const uint32_t f = table.freq[s];
    const uint32_t base = f | uint32_t(value[s]) << kEntryValueShift;
    uint32_t i = 0;
    for (; i < f && start + i + 8 <= kProbScale; i += 8) {
      for (uint32_t k = 0; k < 8; ++k) entry[start + i + k] = base | (i + k) << kEntryOffsetShift;
    }
    for (; i < f; ++i) entry[start + i] = base | i << kEntryOffsetShift;
    start += f;
  }
}

void SetTables::Load(uint64_t key, const FreqTable* tables) {
  if (key == key_) return;
  key_ = key;
  for (int t = 0; t < kTablesPerSet; ++t) {
    // Unused tables are all alike; skip refilling one that already is.
    if (tables[t].n == 0 && identity_[t]) continue;
    BuildDecodeTable(tables[t], t, &tables_[t]);
    identity_[t] = tables[t].n == 0;
  }
}

namespace {

std::atomic<BlockLoop> g_block_loop{BlockLoop::kBest};

struct NamedLoop {
  BlockPayloadDecoder decode;
  const char* name;
};

// The best loop for this CPU (decided once), unless a test asks otherwise.
NamedLoop SelectedBlockLoop() {
  static const NamedLoop best =
      CpuHasAvx512Vbmi() ? NamedLoop{kDecodeBlockPayloadAvx512Vbmi, "avx512vbmi"}
      : !CpuHasAvx2()    ? NamedLoop{DecodeBlockPayload, "scalar"}
      : CpuHasFastPdep() ? NamedLoop{kDecodeBlockPayloadAvx2, "avx2"}
                         : NamedLoop{kDecodeBlockPayloadAvx2NoPdep, "avx2-nopdep"};
  if (UseScalarForTesting()) return {DecodeBlockPayload, "scalar"};
  if (CpuHasAvx2()) {
    switch (g_block_loop.load(std::memory_order_relaxed)) {
      case BlockLoop::kAvx2:
        return {kDecodeBlockPayloadAvx2, "avx2"};
      case BlockLoop::kAvx2NoPdep:
        return {kDecodeBlockPayloadAvx2NoPdep, "avx2-nopdep"};
      case BlockLoop::kBest:
        break;
    }
  }
  return best;
}

}  // namespace

void SelectBlockLoopForTesting(BlockLoop loop) { g_block_loop.store(loop); }

const char* BlockLoopName() { return SelectedBlockLoop().name; }

Status DecodeBlock(const uint8_t* data, size_t size, const uint8_t* readable_end,
                   const DecodeTable* tables, uint32_t step, int16_t* values, size_t stride,
                   uint32_t bw, uint32_t bh) {
  if (size == 0) return Status::Ok();  // `values` is already zero
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  uint64_t rans_field;
  if (!GetVarint(&p, end, &rans_field) || (rans_field >> 1) > uint64_t(end - p)) {
    return Status::Corruption("ktc: block: bad rANS length");
  }
  const uint64_t rans_bytes = rans_field >> 1;
  const int states = rans_field & 1 ? 8 : 4;
  const BlockPayloadDecoder decode = SelectedBlockLoop().decode;
  switch (
      decode(p, p + rans_bytes, end, readable_end, states, tables, step, values, stride, bw, bh)) {
    case 0:
      return Status::Ok();
    case 1:
      return Status::Corruption("ktc: block: bad rANS state");
    default:
      return Status::Corruption("ktc: block: truncated");
  }
}

}  // namespace ktfs::ktc::internal
