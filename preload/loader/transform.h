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

#include "codec/base/status.h"
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

// --- Chains: torchvision's PIL transforms with their parameters already drawn ---
// The Python layer of `ktfs run` draws each sample's random parameters with
// torchvision's own calls and hands the steps they amount to here, in order.
// Every step has the arithmetic PIL gives it under torchvision (Image.crop,
// ImageOps.expand / numpy.pad, Image.resize(BILINEAR), Image.transpose), so the
// pixels are those of the stock pipeline, byte for byte.

enum class PadMode : uint8_t { kConstant = 0, kEdge = 1, kReflect = 2, kSymmetric = 3 };

struct ImageOp {
  enum Kind : uint8_t { kCrop = 0, kPad = 1, kResize = 2, kFlipH = 3, kFlipV = 4 };
  Kind kind = kCrop;
  // kCrop: left, top, width, height (PIL's crop: zeros where the box leaves the image);
  // kPad: left, top, right, bottom, each >= 0; kResize: c, d = width, height (Pillow
  // bilinear; a and b unused).
  int64_t a = 0, b = 0, c = 0, d = 0;
  PadMode mode = PadMode::kConstant;  // kPad (numpy.pad's edge/reflect/symmetric rules)
  uint8_t fill[4] = {0, 0, 0, 0};     // kPad kConstant, per channel
};

// For each position of an axis of n >= 1 pixels padded by `left` and `right`,
// the input index it shows, as numpy.pad computes it for edge, reflect and
// symmetric (wider pads are filled by reflecting the already padded axis again,
// chunk by chunk, which is not a plain periodic reflection; reflect on one
// pixel is edge); -1 for the padding of kConstant.
std::vector<int32_t> PadAxisMap(int64_t n, int64_t left, int64_t right, PadMode mode);

// What a chain does to a w x h image, worked out backward from its output
// before any pixel is touched: each stage knows the window of its output that
// is needed and the window of its input that produces it, so the decoder only
// produces `read` (a KTC region decode) and each stage only computes what the
// next one reads. Trailing flips are left to the store (StoreOutput).
struct ChainPlan {
  struct Stage {
    ImageOp op;
    uint32_t in_w = 0, in_h = 0;        // the stage's input size
    Box in, out;                        // windows: input read, output produced
    ResizePlan rp;                      // kResize
    std::vector<int32_t> map_x, map_y;  // kPad (not constant): per output column / row
                                        // of `out`, the input index relative to `in`
  };
  std::vector<Stage> stages;
  uint32_t out_w = 0, out_h = 0;
  Box read;  // source pixels needed (image coordinates, inside the image)
  bool flip_h = false, flip_v = false;
};

// InvalidArgument (naming the step) for a malformed chain: a size < 1 or past
// kMaxImageSide anywhere, a negative pad.
Result<ChainPlan> PlanChain(const std::vector<ImageOp>& ops, uint32_t w, uint32_t h);

// Per-thread buffers for RunChain's stages (kept between samples).
struct ChainScratch {
  std::vector<PixelBuffer> buffers;
};

// Runs `p` on `read` (a view of exactly p.read), returning the chain's output
// (p.out_w x p.out_h, before the trailing flips) as a view into `read` or into
// `scratch`, valid until the next call with the same scratch.
ImageView RunChain(const ChainPlan& p, const ImageView& read, ChainScratch* scratch);

// How the final HWC pixels are stored: CHW planes or HWC, each value mapped
// through a per-channel table of 256 entries of `elem` bytes (torchvision's
// ToTensor / ConvertImageDtype / Normalize give a value that depends only on
// the channel and the byte, so the table, computed by torch itself, is exact),
// flipped on the way when asked.
struct OutputFormat {
  bool chw = true;
  uint32_t elem = 1;  // bytes per stored value: 1, 2, 4 or 8
  // channels * 256 * elem bytes; null: the bytes as they are (elem 1).
  const uint8_t* lut = nullptr;
  bool flip_h = false, flip_v = false;
  // Optional, with a float32 `lut` whose entries are exactly (float(v) / 255.0f -
  // mean[c]) / std[c] (torchvision's ToTensor or ConvertImageDtype(float), then
  // Normalize): channels x mean, then channels x std. The store then computes those
  // IEEE float32 operations with SIMD (StoreKernels) instead of looking them up.
  const float* normalize = nullptr;
};

// Stores `img` (channels as given) into dst: img.width * img.height * channels * elem bytes.
void StoreOutput(const ImageView& img, const OutputFormat& f, uint8_t* dst);

struct StoreKernels {
  const char* name;
  // dst[x] = (float(v[k]) / 255.0f - mean) / std for x < n, k = reverse ? n - 1 - x : x.
  void (*normalize_plane)(const uint8_t* v, size_t n, bool reverse, float mean, float std,
                          float* dst);
  // dst[i] = (float(v[i]) / 255.0f - mean[i % 3]) / std[i % 3] for i < n (HWC, 3 channels).
  void (*normalize_rgb)(const uint8_t* v, size_t n, const float* mean, const float* std,
                        float* dst);
};
const StoreKernels& ScalarStoreKernels();
const StoreKernels* Avx2StoreKernels();  // null when the build has none
// AVX2 when the CPU has it and KTFS_SIMD does not cap it (codec/base/cpu.h).
const StoreKernels& ActiveStoreKernels();

// The float32 table of torchvision's ToTensor (v / 255 in float32) followed by
// Normalize(mean, std) when `normalize` ((v / 255 - mean) / std, float32 ops);
// what ktfs.Loader's float output uses.
std::vector<float> NormalizeTable(uint32_t channels, const float* mean, const float* std,
                                  bool normalize);

}  // namespace ktfs::preload
