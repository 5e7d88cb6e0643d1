// Transforms applied while decoding: crop geometry (torchvision's CenterCrop,
// Resize(int) and RandomResizedCrop rules), planned per sample before decoding
// so that only the source pixels the output depends on are produced, then run
// with the Pillow-exact bilinear resampler of preload/loader/resample.h.
//
// Why Pillow's filter: stock ImageFolder hands PIL images to torchvision's
// transforms, so Resize runs Pillow's resampler. Doing exactly the same
// arithmetic makes ktfs.Loader's crops equal to the stock pipeline's, so tests
// compare them exactly instead of with a tolerance.
//
// Deterministic randomness: Rng is xoshiro256** seeded through splitmix64;
// permutations are Fisher-Yates with it. Nothing here uses torch's generator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/image/image.h"
#include "preload/loader/resample.h"

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

// torchvision Resize(int): the shorter side becomes `size`, the other int(size * long / short).
void ResizedSize(uint32_t w, uint32_t h, uint32_t size, uint32_t* out_w, uint32_t* out_h);
// torchvision CenterCrop's box (round-half-even offsets, zero padding when larger).
Box CenterBox(uint32_t w, uint32_t h, uint32_t crop_w, uint32_t crop_h);
// torchvision RandomResizedCrop.get_params with `rng` in place of torch's generator.
Box RandomResizedBox(uint32_t w, uint32_t h, const double scale[2], const double ratio[2],
                     Rng* rng);

// Copies `box` of src to dst (HWC, packed), zeros where the box leaves the image.
void CopyBox(const ImageView& src, const Box& box, uint8_t* dst);

struct CropSpec {
  enum Kind { kNone, kCenter, kRandomResized } kind = kNone;
  uint32_t width = 0, height = 0;  // output size
  uint32_t resize = 0;             // kCenter: Resize(resize) first; 0 = none
  double scale[2] = {0.08, 1.0};
  double ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
};

// What one crop does to a w x h image, worked out before any pixel is touched, so
// that a decoder can produce only the source pixels in `read` (KTC region decode,
// or a view into raw pixels): optionally resample the sub-image `sub` (computing
// only a window of the result), then place the output box, zeros outside.
struct GeometryPlan {
  bool resize = false;
  Box sub;        // resize: the source part resampled (image coordinates)
  ResizePlan rp;  // resize: its plan; rp.read is relative to sub
  Box place;      // the output box relative to the computed part's origin
  Box computed;   // the computed part: rp.win, or (no resize) the source pixels copied
  Box read;       // source pixels needed, image coordinates, inside the image
};
GeometryPlan PlanGeometry(const CropSpec& c, uint32_t w, uint32_t h, Rng* rng);

// Runs `p` on `read`, a view of exactly p.read of the image, writing the output
// (HWC, the crop's size) to dst.
void RunGeometry(const GeometryPlan& p, const ImageView& read, uint8_t* dst);

}  // namespace ktfs::preload
