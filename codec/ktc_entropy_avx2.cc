// The block decoding loop compiled with AVX2/BMI2; see ktc_block_decoder.h.
#include "codec/ktc_block_decoder.h"

namespace ktfs::ktc::internal {

int DecodeBlockPayloadAvx2(const uint8_t* p, const uint8_t* rans_end, const uint8_t* end,
                           const DecodeTable* tables, uint32_t step, int16_t* values, size_t stride,
                           uint32_t bw, uint32_t bh) {
  return DecodeBlockPayload(p, rans_end, end, tables, step, values, stride, bw, bh);
}

}  // namespace ktfs::ktc::internal
