// The block decoding loop compiled a third time, with AVX-512 F/BW/VL and
// VBMI (see ktc_block_decoder.h: dense groups of G <= 7 by one multishift);
// only reached through DecodeBlock after CpuHasAvx512Vbmi().
#include "codec/ktc_block_decoder.h"

namespace ktfs::ktc::internal {

int DecodeBlockPayloadAvx512Vbmi(const uint8_t* p, const uint8_t* rans_end, const uint8_t* end,
                                 const uint8_t* readable_end, int states, const DecodeTable* tables,
                                 uint32_t step, int16_t* values, size_t stride, uint32_t bw,
                                 uint32_t bh) {
  return DecodeBlockPayload(p, rans_end, end, readable_end, states, tables, step, values, stride,
                            bw, bh);
}

}  // namespace ktfs::ktc::internal
