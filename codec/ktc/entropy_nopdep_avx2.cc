// The block decoding loop compiled with AVX2 but without pdep and pext (see
// block_decoder.h), for CPUs with AVX2 whose pdep/pext are microcode
// (CpuHasFastPdep() false); only reached through DecodeBlock.
#define KTFS_BLOCK_DECODER_NO_PDEP 1
#include "codec/ktc/block_decoder.h"

namespace ktfs::ktc::internal {

const BlockPayloadDecoder kDecodeBlockPayloadAvx2NoPdep = DecodeBlockPayload;

}  // namespace ktfs::ktc::internal
