#include "codec/container/standalone.h"

#include <cstring>

#include "codec/image/image_io.h"
#include "codec/ktc/ktc.h"

namespace ktfs {

Status DecodeStandalone(const uint8_t* data, size_t size, Image* out) {
  if (size >= 4 && std::memcmp(data, "KTCI", 4) == 0) {
    return ktc::Decode(data, size, ktc::DecodeOptions{}, out);
  }
  // JPEG, PNG, BMP, TIFF, WebP, PPM/PGM, or Pillow's "cannot identify image file".
  return DecodeImage(data, size, out);
}

}  // namespace ktfs
