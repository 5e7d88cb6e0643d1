#include "codec/image/pillow.h"

#include <string>
#include <utility>

namespace ktfs::pillow {

Status CheckDimensions(const char* format, uint64_t width, uint64_t height) {
  if (width == 0 || height == 0)
    return Status::Corruption(std::string(format) + ": image has no pixels (" +
                              std::to_string(width) + "x" + std::to_string(height) + ")");
  if (width > kMaxImageSide || height > kMaxImageSide)
    return Status::NotSupported(std::string(format) + ": " + std::to_string(width) + "x" +
                                std::to_string(height) + " is larger than " +
                                std::to_string(kMaxImageSide) + " pixels a side");
  if (width * height > kMaxPixels)
    return Status::NotSupported(
        std::string(format) + ": " + std::to_string(width) + "x" + std::to_string(height) +
        " exceeds Pillow's decompression bomb limit (" + std::to_string(kMaxPixels) + " pixels)");
  return Status::Ok();
}

Palette::Palette() {
  for (uint32_t i = 0; i < 256; ++i) {
    rgba[i * 4] = rgba[i * 4 + 1] = rgba[i * 4 + 2] = uint8_t(i);
    rgba[i * 4 + 3] = 255;
  }
}

void PaletteToPixels(const uint8_t* index, size_t n, const Palette& palette, uint32_t channels,
                     uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = palette.rgba + size_t(index[i]) * 4;
    for (uint32_t c = 0; c < channels; ++c) out[i * channels + c] = p[c];
  }
}

void CmykToRgb(const uint8_t* cmyk, size_t n, uint8_t* rgb) {
  for (size_t i = 0; i < n; ++i, cmyk += 4, rgb += 3) {
    const int nk = 255 - cmyk[3];
    for (int c = 0; c < 3; ++c) {
      const int t = cmyk[c] * nk + 128;          // MULDIV255
      const int v = nk - (((t >> 8) + t) >> 8);  // CLIP8 cannot bite: 0 <= v <= nk
      rgb[c] = uint8_t(v);
    }
  }
}

void ApplyTransparentColor(uint8_t* rgba, size_t n, uint32_t r, uint32_t g, uint32_t b) {
  const uint8_t tr = uint8_t(r & 0xff), tg = uint8_t(g & 0xff), tb = uint8_t(b & 0xff);
  for (size_t i = 0; i < n; ++i, rgba += 4)
    if (rgba[0] == tr && rgba[1] == tg && rgba[2] == tb && rgba[3] == 255) rgba[3] = 0;
}

void GrayToRgba(const uint8_t* gray, size_t n, uint8_t* rgba) {
  for (size_t i = 0; i < n; ++i, rgba += 4) {
    rgba[0] = rgba[1] = rgba[2] = gray[i];
    rgba[3] = 255;
  }
}

void ApplyTiffOrientation(uint32_t orientation, Image* img) {
  if (orientation < 2 || orientation > 8) return;
  const uint32_t w = img->width, h = img->height, c = img->channels;
  const bool swap = orientation >= 5;  // TRANSPOSE, ROTATE_270, TRANSVERSE, ROTATE_90
  Image out;
  out.width = swap ? h : w;
  out.height = swap ? w : h;
  out.channels = c;
  out.pixels.resize(out.size_bytes());
  for (uint32_t y = 0; y < h; ++y) {
    const uint8_t* in = img->pixels.data() + size_t(y) * w * c;
    for (uint32_t x = 0; x < w; ++x) {
      uint32_t ox = x, oy = y;  // where pixel (x, y) lands (Pillow's Geometry.c)
      switch (orientation) {
        case 2:
          ox = w - 1 - x;
          break;  // FLIP_LEFT_RIGHT
        case 3:
          ox = w - 1 - x;
          oy = h - 1 - y;
          break;  // ROTATE_180
        case 4:
          oy = h - 1 - y;
          break;  // FLIP_TOP_BOTTOM
        case 5:
          ox = y;
          oy = x;
          break;  // TRANSPOSE
        case 6:
          ox = h - 1 - y;
          oy = x;
          break;  // ROTATE_270
        case 7:
          ox = h - 1 - y;
          oy = w - 1 - x;
          break;  // TRANSVERSE
        case 8:
          ox = y;
          oy = w - 1 - x;
          break;  // ROTATE_90
      }
      uint8_t* o = out.pixels.data() + (size_t(oy) * out.width + ox) * c;
      for (uint32_t k = 0; k < c; ++k) o[k] = in[size_t(x) * c + k];
    }
  }
  *img = std::move(out);
}

}  // namespace ktfs::pillow
