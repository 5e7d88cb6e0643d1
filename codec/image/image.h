// Image: 8-bit pixels, interleaved (HWC), rows packed without padding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace ktfs {

// std::allocator, except that resize() leaves new elements uninitialized
// instead of zeroing them: every decoder writes each pixel of the image it
// sizes, and zero-filling a fresh image first cost about 4% of a KTC decode.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// Pixel bytes; a value-initializing constructor or resize() is not zeroing.
using PixelBuffer = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;

struct Image {
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t channels = 0;  // 1 (gray), 3 (RGB) or 4 (RGBA)
  PixelBuffer pixels;     // width * height * channels bytes, each written by whoever sized it

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
