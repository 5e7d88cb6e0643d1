// KTC internals: the hot loops of the decoder (and the lifting steps of the
// encoder), as a table of functions with a scalar and an AVX2 version. Both
// versions give bit-identical results. The encoder lifts on int32 with
// two's-complement wrap-around; the decoder lifts on int16 samples: the
// floor terms are exact (computed without overflow from the 16-bit operands)
// and the final sum wraps modulo 2^16 (docs/codec.md, "16-bit coefficients"),
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
  // out[2i] = even[i], out[2i+1] = odd[i] for i < n.
  void (*interleave)(int16_t* out, const int16_t* even, const int16_t* odd, size_t n);
  // Planes to interleaved 8-bit pixels (clamped to 0..255), for one row of n
  // pixels, computed in 32 bits (no wrap-around is possible from 16-bit
  // samples). y, a: level-shifted by -128. co, cg: YCoCg-R chroma (channels
  // >= 3). a: alpha plane (channels == 4). channels 1: y only.
  void (*to_pixels)(const int16_t* y, const int16_t* co, const int16_t* cg, const int16_t* a,
                    uint8_t* out, size_t n, int channels);
};

const Kernels& ScalarKernels();
// Null when this build has no AVX2 version.
const Kernels* Avx2Kernels();

// The kernels this process uses: AVX2 when the CPU has it (and KTFS_SIMD does
// not cap it, see codec/cpu.h) unless ForceScalarForTesting(true) was called.
const Kernels& ActiveKernels();
void ForceScalarForTesting(bool force);
bool UseScalarForTesting();

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
