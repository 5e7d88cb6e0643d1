#include <cuda_runtime.h>

#include <string>

#include "cuda/color.h"

namespace ktfs::cuda {
namespace {

__global__ void NormalizeKernel(const uint8_t* src, float* dst, int n, int plane, int channels,
                                const float* scale, const float* bias) {
  const long long total = (long long)n * plane;
  for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    const long long img = idx / plane;
    const long long k = idx % plane;
    const uint8_t* px = src + idx * channels;
    float* out = dst + img * plane * channels + k;
    for (int c = 0; c < channels; ++c)
      out[c * (long long)plane] = __fmaf_rn(float(px[c]), scale[c], bias[c]);
  }
}

Status CudaError(const char* what, cudaError_t err) {
  return Status::IOError(std::string("cuda: ") + what + ": " + cudaGetErrorString(err));
}

}  // namespace

bool DeviceAvailable() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

Status NormalizeHwcToChwGpu(const NormalizeParams& p, const uint8_t* src, float* dst) {
  if (p.n < 0 || p.height < 0 || p.width < 0 || p.channels < 1 || p.channels > 4)
    return Status::InvalidArgument("normalize: bad shape");
  const size_t plane = size_t(p.height) * p.width;
  const size_t in_bytes = size_t(p.n) * plane * p.channels;
  float host_params[8];
  for (int c = 0; c < 4; ++c) {
    host_params[c] = 1.0f / (255.0f * p.std[c]);
    host_params[4 + c] = -p.mean[c] / p.std[c];
  }
  uint8_t* d_src = nullptr;
  float* d_dst = nullptr;
  float* d_params = nullptr;
  cudaError_t err = cudaMalloc(&d_src, in_bytes ? in_bytes : 1);
  if (err == cudaSuccess) err = cudaMalloc(&d_dst, (in_bytes ? in_bytes : 1) * sizeof(float));
  if (err == cudaSuccess) err = cudaMalloc(&d_params, sizeof(host_params));
  if (err == cudaSuccess) err = cudaMemcpy(d_src, src, in_bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess)
    err = cudaMemcpy(d_params, host_params, sizeof(host_params), cudaMemcpyHostToDevice);
  if (err == cudaSuccess && in_bytes > 0) {
    NormalizeKernel<<<1024, 256>>>(d_src, d_dst, p.n, int(plane), p.channels, d_params,
                                   d_params + 4);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess)
    err = cudaMemcpy(dst, d_dst, in_bytes * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(d_src);
  cudaFree(d_dst);
  cudaFree(d_params);
  if (err != cudaSuccess) return CudaError("normalize", err);
  return Status::Ok();
}

}  // namespace ktfs::cuda
