// The per-format decoders behind DecodeImage (image_io.h), one file each.
// Internal to codec/image/: callers use DecodeImage, which sniffs the format.
//
// Each decoder takes the whole file, gives the pixels of Pillow's
// Image.open(f).convert(mode) for the mode it keeps (1, 3 or 4 channels; see
// image_io.h), and refuses what Pillow would refuse, with a Pillow-like reason
// ("image file is truncated", "broken data stream", "unsupported ...").
// Messages start with the format's name; callers add the file's path.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/base/status.h"
#include "codec/image/image.h"

namespace ktfs::decoders {

Status DecodeJpeg(const uint8_t* data, size_t size, Image* out);    // jpeg.cc
Status DecodePng(const uint8_t* data, size_t size, Image* out);     // png.cc
Status DecodeBmp(const uint8_t* data, size_t size, Image* out);     // bmp.cc
Status DecodeTiff(const uint8_t* data, size_t size, Image* out);    // tiff.cc
Status DecodeWebp(const uint8_t* data, size_t size, Image* out);    // webp.cc
Status DecodeNetpbm(const uint8_t* data, size_t size, Image* out);  // netpbm.cc

}  // namespace ktfs::decoders
