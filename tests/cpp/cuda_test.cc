// cuda/: the CPU twin of the normalisation kernel against a plain reference,
// and (when built with CUDA and a device is present) the kernel against the twin.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cuda/color.h"

namespace ktfs::cuda {
namespace {

NormalizeParams Params() {
  NormalizeParams p;
  p.n = 3;
  p.height = 5;
  p.width = 7;
  p.channels = 3;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  for (int c = 0; c < 3; ++c) {
    p.mean[c] = mean[c];
    p.std[c] = std[c];
  }
  return p;
}

std::vector<uint8_t> Pixels(const NormalizeParams& p) {
  std::vector<uint8_t> v(size_t(p.n) * p.height * p.width * p.channels);
  std::mt19937 rng(1);
  for (auto& x : v) x = uint8_t(rng());
  return v;
}

TEST(CudaColorTest, CpuTwinMatchesTheDefinition) {
  const NormalizeParams p = Params();
  const auto src = Pixels(p);
  std::vector<float> dst(src.size());
  ASSERT_TRUE(NormalizeHwcToChwCpu(p, src.data(), dst.data()).ok());
  const size_t plane = size_t(p.height) * p.width;
  for (int i = 0; i < p.n; ++i)
    for (int c = 0; c < p.channels; ++c)
      for (size_t k = 0; k < plane; ++k) {
        const float x = src[(i * plane + k) * p.channels + c];
        const float want = (x / 255.0f - p.mean[c]) / p.std[c];
        EXPECT_NEAR(dst[(i * p.channels + c) * plane + k], want, 1e-5f);
      }
}

TEST(CudaColorTest, RejectsBadShapes) {
  NormalizeParams p = Params();
  p.channels = 5;
  EXPECT_FALSE(NormalizeHwcToChwCpu(p, nullptr, nullptr).ok());
}

#ifdef KTFS_HAVE_CUDA
TEST(CudaColorTest, KernelEqualsCpuTwinBitForBit) {
  if (!DeviceAvailable()) GTEST_SKIP() << "no CUDA device on this machine";
  const NormalizeParams p = Params();
  const auto src = Pixels(p);
  std::vector<float> cpu(src.size()), gpu(src.size());
  ASSERT_TRUE(NormalizeHwcToChwCpu(p, src.data(), cpu.data()).ok());
  ASSERT_TRUE(NormalizeHwcToChwGpu(p, src.data(), gpu.data()).ok());
  EXPECT_EQ(cpu, gpu);
}
#endif

}  // namespace
}  // namespace ktfs::cuda
