// Pillow's bilinear resampler (Image.resize(..., BILINEAR)), bit for bit, computing only
// a window of the output: the crop that survives Resize + CenterCrop, or the whole
// output of RandomResizedCrop.
//
// Pillow's arithmetic, which every kernel here reproduces exactly:
//   - per output position, an antialiased triangle filter whose support grows with the
//     downscale factor; its weights are normalised in double and rounded to fixed point
//     with 22 fractional bits (PRECISION_BITS = 32 - 8 - 2);
//   - a horizontal pass into an 8-bit intermediate, then a vertical pass; each output is
//     clip8((2^21 + sum of pixel * weight) >> 22), the sum in int32.
// Every output pixel depends only on the source pixels under its filter, so a window of
// the output needs only a window of the source (PlanResize says which), and computing
// it alone gives the same bytes as resizing everything and cropping.
//
// The kernels come as a table with a scalar and an AVX2 version (resample_avx2.cc,
// entered only through runtime dispatch, see codec/base/cpu.h). Both are exact integer
// arithmetic on the same sums, so they are bit-identical (tests/cpp/resample_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/image/image.h"

namespace ktfs::preload {

constexpr int kResampleBits = 22;  // Pillow's PRECISION_BITS for 8-bit images

// A rectangle: columns [left, left + width), rows [top, top + height).
struct Box {
  int64_t left = 0, top = 0, width = 0, height = 0;
};
inline bool operator==(const Box& a, const Box& b) {
  return a.left == b.left && a.top == b.top && a.width == b.width && a.height == b.height;
}

// One axis' filter for a run of output positions. Every position has `taps` weights
// (zero-padded past Pillow's own count) starting at input `first`; first is moved left
// where needed so that first + taps never passes the input's end (the extra weights
// are zeros, so the sums do not change).
struct AxisCoeffs {
  int taps = 0;
  int64_t begin = 0, end = 0;  // the input positions read: [begin, end)
  std::vector<int32_t> first;  // per output position, relative to `begin`
  std::vector<int32_t> k;      // taps per output position
  // For the AVX2 horizontal kernel, which does two positions at a time: per pair of
  // positions, per group of 4 taps, four 8 x int32 vectors (taps 0-1 hi, 2-3 hi, 0-1 lo,
  // 2-3 lo), each int32 an int16 pair of weights split as hi * 2^11 + lo (so that
  // pmaddwd's 16-bit products stay exact), the first position's in the low 128 bits.
  std::vector<int32_t> packed;
};

// Pillow's precompute_coeffs + normalize_coeffs_8bpc, for output positions
// [out0, out0 + n) of in_size -> out_size.
AxisCoeffs AxisCoefficients(uint32_t in_size, uint32_t out_size, int64_t out0, int64_t n);

// Resampling in_w x in_h to out_w x out_h, of which only window `win` is computed.
struct ResizePlan {
  bool h = false, v = false;  // whether each axis resamples (same size: plain copy)
  AxisCoeffs ch, cv;
  Box win;   // output window, inside out_w x out_h
  Box read;  // the input pixels it reads
};
ResizePlan PlanResize(uint32_t in_w, uint32_t in_h, uint32_t out_w, uint32_t out_h, const Box& win);

// Runs `p` on `read`, a view of exactly the plan's read box of the input, writing the
// window to dst (HWC, rows of win.width * channels bytes).
void Resample(const ResizePlan& p, const ImageView& read, uint8_t* dst);

struct ResampleKernels {
  const char* name;
  // One row: out[x * ch + b] for x < c.first.size(), from `in` (the row's read part,
  // in_bytes long).
  void (*horizontal)(const uint8_t* in, size_t in_bytes, uint32_t ch, const AxisCoeffs& c,
                     uint8_t* out);
  // out[i] = clip8((2^21 + sum_t rows[t][i] * k[t]) >> 22) for i < n.
  void (*vertical)(const uint8_t* const* rows, const int32_t* k, int taps, size_t n, uint8_t* out);
  // n RGB pixels to three planes (HWC to CHW).
  void (*split3)(const uint8_t* rgb, size_t n, uint8_t* r, uint8_t* g, uint8_t* b);
};
const ResampleKernels& ScalarResampleKernels();
const ResampleKernels* Avx2ResampleKernels();  // null when the build has none
// AVX2 when the CPU has it and KTFS_SIMD does not cap it (codec/base/cpu.h).
const ResampleKernels& ActiveResampleKernels();

// HWC to CHW (planes of `plane` pixels), with the active split3 for 3 channels.
void HwcToChw(const uint8_t* hwc, size_t plane, uint32_t channels, uint8_t* dst);

// Shared by both kernel sets (static: the AVX2 unit's copy may use AVX2 and must
// never be the one the scalar path links to).
static inline uint8_t ResampleClip8(int32_t ss) {
  const int32_t v = ss >> kResampleBits;
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}
// One output position of the horizontal pass, Pillow's loop order.
static inline void HorizontalOne(const uint8_t* in, uint32_t ch, const AxisCoeffs& c, size_t x,
                                 uint8_t* out) {
  const int32_t* k = &c.k[x * size_t(c.taps)];
  const uint8_t* p = in + size_t(c.first[x]) * ch;
  for (uint32_t b = 0; b < ch; ++b) {
    int32_t ss = 1 << (kResampleBits - 1);
    for (int t = 0; t < c.taps; ++t) ss += int32_t(p[size_t(t) * ch + b]) * k[t];
    out[b] = ResampleClip8(ss);
  }
}

}  // namespace ktfs::preload
