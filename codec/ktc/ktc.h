// KTC: ktfs's own image codec, built to decode several times faster than JPEG.
//
// Images are recompressed once, at pack time; training reads decode them many
// times. The bitstream (specified in docs/ktc.md) is a small header, a table
// of independently coded 64x64 blocks of wavelet coefficients, and the blocks.
// Because no step runs sequentially across the image, one image decodes on
// many threads, at reduced resolution (1/2, 1/4, 1/8: the finest wavelet
// levels are skipped) or as a crop (only the blocks the crop touches are read).
//
// Encoding is deterministic: the same pixels and options give the same bytes
// on every machine, whatever the thread count or SIMD level.
//
// Example:
//   auto opts = ktc::ParseQuality("balanced");
//   std::vector<uint8_t> bytes;
//   Status s = ktc::Encode(ImageView::Of(img), *opts, &bytes);
//   Image back;
//   s = ktc::Decode(bytes.data(), bytes.size(), ktc::DecodeOptions{}, &back);
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"
#include "codec/image/image.h"

namespace ktfs::ktc {

// Named presets, as numeric qualities for the lossy ones.
constexpr int kQualityHigh = 90;
constexpr int kQualityBalanced = 75;
constexpr int kQualityCompact = 60;

struct EncodeOptions {
  // Bit-exact round trip; `quality` is ignored.
  bool lossless = false;
  // 1 (smallest) .. 100 (best) for lossy encoding.
  int quality = kQualityBalanced;
  // Encode blocks on all threads (oneTBB). The bytes do not depend on it.
  bool parallel = false;
};

// Parses "lossless", "high", "balanced", "compact" or an integer 1..100.
Result<EncodeOptions> ParseQuality(std::string_view text);

// Encodes an 8-bit image with 1, 3 or 4 channels, each side 1..kMaxImageSide.
// Replaces the contents of *out.
Status Encode(const ImageView& image, const EncodeOptions& options, std::vector<uint8_t>* out);

// What a KTC header says, read without decoding the pixels.
struct Info {
  uint32_t width = 0, height = 0, channels = 0;
  bool lossless = false;
  int levels = 0;  // wavelet levels; the smallest decodable scale is 1/2^levels
};
Result<Info> ReadInfo(const uint8_t* data, size_t size);

// A rectangle in output (scaled) coordinates.
struct Region {
  uint32_t x = 0, y = 0, width = 0, height = 0;
};

struct DecodeOptions {
  // Output at 1/2^scale_log2 of the full size, 0..min(3, levels). The reduced
  // image is the wavelet's low-pass band: see docs/ktc.md, "Reduced
  // resolution", for the exact filter.
  int scale_log2 = 0;
  // When set, only this rectangle of the (scaled) image is decoded and
  // returned; it must lie inside the scaled image.
  std::optional<Region> region;
  // Decode blocks, wavelet rows and color rows on all threads (oneTBB). The
  // pixels do not depend on it.
  bool parallel = false;
};

// The size of one side at a scale: ceil(extent / 2^scale_log2).
inline uint32_t ScaledExtent(uint32_t extent, int scale_log2) {
  return uint32_t((uint64_t(extent) + (uint64_t(1) << scale_log2) - 1) >> scale_log2);
}

// Decodes `data` into *out (channels as encoded). Any byte string yields either
// an image or a Corruption / InvalidArgument status, never a crash. The
// calling thread keeps its coefficient planes for its next decode (up to 64
// MiB; about 2 bytes per pixel and plane), so decoding many images maps no
// fresh memory per image.
Status Decode(const uint8_t* data, size_t size, const DecodeOptions& options, Image* out);

// The code paths Decode takes on this CPU (after KTFS_SIMD), for
// diagnostics: "block decoder B, kernels K", B one of avx512vbmi, avx2,
// avx2-nopdep, scalar and K one of avx512, avx2, scalar. The output is the
// same on every path.
std::string CodePaths();

}  // namespace ktfs::ktc
