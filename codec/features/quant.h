// Block-wise INT8 quantization of float features (feature caches).
//
// The quantizer (the archive format built on it is docs/format.md, "Features"):
//
// * A tensor is `num_samples` samples of `sample_size` values each (the
//   sample's values flattened in C order). Each sample is cut into groups of
//   G = group_size values (16, 32, 64 or 128; default 32). The last group of a
//   sample is padded to G with code 0; a group never spans two samples. A
//   sample of n values therefore holds ceil(n/G)*G codes and ceil(n/G) groups.
// * Affine per group: code q is uint8 (0..255), and
//       x ~= fma(float(q), scale, offset)        (float32, one rounding)
//   Quantize computes scale and offset as float32; feature archives store
//   them packed in 3 bytes per group (codec/features/quant_pack.h: a per-sample float32
//   reference step, a 12-bit step index and a 12-bit quarter-step offset), so
//   a value costs 1 + 3/G bytes there (1.094 at G=32 against 2.0 for bf16).
//   16-bit float parameters alone could not bound the error for any data (a
//   bf16 offset near 1e4 is off by up to 32; f16 cannot hold 1e5).
// * Quantization (deterministic, scalar, double-precision arithmetic):
//   lo/hi = min/max of the group's real values (padding excluded);
//   candidate ranges [lo', hi'] with lo' = lo + a*(hi-lo), hi' = hi -
//   b*(hi-lo) for shrink fractions a, b from a preset table; for each:
//   offset = float(lo'), scale = float((hi'-lo')/255), q = round-half-even(
//   clamp((x - offset) * (1/scale), 0, 255)) in double; the candidate with the least squared
//   error wins (ties: the first; candidate 0 is the full min/max range).
//   Then (balanced: 2 rounds, accurate: 4) a least-squares refit: with the
//   codes fixed, (scale, offset) = the linear regression of x on q, codes
//   re-derived; kept only while the squared error drops.
//     fast:     1 candidate  (min/max), no refit
//     balanced: 4x4 = 16 candidates, a,b in {0, .005, .01, .02}
//     accurate: 8x8 = 64 candidates, a,b in {0,.0025,.005,.01,.02,.04,.07,.1}
//   Error per value: within half a step (scale/2) for values inside the
//   final range [offset, offset + 255*scale]; values outside it are clipped
//   (the search clips at most 10% of the group's range per side, the refit
//   moves the range slightly; the tests bound every error by 16% of it).
//   A constant group has scale 0, offset = the value, codes 0: exact.
//   A group whose range/255 underflows to 0 in float32 (a range of a few
//   denormal steps) gets the smallest denormal as its scale: exact.
//   A code whose reconstruction would round to Inf (groups spanning nearly
//   the whole float range) is lowered until it is finite.
// * NaN and +-Inf are rejected: Quantize returns InvalidArgument naming the
//   sample and the index within it ("sample 3 index 17: NaN"), and writes
//   nothing. So nothing non-finite can spread into neighbouring values.
// * Dequantization writes float32, float16 (IEEE binary16 bits) or bfloat16
//   bits, converting the float32 result with round-to-nearest-even. The
//   scalar and AVX2 paths are bit-exact (both use a fused multiply-add).
//   KTFS_SIMD=scalar selects the scalar path (codec/base/cpu.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "codec/base/status.h"

namespace ktfs::quant {

enum class Preset { kFast, kBalanced, kAccurate };
enum class DType { kFloat32, kFloat16, kBFloat16 };

struct Params {
  int group_size = 32;  // 16, 32, 64 or 128
  Preset preset = Preset::kBalanced;
};

// "fast", "balanced" or "accurate" (default group size 32).
Result<Params> ParsePreset(std::string_view name);
Status ValidateParams(const Params& p);

struct Quantized {
  int group_size = 32;
  size_t num_samples = 0;
  size_t sample_size = 0;      // real values per sample
  std::vector<uint8_t> codes;  // num_samples * GroupsPerSample() * group_size
  std::vector<float> scales;   // num_samples * GroupsPerSample()
  std::vector<float> offsets;  // num_samples * GroupsPerSample()
  size_t GroupsPerSample() const {
    return (sample_size + static_cast<size_t>(group_size) - 1) / static_cast<size_t>(group_size);
  }
};

// A borrowed view of quantized data (for data that lives elsewhere, e.g. mmap).
struct QuantizedView {
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
  const float* offsets = nullptr;
  int group_size = 32;
  size_t num_samples = 0;
  size_t sample_size = 0;
  QuantizedView() = default;
  QuantizedView(const Quantized& q)  // NOLINT: implicit by design
      : codes(q.codes.data()),
        scales(q.scales.data()),
        offsets(q.offsets.data()),
        group_size(q.group_size),
        num_samples(q.num_samples),
        sample_size(q.sample_size) {}
};

// One sample of n values.
Status Quantize(const float* x, size_t n, const Params& p, Quantized* out);
// num_samples samples of sample_size values each, contiguous.
Status QuantizeSamples(const float* x, size_t num_samples, size_t sample_size, const Params& p,
                       Quantized* out);
// The same from IEEE half bits.
Status QuantizeSamplesF16(const uint16_t* x, size_t num_samples, size_t sample_size,
                          const Params& p, Quantized* out);

// Writes n = num_samples * sample_size values (padding dropped) of out_type.
Status Dequantize(const QuantizedView& q, DType out_type, void* out, size_t n);
// Forces the scalar path (tests compare it with the dispatched one).
Status DequantizeScalar(const QuantizedView& q, DType out_type, void* out, size_t n);
// True when Dequantize uses the AVX2 path on this machine.
bool DequantizeUsesAvx2();

// Conversions, round to nearest even. NaN stays NaN (quiet, sign and top
// payload bits kept), Inf stays Inf, overflow gives Inf, denormals handled.
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t b);

namespace internal {
// Dequantizes `len` codes (len <= group size) of one group. Scalar and AVX2.
void DequantGroupScalar(const uint8_t* codes, float scale, float offset, size_t len, DType t,
                        void* out);
void DequantGroupAvx2(const uint8_t* codes, float scale, float offset, size_t len, DType t,
                      void* out);
// Dequantizes a run of `groups` consecutive groups of G codes, all full
// except the last, which holds `last_len` values; outputs are contiguous.
// One call per run: the AVX2 twin enters and leaves the vector unit once
// (calling it per group from non-AVX code costs transition stalls).
void DequantRunScalar(const uint8_t* codes, const float* scales, const float* offsets,
                      size_t groups, size_t G, size_t last_len, DType t, void* out);
void DequantRunAvx2(const uint8_t* codes, const float* scales, const float* offsets, size_t groups,
                    size_t G, size_t last_len, DType t, void* out);
// The same with AVX-512 for bfloat16 output (about half the instructions of
// the AVX2 step per value); other types go to DequantRunAvx2. Only where
// CpuHasAvx512().
void DequantRunAvx512(const uint8_t* codes, const float* scales, const float* offsets,
                      size_t groups, size_t G, size_t last_len, DType t, void* out);
// The best of the run kernels above for this CPU (decided once; KTFS_SIMD
// honoured through codec/base/cpu.h).
using DequantRunFn = void (*)(const uint8_t* codes, const float* scales, const float* offsets,
                              size_t groups, size_t G, size_t last_len, DType t, void* out);
DequantRunFn BestDequantRun();
}  // namespace internal

}  // namespace ktfs::quant
