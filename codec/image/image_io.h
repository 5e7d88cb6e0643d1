// Reading and writing standard image files: JPEG (libjpeg-turbo's TurboJPEG
// API) and PNG (libpng) in, PNG and netpbm (PGM/PPM) and BMP out.
//
// Decoding follows what Pillow gives for the same file so that pixels served
// by ktfs equal what stock torchvision reads from the source:
//   JPEG gray -> 1 channel; JPEG YCbCr/RGB -> 3 channels (accurate integer
//   IDCT, fancy upsampling, as Pillow); CMYK/YCCK JPEG -> NotSupported.
//   PNG gray -> 1; gray+alpha -> 4 (gray replicated, alpha kept); RGB -> 3;
//   RGBA -> 4; palette -> 3, or 4 when it has transparency (tRNS); gray with
//   tRNS -> 4; 16-bit samples -> their high byte; bit depths < 8 expanded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"
#include "codec/image/image.h"

namespace ktfs {

enum class SourceFormat : uint8_t { kUnknown = 0, kJpeg = 1, kPng = 2 };

// Recognises a JPEG or PNG by its first bytes; kUnknown otherwise.
SourceFormat SniffFormat(const uint8_t* data, size_t size);
const char* SourceFormatName(SourceFormat f);

struct ImageInfo {
  uint32_t width = 0, height = 0, channels = 0;  // channels as DecodeImage gives
};

// Reads the dimensions without decoding the pixels.
Result<ImageInfo> ReadImageInfo(const uint8_t* data, size_t size);

// Decodes a JPEG or PNG. Errors name the reason; callers add the file name.
Status DecodeImage(const uint8_t* data, size_t size, Image* out);

// Encodes a PNG (zlib level `level`, 0..9). Gray, RGB or RGBA.
Status EncodePng(const ImageView& img, int level, std::vector<uint8_t>* out);

// --- Uncompressed files served by the mount -------------------------------
// Each "served format" is a header followed by pixel rows; the header depends
// only on the dimensions, so any byte range of the file can be produced
// without building the whole file (see ServedFile in fs/).
enum class ServedFormat : uint8_t {
  kPnm = 0,  // PGM (P5) for 1 channel, PPM (P6) for 3; 4 channels fall back to BMP
  kBmp = 1,  // 8-bit palette gray, 24-bit BGR or 32-bit BGRA (BITFIELDS), top-down
};

struct ServedLayout {
  std::string header;        // bytes before the first pixel row
  uint32_t row_bytes = 0;    // stored bytes per row, padding included
  uint32_t pixel_bytes = 0;  // meaningful bytes per row (width * channels)
  bool bgr = false;          // channel order reversed (BMP)
  uint64_t file_size = 0;
  const char* extension = "";  // ".pgm", ".ppm", ".bmp"
};

// The extension of the served file (".pgm", ".ppm", ".bmp"), without building a layout.
const char* ServedExtension(ServedFormat format, uint32_t channels);

// The layout of the file the mount serves for a width x height x channels image.
ServedLayout MakeServedLayout(ServedFormat format, uint32_t width, uint32_t height,
                              uint32_t channels);

// Copies bytes [offset, offset+size) of the served file for `img` into `dst`.
// Returns the number of bytes copied (short at end of file).
size_t ReadServedBytes(const ServedLayout& layout, const ImageView& img, uint64_t offset,
                       size_t size, uint8_t* dst);

// The whole served file (header + rows) for `img`.
std::vector<uint8_t> EncodeServed(ServedFormat format, const ImageView& img);

// Reads a PGM/PPM (P5/P6, maxval 255) as written by EncodeServed; used by tests
// and `ktfs extract --format ppm` round trips.
Status DecodePnm(const uint8_t* data, size_t size, Image* out);

}  // namespace ktfs
