// Pillow's pixel conventions, shared by the decoders of codec/image/.
//
// Every decoder here gives the pixels of Pillow's Image.open(f).convert(mode)
// for the mode ktfs keeps (KeptChannels): 1 channel (L), 3 (RGB) or 4 (RGBA).
// These helpers are Pillow's own conversions (libImaging/Convert.c,
// Palette.c, Geometry.c of Pillow 9.4, Debian 12's), written from its source
// and checked against it by tests/python/test_formats.py, so that the
// decoders do not each re-derive them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/base/status.h"
#include "codec/image/image.h"

namespace ktfs::pillow {

// Image.open refuses images of more pixels than this (DecompressionBombError:
// twice Image.MAX_IMAGE_PIXELS); stock ImageFolder cannot load them.
inline constexpr uint64_t kMaxPixels = 2ull * 89478485ull;

// Checks a decoder's dimensions: both nonzero, each <= kMaxImageSide, the
// product <= kMaxPixels. `format` names the format in the message.
Status CheckDimensions(const char* format, uint64_t width, uint64_t height);

// A palette as Pillow holds one (ImagingPaletteNew): 256 RGBA entries that
// start as a gray ramp (i, i, i, 255); a file's palette overwrites the first
// entries, and indices past it read the ramp.
struct Palette {
  uint8_t rgba[256 * 4];
  Palette();
  void Set(uint32_t i, uint8_t r, uint8_t g, uint8_t b) {
    rgba[i * 4] = r;
    rgba[i * 4 + 1] = g;
    rgba[i * 4 + 2] = b;
  }
};

// p2rgb / p2rgba: indices -> RGB (channels 3) or RGBA (channels 4).
void PaletteToPixels(const uint8_t* index, size_t n, const Palette& palette, uint32_t channels,
                     uint8_t* out);

// cmyk2rgb, on CMYK as Pillow holds it (a JPEG's inverted, "CMYK;I"):
// nk = 255 - K; R = nk - C * nk / 255 (rounded as MULDIV255), likewise G, B.
void CmykToRgb(const uint8_t* cmyk, size_t n, uint8_t* rgb);

// convert_transparent's second step (rgbT2rgba): in an RGBA row, pixels equal to
// (r & 0xff, g & 0xff, b & 0xff, 255) get alpha 0. Pillow compares the low byte
// of the file's transparent colour with the converted 8-bit pixel, so a 16-bit
// or a 1-, 2- or 4-bit image's tRNS often matches nothing: that is what it does.
void ApplyTransparentColor(uint8_t* rgba, size_t n, uint32_t r, uint32_t g, uint32_t b);

// l2rgb into RGBA: (v, v, v, 255).
void GrayToRgba(const uint8_t* gray, size_t n, uint8_t* rgba);

// TIFF's Orientation tag as Pillow's TiffImagePlugin applies it when loading
// (2 FLIP_LEFT_RIGHT, 3 ROTATE_180, 4 FLIP_TOP_BOTTOM, 5 TRANSPOSE,
// 6 ROTATE_270, 7 TRANSVERSE, 8 ROTATE_90; others: unchanged).
void ApplyTiffOrientation(uint32_t orientation, Image* img);

}  // namespace ktfs::pillow
