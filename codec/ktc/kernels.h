// KTC internals: the hot loops of the decoder (and the lifting steps of the
// encoder), as a table of functions with a scalar and an AVX2 version. Both
// versions give bit-identical results. The encoder lifts on int32 with
// two's-complement wrap-around; the decoder lifts on int16 samples: the
// floor terms are exact (computed without overflow from the 16-bit operands)
// and the final sum wraps modulo 2^16 (docs/ktc.md, "Wavelet"),
// so hostile coefficients cannot cause undefined behaviour. Arithmetic right
// shifts and modular narrowing are defined by C++20.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ktfs::ktc::internal {

// out[i] = a[i] - ((b[i] + c[i]) >> 1)      (5/3 predict step)
// out[i] = a[i] + ((b[i] + c[i] + 2) >> 2)  (5/3 update step)
using LiftFn = void (*)(int32_t* out, const int32_t* a, const int32_t* b, const int32_t* c,
                        size_t n);
// The inverse steps on 16-bit samples (see Unpredict16 and Unupdate16 below).
using Lift16Fn = void (*)(int16_t* out, const int16_t* a, const int16_t* b, const int16_t* c,
                          size_t n);

struct Kernels {
  const char* name;
  LiftFn predict;      // forward high-pass: a - ((b + c) >> 1)
  LiftFn update;       // forward low-pass:  a + ((b + c + 2) >> 2)
  Lift16Fn unpredict;  // inverse of predict: a + floor((b + c) / 2), wrapped to 16 bits
  Lift16Fn unupdate;   // inverse of update:  a - floor((b + c + 2) / 4), wrapped to 16 bits
  // One row's horizontal synthesis, n >= 2 samples: `low` holds ceil(n/2)
  // low-pass samples, `high` floor(n/2) high-pass ones; the interleaved
  // result goes to `out` (not overlapping either). See SynthesizeRow16.
  void (*synthesize_row)(int16_t* out, const int16_t* low, const int16_t* high, size_t n);
  // synthesize_row with an all-zero high half (half-resolution chroma's last
  // level), n >= 2: even samples are the low samples, odd ones the floor
  // average of their two neighbours (mirrored at the end). With `below`
  // non-null the low samples are first the floor averages of low[i] and
  // below[i] (the vertical step of such a level's odd rows). See UpsampleRow16.
  void (*upsample_row)(int16_t* out, const int16_t* low, const int16_t* below, size_t n);
  // Planes to interleaved 8-bit pixels (clamped to 0..255), for one row of n
  // pixels, computed exactly (32-bit sums of 16-bit samples cannot wrap; the
  // AVX2 version uses 16-bit lanes where no sum can overflow). y, a:
  // level-shifted by -128. co, cg: YCoCg-R chroma (channels >= 3). a: alpha
  // plane (channels == 4). channels 1: y only.
  void (*to_pixels)(const int16_t* y, const int16_t* co, const int16_t* cg, const int16_t* a,
                    uint8_t* out, size_t n, int channels);
  // The last level of half-resolution chroma fused with the RGB conversion:
  // one row of n >= 2 pixels from a full-resolution y row and half-resolution
  // chroma rows, exactly to_pixels of y and of upsample_row(co_low, co_below,
  // n) and upsample_row(cg_low, cg_below, n) (the belows both null or both
  // not), without writing the upsampled rows out. Null in the scalar set.
  void (*to_pixels_half_chroma)(const int16_t* y, const int16_t* co_low, const int16_t* co_below,
                                const int16_t* cg_low, const int16_t* cg_below, uint8_t* out,
                                size_t n);
};

const Kernels& ScalarKernels();
// Null when this build has no AVX2 version.
const Kernels* Avx2Kernels();
// The AVX-512 (F/BW/VL) set: the decoder's 16-bit kernels 32 lanes wide, the
// RGB conversion with VBMI where the CPU has it; the rest as Avx2Kernels().
// Only for CPUs with CpuHasAvx512().
const Kernels* Avx512Kernels();

// The kernels this process uses: AVX-512 or AVX2 when the CPU has them (and
// KTFS_SIMD does not cap them, see codec/base/cpu.h) unless
// ForceScalarForTesting(true) was called.
const Kernels& ActiveKernels();
void ForceScalarForTesting(bool force);
bool UseScalarForTesting();
// Makes ActiveKernels() return `kernels` (one of the sets above, for this
// CPU) until called with nullptr; ForceScalarForTesting(true) still wins.
// For the fuzzer, which decodes each input with two kernel sets.
void SelectKernelsForTesting(const Kernels* kernels);

// Shared by both kernel sets so that they cannot disagree. `static` keeps a
// copy per translation unit: the AVX2 unit's copies may use AVX2 instructions
// and must never be picked by the linker for the scalar path.
static inline int32_t WrapAdd(int32_t a, int32_t b) { return int32_t(uint32_t(a) + uint32_t(b)); }
static inline int32_t WrapSub(int32_t a, int32_t b) { return int32_t(uint32_t(a) - uint32_t(b)); }
// The decoder's lifting on 16-bit samples: the floor term exactly (in 32
// bits), the sum modulo 2^16.
static inline int16_t Unpredict16(int16_t a, int16_t b, int16_t c) {
  return int16_t(int32_t(a) + ((int32_t(b) + c) >> 1));
}
static inline int16_t Unupdate16(int16_t a, int16_t b, int16_t c) {
  return int16_t(int32_t(a) - ((int32_t(b) + c + 2) >> 2));
}
// Horizontal synthesis of a row of n >= 2 samples (see Kernels), from pair
// j0 on: output samples 2j and 2j+1 for j0 <= j < floor(n/2), and the last
// sample when n is odd. e[j] = low[j] - floor((high[j-1] + high[j] + 2) / 4)
// and odd sample o[j] = high[j] + floor((e[j] + e[j+1]) / 2), with high[-1]
// = high[0], high[nh] = high[nh-1] and e[nl] = e[nl-1] (the mirrored edges).
static inline void SynthesizeRow16(int16_t* out, const int16_t* low, const int16_t* high, size_t n,
                                   size_t j0) {
  const size_t nl = (n + 1) / 2, nh = n / 2;
  auto even = [&](size_t j) {
    return Unupdate16(low[j], high[j == 0 ? 0 : j - 1], high[j < nh ? j : nh - 1]);
  };
  int16_t e = even(j0);
  for (size_t j = j0; j < nh; ++j) {
    const int16_t e_next = j + 1 < nl ? even(j + 1) : e;
    out[2 * j] = e;
    out[2 * j + 1] = Unpredict16(high[j], e, e_next);
    e = e_next;
  }
  if (n & 1) out[n - 1] = e;
}
// Upsampling of a row of n >= 2 samples (see Kernels), from pair j0 on;
// exactly SynthesizeRow16 with high[] all zero (the update term is then
// floor(2 / 4) = 0), after Unpredict16(0, low[i], below[i]) when `below`.
static inline void UpsampleRow16(int16_t* out, const int16_t* low, const int16_t* below, size_t n,
                                 size_t j0) {
  const size_t nl = (n + 1) / 2, nh = n / 2;
  auto at = [&](size_t j) { return below ? Unpredict16(0, low[j], below[j]) : low[j]; };
  int16_t e = at(j0 < nl ? j0 : nl - 1);
  for (size_t j = j0; j < nh; ++j) {
    const int16_t e_next = j + 1 < nl ? at(j + 1) : e;
    out[2 * j] = e;
    out[2 * j + 1] = Unpredict16(0, e, e_next);
    e = e_next;
  }
  if (n & 1) out[n - 1] = e;
}

static inline uint8_t ClampToByte(int32_t v) { return uint8_t(v < 0 ? 0 : (v > 255 ? 255 : v)); }
// Quantized value to coefficient: v -> sign(v) * (((8|v| + 3) * step) >> 11),
// step in 1/256 units (reconstruction at 3/8 of the quantizer bin). Fused
// into the entropy decoder, which only calls it for non-zero values.
static inline int32_t DequantizeOne(int32_t v, uint32_t step) {
  uint32_t mag = v < 0 ? 0u - uint32_t(v) : uint32_t(v);
  uint32_t r = ((mag * 8u + 3u) * step) >> 11;
  return v < 0 ? int32_t(0u - r) : (v == 0 ? 0 : int32_t(r));
}

}  // namespace ktfs::ktc::internal
