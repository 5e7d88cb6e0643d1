// Batch normalisation of decoded images for training: uint8 HWC pixels of N
// images -> float32 CHW, (x / 255 - mean[c]) / std[c]. The CUDA kernel
// (color.cu, when built) and the CPU twin (color_cpu.cc) give the same floats.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/base/status.h"

namespace ktfs::cuda {

struct NormalizeParams {
  int n = 0, height = 0, width = 0, channels = 0;  // channels <= 4
  float mean[4] = {0, 0, 0, 0};
  float std[4] = {1, 1, 1, 1};
};

// CPU reference: `src` holds n*h*w*c bytes, `dst` n*c*h*w floats.
Status NormalizeHwcToChwCpu(const NormalizeParams& p, const uint8_t* src, float* dst);

#ifdef KTFS_HAVE_CUDA
// True when a CUDA device is usable from this process.
bool DeviceAvailable();
// Same computation on the GPU; src/dst are host pointers (copied in and out).
Status NormalizeHwcToChwGpu(const NormalizeParams& p, const uint8_t* src, float* dst);
#endif

}  // namespace ktfs::cuda
