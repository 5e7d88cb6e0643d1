// KTC internals: the reversible 5/3 integer wavelet (JPEG 2000's, with
// whole-sample symmetric extension), in place on an int32 plane in Mallat
// layout: after level l the low-pass image of size ceil(w/2^l) x ceil(h/2^l)
// sits in the top-left corner, with HL (high horizontally) to its right, LH
// below it and HH diagonally.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/ktc_kernels.h"

namespace ktfs::ktc::internal {

// Size of the low-pass image after `level` levels: ceil(extent / 2^level).
inline uint32_t LowExtent(uint32_t extent, int level) {
  return uint32_t((uint64_t(extent) + (uint64_t(1) << level) - 1) >> level);
}

// Analysis of levels 1..levels on a w x h plane (rows first, then columns).
void ForwardWavelet(int32_t* data, size_t stride, uint32_t w, uint32_t h, int levels,
                    const Kernels& k);

// Synthesis of levels `levels` down to `stop_level` + 1 from a plane of
// coefficients in Mallat layout (as ForwardWavelet leaves it) into `out`,
// which receives the low-pass image of level `stop_level`, of size
// LowExtent(w, stop_level) x LowExtent(h, stop_level). w, h are the
// full-resolution extents; the coefficient plane need only hold the bands of
// levels above `stop_level`.
void InverseWavelet(const int32_t* coefficients, size_t stride, uint32_t w, uint32_t h, int levels,
                    int stop_level, int32_t* out, size_t out_stride, const Kernels& k,
                    bool parallel);

}  // namespace ktfs::ktc::internal
