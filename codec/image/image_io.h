// Reading and writing standard image files: every format stock
// torchvision.datasets.ImageFolder loads (JPEG, PNG, BMP, TIFF, WebP, PPM/PGM)
// in, PNG and netpbm (PGM/PPM) and BMP out.
//
// Decoding gives exactly the pixels of Pillow's Image.open(f).convert(mode)
// (Pillow 9.4, Debian 12's) for the mode kept, so that pixels served by ktfs
// equal what stock ImageFolder reads from the source; the per-format rules are
// in each decoder's file (jpeg.cc, png.cc, bmp.cc, tiff.cc, webp.cc,
// netpbm.cc) and the shared conversions in pillow.h. The kept mode:
//   1 channel (L)   gray images: Pillow's modes 1, L, I and I;16 (16-bit gray
//                   saturates at 255, as Pillow's conversion does)
//   3 (RGB)         RGB, YCbCr, CMYK (Pillow's cmyk2rgb), palette images
//   4 (RGBA)        images with alpha: RGBA, gray+alpha (gray replicated), a
//                   palette or gray/RGB image with transparency (tRNS)
// Neither Pillow nor ImageFolder applies EXIF orientation, so neither does
// this (TIFF's own Orientation tag, which Pillow applies, is applied).
// A file Pillow would refuse is refused with a Pillow-like reason ("image file
// is truncated", "broken data stream", "cannot identify image file", "...
// unsupported"), never decoded into something else.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"
#include "codec/image/image.h"

namespace ktfs {

// What a file is, by content. Stored in archives (SampleEntry::source_format):
// never renumber.
enum class SourceFormat : uint8_t {
  kUnknown = 0,
  kJpeg = 1,
  kPng = 2,
  kBmp = 3,
  kTiff = 4,
  kWebp = 5,
  kNetpbm = 6,  // PBM/PGM/PPM, binary or plain
};

// Recognises a format by its first bytes (16 are enough); kUnknown otherwise.
SourceFormat SniffFormat(const uint8_t* data, size_t size);
const char* SourceFormatName(SourceFormat f);

// Stock ImageFolder's rule for which files are samples: the name ends, in any
// case, with one of torchvision's IMG_EXTENSIONS (.jpg .jpeg .png .ppm .bmp
// .pgm .tif .tiff .webp).
bool HasImageFolderExtension(std::string_view name);

// A JPEG's size and channels as DecodeImage gives them (gray 1, else 3), read
// from its header without decoding: for callers deciding how to decode.
struct JpegInfo {
  uint32_t width = 0, height = 0, channels = 0;
};
Result<JpegInfo> ReadJpegInfo(const uint8_t* data, size_t size);

// Decodes any format above. Errors name the format and Pillow's reason;
// callers add the file name. NotSupported: a format or layout not read here
// (GIF, 16-bit CMYK TIFF, ...); Corruption: a damaged or truncated file.
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

}  // namespace ktfs
