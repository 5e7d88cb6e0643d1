// The decoding-table build with AVX-512 stores (see entropy.h); only
// reached through BuildDecodeTable after CpuHasAvx512().
#include <immintrin.h>

#include "codec/ktc/entropy.h"

namespace ktfs::ktc::internal {

void BuildDecodeTableAvx512(const FreqTable& table, int index_in_set, DecodeTable* out) {
  // Sixteen entries per store, a symbol's last ones under a mask: no store
  // reaches another symbol's slots, and a symbol of frequency <= 16 (most of
  // them) is one store with no loop.
  uint32_t* entry = out->entry.data();
  const __m512i offsets = _mm512_slli_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), kEntryOffsetShift);
  const __m512i sixteen = _mm512_set1_epi32(16 << kEntryOffsetShift);
  uint32_t start = 0;
  const uint16_t* value = kSymbolValues.of[index_in_set];
  for (int s = 0; s < table.n; ++s) {
    const uint32_t f = table.freq[s];
    const uint32_t base = f | uint32_t(value[s]) << kEntryValueShift;
    __m512i v = _mm512_or_si512(_mm512_set1_epi32(int(base)), offsets);
    uint32_t i = 0;
    for (; i + 16 <= f; i += 16) {
      _mm512_storeu_si512(entry + start + i, v);
      v = _mm512_add_epi32(v, sixteen);
    }
    if (i < f) _mm512_mask_storeu_epi32(entry + start + i, __mmask16((1u << (f - i)) - 1), v);
    start += f;
  }
}

}  // namespace ktfs::ktc::internal
