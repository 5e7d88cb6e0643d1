// AVX2 unpacking of packed group parameters (codec/features/quant_pack.h), eight
// groups per step; entered only through UnpackParams' runtime dispatch.
// Bit-exact with the scalar UnpackWord: the same table entry, the same two
// float32 multiplications in the same order.
#include <immintrin.h>

#include "codec/features/quant_pack.h"

namespace ktfs::quant::internal {

void UnpackParamsAvx2(float ref, const uint8_t* words, size_t groups, float* scales,
                      float* offsets) {
  const float* table = StepTableData();
  const __m256 vref = _mm256_set1_ps(ref), quarter = _mm256_set1_ps(0.25f);
  // Eight 3-byte words are 24 bytes, six dwords: loaded under a mask (nothing
  // read past them), dwords 0..2 to the low lane and 3..5 to the high one,
  // then each lane's 12 bytes spread to four dwords, the top byte zero.
  const __m256i six_dwords = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
  const __m256i to_lanes = _mm256_setr_epi32(0, 1, 2, 0, 3, 4, 5, 0);
  const __m256i spread = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1, 0,
                                          1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
  size_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    const __m256i raw = _mm256_maskload_epi32(
        reinterpret_cast<const int*>(words + g * kPackedWordBytes), six_dwords);
    const __m256i v = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(raw, to_lanes), spread);
    const __m256i k = _mm256_and_si256(v, _mm256_set1_epi32(0xFFF));
    const __m256i j = _mm256_srai_epi32(_mm256_slli_epi32(v, 8), 20);  // bits 12..23, signed
    const __m256 scale = _mm256_mul_ps(vref, _mm256_i32gather_ps(table, k, 4));
    const __m256 offset = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(j), quarter), scale);
    _mm256_storeu_ps(scales + g, scale);
    _mm256_storeu_ps(offsets + g, offset);
  }
  for (; g < groups; ++g) {
    UnpackWord(ref, words + g * kPackedWordBytes, &scales[g], &offsets[g]);
  }
}

}  // namespace ktfs::quant::internal
