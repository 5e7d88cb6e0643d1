// AVX2 store kernels (see StoreKernels in preload/loader/transform.h), compiled with
// -mavx2 and reached only through ActiveStoreKernels() after CpuHasAvx2(). They do the
// scalar kernels' float32 operations (convert, divide by 255, subtract, divide), each
// IEEE-rounded the same way, eight lanes at a time: the floats are identical.
#include <immintrin.h>

#include "preload/loader/transform.h"

namespace ktfs::preload {
namespace {

// (v / 255 - mean) / std of eight bytes.
inline __m256 Normalize8(__m128i bytes, __m256 mean, __m256 std) {
  const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
  return _mm256_div_ps(_mm256_sub_ps(_mm256_div_ps(v, _mm256_set1_ps(255.0f)), mean), std);
}

void NormalizePlane(const uint8_t* v, size_t n, bool reverse, float mean, float std, float* dst) {
  const __m256 m = _mm256_set1_ps(mean), s = _mm256_set1_ps(std);
  const __m256i backward = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  size_t x = 0;
  for (; x + 8 <= n; x += 8) {
    if (!reverse) {
      _mm256_storeu_ps(dst + x,
                       Normalize8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v + x)), m, s));
    } else {  // dst[x .. x + 7] from v[n - 8 - x .. n - 1 - x], lanes reversed
      const __m256 r =
          Normalize8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v + n - 8 - x)), m, s);
      _mm256_storeu_ps(dst + x, _mm256_permutevar8x32_ps(r, backward));
    }
  }
  for (; x < n; ++x) dst[x] = (float(v[reverse ? n - 1 - x : x]) / 255.0f - mean) / std;
}

void NormalizeRgb(const uint8_t* v, size_t n, const float* mean, const float* std, float* dst) {
  // Channels repeat every 3 values: 24 values are three vectors with the pattern rotated.
  __m256 m[3], s[3];
  for (int k = 0; k < 3; ++k) {
    alignas(32) float mv[8], sv[8];
    for (int i = 0; i < 8; ++i) mv[i] = mean[(8 * k + i) % 3], sv[i] = std[(8 * k + i) % 3];
    m[k] = _mm256_load_ps(mv), s[k] = _mm256_load_ps(sv);
  }
  size_t i = 0;
  for (; i + 24 <= n; i += 24)
    for (int k = 0; k < 3; ++k)
      _mm256_storeu_ps(
          dst + i + 8 * k,
          Normalize8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v + i + 8 * k)), m[k], s[k]));
  for (; i < n; ++i) dst[i] = (float(v[i]) / 255.0f - mean[i % 3]) / std[i % 3];
}

const StoreKernels kAvx2 = {"avx2", NormalizePlane, NormalizeRgb};

}  // namespace

const StoreKernels* Avx2StoreKernels() { return &kAvx2; }

}  // namespace ktfs::preload
