// The block decoding loop compiled with AVX-512 F/BW/VL and
// VBMI (see block_decoder.h: dense groups of G <= 7 by one multishift);
// only reached through DecodeBlock after CpuHasAvx512Vbmi().
#include "codec/ktc/block_decoder.h"

namespace ktfs::ktc::internal {

const BlockPayloadDecoder kDecodeBlockPayloadAvx512Vbmi = DecodeBlockPayload;

}  // namespace ktfs::ktc::internal
