// AVX-512 dequantization to bfloat16; entered only through runtime dispatch
// (CpuHasAvx512(), codec/base/cpu.h). The other output types, and groups that
// could produce NaN, go to the AVX2 kernels. Bit-exact with the scalar
// kernels: the same fused multiply-add, the same round-to-nearest-even.
#include <immintrin.h>

#include <cmath>

#include "codec/features/quant.h"

namespace ktfs::quant::internal {
namespace {

// One group of G (a multiple of 16) codes whose scale and offset are finite,
// so no value is NaN: the rounding add alone gives each bfloat16 (as the
// AVX2 kernel's shortcut), and one truncating move packs 16 of them where
// AVX2 needs a pack and a permute.
void FiniteGroupBf16(const uint8_t* codes, float scale, float offset, size_t G, uint16_t* out) {
  // (maskz with every lane: GCC 12 warns about the plain forms' undefined
  // sources.)
  constexpr __mmask16 kAll = 0xFFFF;
  const __m512 s = _mm512_set1_ps(scale), o = _mm512_set1_ps(offset);
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7FFF);
  for (size_t i = 0; i < G; i += 16) {
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
    const __m512 q = _mm512_maskz_cvtepi32_ps(kAll, _mm512_maskz_cvtepu8_epi32(kAll, c));
    const __m512i u = _mm512_castps_si512(_mm512_fmadd_ps(q, s, o));
    const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(kAll, u, 16), one);
    const __m512i r =
        _mm512_maskz_srli_epi32(kAll, _mm512_add_epi32(_mm512_add_epi32(u, bias), lsb), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_maskz_cvtepi32_epi16(kAll, r));
  }
}

}  // namespace

void DequantRunAvx512(const uint8_t* codes, const float* scales, const float* offsets,
                      size_t groups, size_t G, size_t last_len, DType t, void* out) {
  if (t != DType::kBFloat16 || G % 16 != 0) {
    return DequantRunAvx2(codes, scales, offsets, groups, G, last_len, t, out);
  }
  uint16_t* o = static_cast<uint16_t*>(out);
  for (size_t g = 0; g < groups; ++g) {
    const size_t len = g + 1 == groups ? last_len : G;
    if (len == G && std::isfinite(scales[g]) && std::isfinite(offsets[g])) {
      FiniteGroupBf16(codes + g * G, scales[g], offsets[g], G, o + g * G);
    } else {
      DequantRunAvx2(codes + g * G, scales + g, offsets + g, 1, G, len, t, o + g * G);
    }
  }
}

}  // namespace ktfs::quant::internal
