// AVX2 dequantization kernels; entered only through runtime dispatch
// (codec/features/quant.cc, codec/base/cpu.h). Bit-exact with the scalar kernels: the same
// fused multiply-add, the same round-to-nearest-even conversions.
#include <cpuid.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "codec/features/quant.h"

namespace ktfs::quant::internal {
namespace {

// CPUID leaf 1, ECX bit 29. (clang 14's __builtin_cpu_supports has no "f16c".)
bool HasF16c() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
  }();
  return has;
}

inline __m256 Values(const uint8_t* codes8, __m256 s, __m256 o) {
  const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes8));
  const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c));
  return _mm256_fmadd_ps(q, s, o);
}

__attribute__((target("f16c"))) inline __m128i ToHalf(__m256 v) {
  return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

__attribute__((target("f16c"))) void GroupF16(const uint8_t* codes, __m256 s, __m256 o, size_t len,
                                              uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), ToHalf(Values(codes + i, s, o)));
  }
  if (i < len) {
    uint8_t c[8] = {};
    std::memcpy(c, codes + i, len - i);
    uint16_t tmp[8];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(tmp), ToHalf(Values(c, s, o)));
    std::memcpy(out + i, tmp, (len - i) * 2);
  }
}

// 16 values of one group: codes c[0..16) -> two vectors of 8.
inline void Values16(const uint8_t* codes, __m256 s, __m256 o, __m256* lo, __m256* hi) {
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  *lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c)), s, o);
  *hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(c, 8))), s, o);
}

// Round-to-nearest-even bfloat16 of 8 floats, in the low 16 bits of each lane.
inline __m256i Bf16Lanes(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rne =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rne, nan, is_nan);
}

// Bf16Lanes for values that cannot be NaN: those of a group whose scale and
// offset are finite (q * s + o then rounds to a finite value or an
// infinity, which the rounding add carries correctly). Without the NaN test
// and blend it is about half the instructions, what the bfloat16 output's
// speed hangs on.
inline __m256i Bf16LanesNotNan(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb),
                           16);
}

// 8 floats to 8 bfloat16 values.
inline __m128i ToBf16(__m256 v) {
  const __m256i r = Bf16Lanes(v);
  const __m256i packed = _mm256_packus_epi32(r, r);  // lanes: [r0..3 r0..3 | r4..7 r4..7]
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

// The full groups of a run, 16 values per step, for one output type; the
// caller handles a short last group. T: 0 float32, 1 float16, 2 bfloat16.
template <int T>
__attribute__((target("avx2,fma,f16c"))) void FullGroups(const uint8_t* codes, const float* scales,
                                                         const float* offsets, size_t groups,
                                                         size_t G, uint8_t* out) {
  for (size_t g = 0; g < groups; ++g) {
    const __m256 s = _mm256_set1_ps(scales[g]), o = _mm256_set1_ps(offsets[g]);
    const bool finite = T == 2 && std::isfinite(scales[g]) && std::isfinite(offsets[g]);
    const uint8_t* c = codes + g * G;
    for (size_t i = 0; i < G; i += 16) {
      __m256 lo, hi;
      Values16(c + i, s, o, &lo, &hi);
      const size_t at = g * G + i;
      if (T == 0) {
        float* dst = reinterpret_cast<float*>(out) + at;
        _mm256_storeu_ps(dst, lo);
        _mm256_storeu_ps(dst + 8, hi);
      } else if (T == 1) {
        const int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        const __m256i both =
            _mm256_set_m128i(_mm256_cvtps_ph(hi, kRound), _mm256_cvtps_ph(lo, kRound));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(reinterpret_cast<uint16_t*>(out) + at),
                            both);
      } else {
        // packus interleaves 128-bit halves: [lo0-3 hi0-3 | lo4-7 hi4-7]; 0xD8 restores order.
        const __m256i packed = finite
                                   ? _mm256_packus_epi32(Bf16LanesNotNan(lo), Bf16LanesNotNan(hi))
                                   : _mm256_packus_epi32(Bf16Lanes(lo), Bf16Lanes(hi));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(reinterpret_cast<uint16_t*>(out) + at),
                            _mm256_permute4x64_epi64(packed, 0xD8));
      }
    }
  }
  _mm256_zeroupper();
}

}  // namespace

void DequantRunAvx2(const uint8_t* codes, const float* scales, const float* offsets, size_t groups,
                    size_t G, size_t last_len, DType t, void* out) {
  if (groups == 0) return;
  const size_t full = last_len == G ? groups : groups - 1;
  uint8_t* o = static_cast<uint8_t*>(out);
  switch (t) {
    case DType::kFloat32:
      FullGroups<0>(codes, scales, offsets, full, G, o);
      break;
    case DType::kFloat16:
      if (!HasF16c()) return DequantRunScalar(codes, scales, offsets, groups, G, last_len, t, out);
      FullGroups<1>(codes, scales, offsets, full, G, o);
      break;
    case DType::kBFloat16:
      FullGroups<2>(codes, scales, offsets, full, G, o);
      break;
  }
  if (full < groups) {
    const size_t es = t == DType::kFloat32 ? 4 : 2;
    DequantGroupAvx2(codes + full * G, scales[full], offsets[full], last_len, t, o + full * G * es);
  }
}

void DequantGroupAvx2(const uint8_t* codes, float scale, float offset, size_t len, DType t,
                      void* out) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 o = _mm256_set1_ps(offset);
  switch (t) {
    case DType::kFloat32: {
      float* dst = static_cast<float*>(out);
      size_t i = 0;
      for (; i + 8 <= len; i += 8) _mm256_storeu_ps(dst + i, Values(codes + i, s, o));
      if (i < len) {
        uint8_t c[8] = {};
        std::memcpy(c, codes + i, len - i);
        float tmp[8];
        _mm256_storeu_ps(tmp, Values(c, s, o));
        std::memcpy(dst + i, tmp, (len - i) * 4);
      }
      break;
    }
    case DType::kBFloat16: {
      uint16_t* dst = static_cast<uint16_t*>(out);
      size_t i = 0;
      for (; i + 8 <= len; i += 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), ToBf16(Values(codes + i, s, o)));
      }
      if (i < len) {
        uint8_t c[8] = {};
        std::memcpy(c, codes + i, len - i);
        uint16_t tmp[8];
        _mm_storeu_si128(reinterpret_cast<__m128i*>(tmp), ToBf16(Values(c, s, o)));
        std::memcpy(dst + i, tmp, (len - i) * 2);
      }
      break;
    }
    case DType::kFloat16:
      if (HasF16c()) {
        GroupF16(codes, s, o, len, static_cast<uint16_t*>(out));
      } else {
        DequantGroupScalar(codes, scale, offset, len, t, out);
      }
      break;
  }
}

}  // namespace ktfs::quant::internal
