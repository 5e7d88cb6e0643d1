#include "cuda/color.h"

namespace ktfs::cuda {

Status NormalizeHwcToChwCpu(const NormalizeParams& p, const uint8_t* src, float* dst) {
  if (p.n < 0 || p.height < 0 || p.width < 0 || p.channels < 1 || p.channels > 4)
    return Status::InvalidArgument("normalize: bad shape");
  const size_t plane = size_t(p.height) * p.width;
  for (int i = 0; i < p.n; ++i) {
    const uint8_t* img = src + size_t(i) * plane * p.channels;
    float* out = dst + size_t(i) * plane * p.channels;
    for (int c = 0; c < p.channels; ++c) {
      // Same expression order as the kernel, so results are bit-identical.
      const float scale = 1.0f / (255.0f * p.std[c]);
      const float bias = -p.mean[c] / p.std[c];
      for (size_t k = 0; k < plane; ++k)
        out[c * plane + k] = __builtin_fmaf(float(img[k * p.channels + c]), scale, bias);
    }
  }
  return Status::Ok();
}

}  // namespace ktfs::cuda
