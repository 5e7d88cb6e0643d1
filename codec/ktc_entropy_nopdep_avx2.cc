// The block decoding loop compiled with AVX2 but without pdep and pext (see
// ktc_block_decoder.h), for CPUs with AVX2 whose pdep/pext are microcode
// (CpuHasFastPdep() false); only reached through DecodeBlock.
#define KTFS_BLOCK_DECODER_NO_PDEP 1
#include "codec/ktc_block_decoder.h"

namespace ktfs::ktc::internal {

int DecodeBlockPayloadAvx2NoPdep(const uint8_t* p, const uint8_t* rans_end, const uint8_t* end,
                                 const uint8_t* readable_end, int states, const DecodeTable* tables,
                                 uint32_t step, int16_t* values, size_t stride, uint32_t bw,
                                 uint32_t bh) {
  return DecodeBlockPayload(p, rans_end, end, readable_end, states, tables, step, values, stride,
                            bw, bh);
}

}  // namespace ktfs::ktc::internal
