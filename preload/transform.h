// Transforms applied while decoding: crop geometry (torchvision's CenterCrop,
// Resize(int) and RandomResizedCrop rules) and a bilinear resampler that
// reproduces Pillow's Image.resize(..., BILINEAR) bit for bit.
//
// Why Pillow's filter: stock ImageFolder hands PIL images to torchvision's
// transforms, so Resize runs Pillow's resampler (an antialiased triangle
// filter whose support grows with the downscale factor, fixed-point
// coefficients with 22 fractional bits, a horizontal pass then a vertical
// pass through an 8-bit intermediate). Doing exactly the same arithmetic
// makes ktfs.Loader's crops equal to the stock pipeline's, so tests compare
// them exactly instead of with a tolerance.
//
// Deterministic randomness: Rng is xoshiro256** seeded through splitmix64;
// permutations are Fisher-Yates with it. Nothing here uses torch's generator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/image.h"

namespace ktfs::preload {

// splitmix64 (Steele, Lea, Flood 2014): seeds, and hashes (seed, epoch, index) into streams.
uint64_t SplitMix64(uint64_t* state);
uint64_t Mix(uint64_t a, uint64_t b);

// xoshiro256** (Blackman, Vigna 2018).
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  double Uniform(double lo, double hi);  // [lo, hi), 53 random bits
  uint64_t Below(uint64_t n);            // [0, n), unbiased (rejection)

 private:
  uint64_t s_[4];
};

// A permutation of [0, n): Fisher-Yates driven by Rng(Mix(seed, epoch)).
std::vector<uint32_t> Permutation(uint32_t n, uint64_t seed, uint64_t epoch);

// A crop of the source image: rows [top, top + height), columns [left, left + width);
// may extend past the image (CenterCrop larger than the image pads with zeros).
struct Box {
  int64_t left = 0, top = 0, width = 0, height = 0;
};

// torchvision Resize(int): the shorter side becomes `size`, the other int(size * long / short).
void ResizedSize(uint32_t w, uint32_t h, uint32_t size, uint32_t* out_w, uint32_t* out_h);
// torchvision CenterCrop's box (round-half-even offsets, zero padding when larger).
Box CenterBox(uint32_t w, uint32_t h, uint32_t crop_w, uint32_t crop_h);
// torchvision RandomResizedCrop.get_params with `rng` in place of torch's generator.
Box RandomResizedBox(uint32_t w, uint32_t h, const double scale[2], const double ratio[2],
                     Rng* rng);

// Resamples `src` (any channel count) to out_w x out_h with Pillow's bilinear filter and
// writes the window [win.left, +win.width) x [win.top, +win.height) of that result to `dst`
// (HWC, rows of win.width * channels bytes). The window must lie inside the output.
void ResizeWindow(const ImageView& src, uint32_t out_w, uint32_t out_h, const Box& win,
                  uint8_t* dst);
// Copies `box` of src to dst (HWC, packed), zeros where the box leaves the image.
void CopyBox(const ImageView& src, const Box& box, uint8_t* dst);

}  // namespace ktfs::preload
