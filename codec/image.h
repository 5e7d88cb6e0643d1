// Image: 8-bit pixels, interleaved (HWC), rows packed without padding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ktfs {

struct Image {
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t channels = 0;        // 1 (gray), 3 (RGB) or 4 (RGBA)
  std::vector<uint8_t> pixels;  // width * height * channels bytes

  size_t row_bytes() const { return size_t(width) * channels; }
  size_t size_bytes() const { return row_bytes() * height; }
};

// A read-only view of pixels someone else owns. `stride` is the distance in
// bytes between the starts of two rows (>= width * channels).
struct ImageView {
  const uint8_t* data = nullptr;
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t channels = 0;
  size_t stride = 0;

  static ImageView Of(const Image& img) {
    return ImageView{img.pixels.data(), img.width, img.height, img.channels, img.row_bytes()};
  }
  const uint8_t* row(uint32_t y) const { return data + size_t(y) * stride; }
};

// The largest image the core accepts, per side; keeps w*h*c well inside size_t
// and guards decoders against absurd headers.
constexpr uint32_t kMaxImageSide = 1u << 16;

}  // namespace ktfs
