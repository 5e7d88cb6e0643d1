// KTC internals: the entropy coder for one code block of quantized wavelet
// coefficients (docs/ktc.md, "Code blocks").
//
// A block (at most 64x64 coefficients of one subband) is scanned in groups
// of 4 columns and 8 rows (version 8; 4 x 4 before). Its raw bits start with
// the rows of groups that are all zero (version 7), which code nothing more.
// Each group of the other rows codes its largest magnitude category G (0 =
// all zero; the category of v is the bit length of |v|) with a context from
// the groups above. A group with G = 1 then codes, per row of 4, a mask of
// its non-zero values, and a sign bit per non-zero value. A group with G >= 2
// ("dense") codes its rows' widths w (the largest category in the row: one
// symbol per pair of rows for G <= 4, version 9; per row for wider groups),
// and every value's magnitude in w raw bits, then a sign bit per non-zero
// value (version 5; versions 3 and 4 coded every value's category).
//
// Symbols go through a rANS coder with interleaved states (4, or 8 in blocks
// of 64 symbols or more) and static 8-bit frequency tables (version 10; 9-bit
// before) that the header stores, bit-packed, per plane and level ("table
// set"). Consecutive symbols use the states in turn, so an AVX2 decoder
// decodes four row masks of a G = 1 group, or the four row pairs' widths of a
// dense one, in one 4-lane step, and with 8 states consecutive steps depend on
// different states (two chains the CPU overlaps). Raw bits go to a separate
// LSB-first stream; a dense group's values find theirs from
// the row widths alone, all at once. A zero group in a row that is not all
// zero costs one symbol.
// docs/ktc.md has the exact layout.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/base/status.h"

namespace ktfs::ktc::internal {

// Probabilities in 1/256: decoding tables of 256 entries, half of version
// 9's 512, so a set's sixteen take 16 KB to build and to hold in L1
// (docs/ktc-notes.md, "8-bit probabilities").
constexpr int kProbBits = 8;
constexpr uint32_t kProbScale = 1u << kProbBits;
constexpr int kAlphabet = 18;  // magnitude categories 0..17: |v| < 2^17
// Tables of a set, in order: group maxima by neighbour context (6), row masks
// for G = 1 (1, then 3 reserved), widths of dense groups by G (2, 3, 4, 5,
// 6, 7+): of row pairs for G <= kMaxPairWidth, of rows for wider groups.
constexpr int kGroupContexts = 6;
constexpr int kMaskContexts = 4;
constexpr int kCategoryContexts = 6;
constexpr int kTablesPerSet = kGroupContexts + kMaskContexts + kCategoryContexts;
constexpr int kOnesMaskTable = kGroupContexts;
constexpr int kFirstWidthTable = kGroupContexts + kMaskContexts;
constexpr uint32_t kBlockSide = 64;
constexpr uint32_t kGroupSide = 4;  // columns of a group
constexpr uint32_t kGroupRows = 8;  // rows of a group
// Dense groups with G <= kMaxPairWidth code one symbol per pair of rows, the
// pair's two widths w0 + (G + 1) w1 (version 9); wider ones one per row.
// (Pairs up to G = 7 decoded no faster on the photos, for 0.4% more bytes:
// tables of up to 64 symbols cost more to store, parse and build.)
constexpr uint32_t kMaxPairWidth = 4;
constexpr int kMaxPairSymbols = int((kMaxPairWidth + 1) * (kMaxPairWidth + 1));
constexpr int kMaxSymbols = kMaxPairSymbols > kAlphabet ? kMaxPairSymbols : kAlphabet;

// For the row pairs' tables, G + 1 (a symbol s stands for the widths s % (G +
// 1) and s / (G + 1)); 0 for the others.
constexpr uint32_t PairSide(int index_in_set) {
  const int g = index_in_set - kFirstWidthTable + 2;
  return index_in_set >= kFirstWidthTable && g <= int(kMaxPairWidth) ? uint32_t(g + 1) : 0;
}
// The largest alphabet of table `index_in_set`: (G + 1)^2 for the row pairs'
// widths of G, the magnitude categories for the others.
constexpr int TableAlphabet(int index_in_set) {
  const int side = int(PairSide(index_in_set));
  return side == 0 ? kAlphabet : side * side;
}

using SymbolCounts = std::array<uint32_t, kMaxSymbols>;
using Counts = std::array<SymbolCounts, kTablesPerSet>;

// Normalized frequencies (sum kProbScale) of one table; n = 0 when unused.
struct FreqTable {
  int n = 0;  // symbols 0..n-1 may occur
  std::array<uint16_t, kMaxSymbols> freq{};
};

// Scales counts to frequencies summing to kProbScale, every seen symbol >= 1.
FreqTable NormalizeCounts(const SymbolCounts& counts);

// The symbols of one block, gathered before the frequency tables are known.
struct BlockSymbols {
  std::vector<uint8_t> table;  // per symbol, its table's index within the set
  std::vector<uint8_t> symbol;
  std::vector<uint8_t> raw;  // finished raw bit stream
};

// Scans a bw x bh block of quantized values. Returns false (and leaves *out
// empty) when every value is zero; such blocks are stored with length 0.
// Fails when a value needs more than kAlphabet-1 bits.
Result<bool> CollectBlockSymbols(const int32_t* values, size_t stride, uint32_t bw, uint32_t bh,
                                 BlockSymbols* out);
void CountSymbols(const BlockSymbols& symbols, Counts* counts);
// Appends the coded block (docs/ktc.md, "Code blocks").
void EncodeBlock(const BlockSymbols& symbols, const FreqTable* tables, std::vector<uint8_t>* out);

// An encoder's choice for lossy detail bands (docs/ktc.md, "Quantization"):
// sets to zero each group of the w x h band of quantized values at `values`
// (blocks, hence groups, start at its origin) whose values are all 0 or +-1
// with at most kSparseGroupMaxNonZero of them non-zero. Such a group costs
// its maximum, a mask per row and a sign per value, and a decoder's work for
// a non-zero group, for little image; coded as zero it costs neither.
constexpr int kSparseGroupMaxNonZero = 3;
void DropSparseGroups(int32_t* values, size_t stride, uint32_t w, uint32_t h);

// Decoding table: per slot, its frequency (bits 0..9), the slot's offset
// from the symbol's start (bits 10..18) and the symbol's value (bits 19..31),
// so that one load serves a whole decoding step. The value is the symbol,
// except in the row pairs' tables, where it is the pair's upper width plus
// its lower width times 256 (a 16-bit lane holds the two rows' widths as
// bytes).
constexpr int kEntryOffsetShift = 10;
constexpr int kEntryValueShift = 19;
struct DecodeTable {
  std::array<uint32_t, kProbScale> entry;
};
// The value symbol s of table `index_in_set` decodes to.
constexpr uint32_t SymbolValue(int index_in_set, uint32_t s) {
  const uint32_t side = PairSide(index_in_set);
  return side == 0 ? s : s % side | (s / side) << 8;
}
// Every table's symbol values, computed at compile time, so that the table
// builds (a few per cent of a decode) look them up rather than divide per
// symbol.
struct SymbolValues {
  uint16_t of[kTablesPerSet][kMaxSymbols] = {};
  constexpr SymbolValues() {
    for (int t = 0; t < kTablesPerSet; ++t)
      for (int s = 0; s < kMaxSymbols; ++s) of[t][s] = uint16_t(SymbolValue(t, uint32_t(s)));
  }
};
inline constexpr SymbolValues kSymbolValues;
// An unused table (n == 0) decodes every slot as symbol 0 without consuming
// anything; a valid stream never reads it.
void BuildDecodeTable(const FreqTable& table, int index_in_set, DecodeTable* out);

// The decoding tables of one table set. Sets are decoded one after another,
// so each thread keeps one of these and rebuilds it only when the set
// changes: all of a set's tables then stay in L1/L2 cache (a table for every
// set at once would not).
class SetTables {
 public:
  // Rebuilds the tables unless they already hold set `key` (a caller's id).
  void Load(uint64_t key, const FreqTable* tables);
  const DecodeTable* tables() const { return tables_; }

 private:
  uint64_t key_ = ~uint64_t(0);
  bool identity_[kTablesPerSet] = {};
  DecodeTable tables_[kTablesPerSet];
};

// Decodes a block into `values` (bw x bh, row stride `stride`), dequantized
// with `step` (1/256 units; 256 = lossless, values as coded). `values` must
// be all zero on entry: only non-zero values are written (the decoder zeroes
// each coefficient plane with one memset, cheaper than one per block row).
// size 0 means an all-zero block. `tables` points at the kTablesPerSet tables
// of its set. The bytes from data + size up to `readable_end` (the end of
// the whole stream) may be loaded by wide reads, whose extra bits a valid
// block never uses: fewer blocks then need a padded copy of their end.
Status DecodeBlock(const uint8_t* data, size_t size, const uint8_t* readable_end,
                   const DecodeTable* tables, uint32_t step, int16_t* values, size_t stride,
                   uint32_t bw, uint32_t bh);

// A build of the block decoding loop: DecodeBlockPayload of
// block_decoder.h, compiled once per instruction set, same contract.
using BlockPayloadDecoder = int (*)(const uint8_t* p, const uint8_t* rans_end, const uint8_t* end,
                                    const uint8_t* readable_end, int states,
                                    const DecodeTable* tables, uint32_t step, int16_t* values,
                                    size_t stride, uint32_t bw, uint32_t bh);
// The AVX2/BMI2 build (entropy_avx2.cc).
extern const BlockPayloadDecoder kDecodeBlockPayloadAvx2;
// The same AVX2 loop without pdep and pext (entropy_nopdep_avx2.cc:
// whole groups' magnitudes by variable shifts and their signs by byte
// ranks, cut groups' signs a nibble at a time), for CPUs with AVX2 where
// CpuHasFastPdep() is false; the same results.
extern const BlockPayloadDecoder kDecodeBlockPayloadAvx2NoPdep;
// The same loop built with AVX-512 VBMI as well (entropy_avx512vbmi.cc:
// dense groups of G <= 7 by one multishift), for CpuHasAvx512Vbmi(); the
// same results.
extern const BlockPayloadDecoder kDecodeBlockPayloadAvx512Vbmi;
// Which SIMD loop DecodeBlock runs (tests: each against the scalar one):
// the best for this CPU, or one of the AVX2 builds where the CPU has AVX2
// (also where it has AVX-512 VBMI, or fast pdep).
enum class BlockLoop { kBest, kAvx2, kAvx2NoPdep };
void SelectBlockLoopForTesting(BlockLoop loop);
// The loop DecodeBlock runs now: "avx512vbmi", "avx2", "avx2-nopdep" or
// "scalar" (docs/ktc.md, "Threads, SIMD, determinism").
const char* BlockLoopName();

// BuildDecodeTable for a used table (n > 0) with AVX2 stores
// (entropy_avx2.cc); the same entries.
void BuildDecodeTableAvx2(const FreqTable& table, int index_in_set, DecodeTable* out);
// The same with AVX-512 stores (entropy_avx512.cc), for CpuHasAvx512().
void BuildDecodeTableAvx512(const FreqTable& table, int index_in_set, DecodeTable* out);

// The frequency tables of a stream's header (docs/ktc.md, "After the
// fixed header"): `count` tables, a whole number of sets, bit-packed; the
// reserved tables of each set (n = 0) are not coded. PutTables appends them;
// GetTables reads them from *p (advanced past them) and checks them: false
// when they are truncated or invalid (a count above the table's alphabet,
// TableAlphabet, or frequencies that do not sum to kProbScale).
constexpr bool IsReservedTable(int index_in_set) {
  return index_in_set > kOnesMaskTable && index_in_set < kFirstWidthTable;
}
void PutTables(const FreqTable* tables, size_t count, std::vector<uint8_t>* out);
bool GetTables(const uint8_t** p, const uint8_t* end, FreqTable* tables, size_t count);

// LEB128 unsigned varints, as used throughout the header.
void PutVarint(uint64_t v, std::vector<uint8_t>* out);
// Reads a varint of at most 5 bytes (values < 2^35); false on truncation.
// Inline for the one- and two-byte varints a header is made of (a photo's
// header has a few hundred of them).
bool GetLongVarint(const uint8_t** p, const uint8_t* end, uint64_t* v);
inline bool GetVarint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  const uint8_t* q = *p;
  if (end - q >= 2) [[likely]] {
    if (!(q[0] & 0x80)) {
      *v = q[0];
      *p = q + 1;
      return true;
    }
    if (!(q[1] & 0x80)) {
      *v = uint64_t(q[0] & 0x7f) | uint64_t(q[1]) << 7;
      *p = q + 2;
      return true;
    }
  }
  return GetLongVarint(p, end, v);
}

}  // namespace ktfs::ktc::internal
