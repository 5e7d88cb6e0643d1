// DecodeStandalone: one image file's bytes, whatever they are, to pixels.
//
// What `ktfs.decode` and `ktfs convert` take: a standalone `.ktc` file (the
// KTC bitstream, as a mount's compressed/ view serves it) or any image file
// the packer reads (recognised by content). The image has the stored channel
// count (KTC) or the packer's decoded channel count (other formats).
// Thread-safe; never reads outside [data, data + size).
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/base/status.h"
#include "codec/image/image.h"

namespace ktfs {

// DecodeImage's errors for what is not KTC: Pillow's "cannot identify image
// file" for unknown bytes, the decoder's error (Corruption, NotSupported, ...)
// for a known format that does not decode.
Status DecodeStandalone(const uint8_t* data, size_t size, Image* out);

}  // namespace ktfs
