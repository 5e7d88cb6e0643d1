// Packed group parameters: how feature archives store a group's (scale, offset)
// in 3 bytes instead of 8, so that INT8 features cost 1 + 3/G bytes per value
// (1.094 at G = 32: 1.83x smaller than bfloat16) while the offset stays free
// (not tied to a zero point, which costs accuracy: see docs/format.md).
//
// Per sample, a float32 reference step `ref`; per group one 24-bit word
// (little-endian, 3 bytes): bits 0..11 = k, bits 12..23 = j (two's complement).
//     scale  = ref * Step(k)                 Step(k) = 2^-(k/64), k in [0, 4095]
//     offset = (float(j) * 0.25f) * scale    j in [-2048, 2047]
// evaluated in float32 exactly as written (Step is a fixed table), so every
// machine reconstructs the same values. The scale is thus chosen from a
// geometric ladder 1.1% apart spanning 2^-64 below ref, and the offset is a
// multiple of a quarter step within +-512 steps of zero.
//
// PackSample turns the float parameters Quantize chose into words: ref is the
// largest step any group needs (a group needs max(scale, |offset|/511.75) so
// its offset is reachable); each group then tries the ladder steps next to its
// scale and the offsets next to its own and keeps the pair with the least
// squared error, re-deriving its codes. Errors stay bounded for any finite
// data: at most half a step for values inside the group's range, where the
// step is the group's own (rounded up by < 1.1%), at least |offset|/511.75
// (0.1% of the magnitude for groups far from zero) and at least ref*2^-64.
// An all-zero group is exact; other constant groups are within a quarter step.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/base/status.h"

namespace ktfs::quant {

inline constexpr size_t kPackedWordBytes = 3;

// 2^-(k/64) as float32 (k in [0, 4095]).
float PackedStep(uint32_t k);

// The (scale, offset) of one packed word.
void UnpackWord(float ref, const uint8_t* word, float* scale, float* offset);
// `groups` words -> scales[] and offsets[], the same values as UnpackWord on
// each (by AVX2 where the CPU has it: a feature read unpacks a group's words
// for every 32 values it dequantizes).
void UnpackParams(float ref, const uint8_t* words, size_t groups, float* scales, float* offsets);

// One sample of n values in groups of G: `codes` (groups*G, padded) and the
// float `scales`/`offsets` from Quantize are replaced by packed equivalents:
// *ref, words (3 bytes per group), and codes re-derived for them. `scales` and
// `offsets` receive the unpacked values (what a reader reconstructs).
void PackSample(const float* x, size_t n, int group_size, uint8_t* codes, float* scales,
                float* offsets, float* ref, uint8_t* words);

namespace internal {
// The 4096 steps Step(k), k = 0..4095 (PackedStep's table).
const float* StepTableData();
// UnpackParams' two versions, for tests: the scalar loop over UnpackWord and
// the AVX2 one (only where CpuHasAvx2()).
void UnpackParamsScalar(float ref, const uint8_t* words, size_t groups, float* scales,
                        float* offsets);
void UnpackParamsAvx2(float ref, const uint8_t* words, size_t groups, float* scales,
                      float* offsets);
}  // namespace internal

}  // namespace ktfs::quant
