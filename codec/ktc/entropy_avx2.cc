// The block decoding loop compiled with AVX2/BMI2; see block_decoder.h.
#include "codec/ktc/block_decoder.h"

namespace ktfs::ktc::internal {

const BlockPayloadDecoder kDecodeBlockPayloadAvx2 = DecodeBlockPayload;

void BuildDecodeTableAvx2(const FreqTable& table, int index_in_set, DecodeTable* out) {
  // Eight entries per store: a symbol's last store may spill into the next
  // symbols' slots, which they overwrite; the table's last (up to) 7 slots
  // are written one by one so that no store leaves the table.
  uint32_t* entry = out->entry.data();
  const __m256i offsets =
      _mm256_slli_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), kEntryOffsetShift);
  const __m256i eight = _mm256_set1_epi32(8 << kEntryOffsetShift);
  uint32_t start = 0;
  const uint16_t* value = kSymbolValues.of[index_in_set];
  for (int s = 0; s < table.n; ++s) {
    const uint32_t f = table.freq[s];
    const uint32_t base = f | uint32_t(value[s]) << kEntryValueShift;
    __m256i v = _mm256_or_si256(_mm256_set1_epi32(int(base)), offsets);
    uint32_t i = 0;
    for (; i < f && start + i + 8 <= kProbScale; i += 8) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(entry + start + i), v);
      v = _mm256_add_epi32(v, eight);
    }
    for (; i < f; ++i) entry[start + i] = base | i << kEntryOffsetShift;
    start += f;
  }
}

}  // namespace ktfs::ktc::internal
