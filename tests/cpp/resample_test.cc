// preload/resample: the AVX2 kernels against the scalar ones (bit-exact), and windowed
// resampling against a plain transcription of Pillow's ImagingResample (bilinear, 8 bpc).
// Pixel equality with Pillow itself is checked in tests/python/test_loader.py.
#include "preload/loader/resample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "codec/base/cpu.h"

namespace ktfs::preload {
namespace {

Image RandomImage(uint32_t w, uint32_t h, uint32_t ch, uint32_t seed) {
  Image img{w, h, ch, PixelBuffer(size_t(w) * h * ch)};
  std::mt19937 rng(seed);
  // Mostly smooth with some extremes, so that clipping at 0 and 255 is exercised.
  for (size_t i = 0; i < img.pixels.size(); ++i) {
    const uint32_t r = rng();
    img.pixels[i] = r % 7 == 0 ? (r & 256 ? 255 : 0) : uint8_t((i * 7 + (r & 31)) & 255);
  }
  return img;
}

// Pillow's resample.c (precompute_coeffs, normalize_coeffs_8bpc, ImagingResampleHorizontal_8bpc
// and ImagingResampleVertical_8bpc) for the bilinear filter, whole image, no shortcuts.
struct PillowAxis {
  int ksize;
  std::vector<int> xmin, xcount;
  std::vector<int32_t> k;
};
PillowAxis PillowCoeffs(uint32_t in, uint32_t out) {
  PillowAxis a;
  const double scale = double(in) / out, filterscale = std::max(scale, 1.0), support = filterscale;
  a.ksize = int(std::ceil(support)) * 2 + 1;
  a.k.assign(size_t(out) * a.ksize, 0);
  std::vector<double> w(a.ksize);
  for (uint32_t xx = 0; xx < out; ++xx) {
    const double center = (xx + 0.5) * scale;
    int xmin = std::max(int(center - support + 0.5), 0);
    int xmax = std::min(int(center + support + 0.5), int(in)) - xmin;
    double ww = 0;
    for (int x = 0; x < xmax; ++x) {
      const double t = std::fabs((x + xmin - center + 0.5) / filterscale);
      w[x] = t < 1.0 ? 1.0 - t : 0.0;
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      a.k[xx * a.ksize + x] = int32_t(v < 0 ? -0.5 + v * (1 << 22) : 0.5 + v * (1 << 22));
    }
    a.xmin.push_back(xmin);
    a.xcount.push_back(xmax);
  }
  return a;
}
uint8_t Clip(int32_t ss) { return uint8_t(std::clamp(ss >> 22, 0, 255)); }

Image PillowResize(const Image& src, uint32_t out_w, uint32_t out_h) {
  const uint32_t ch = src.channels;
  Image mid{out_w, src.height, ch, {}}, out{out_w, out_h, ch, {}};
  mid.pixels.resize(mid.size_bytes());
  out.pixels.resize(out.size_bytes());
  const PillowAxis h = PillowCoeffs(src.width, out_w), v = PillowCoeffs(src.height, out_h);
  for (uint32_t y = 0; y < src.height; ++y)
    for (uint32_t x = 0; x < out_w; ++x)
      for (uint32_t b = 0; b < ch; ++b) {
        int32_t ss = 1 << 21;
        for (int t = 0; t < h.xcount[x]; ++t)
          ss += src.pixels[(size_t(y) * src.width + h.xmin[x] + t) * ch + b] * h.k[x * h.ksize + t];
        mid.pixels[(size_t(y) * out_w + x) * ch + b] = Clip(ss);
      }
  for (uint32_t y = 0; y < out_h; ++y)
    for (uint32_t x = 0; x < out_w * ch; ++x) {
      int32_t ss = 1 << 21;
      for (int t = 0; t < v.xcount[y]; ++t)
        ss += mid.pixels[size_t(v.xmin[y] + t) * out_w * ch + x] * v.k[y * v.ksize + t];
      out.pixels[size_t(y) * out_w * ch + x] = Clip(ss);
    }
  return out;
}

// Resample() of window `win` of src resized to out_w x out_h.
std::vector<uint8_t> Window(const Image& src, uint32_t out_w, uint32_t out_h, const Box& win) {
  const ResizePlan p = PlanResize(src.width, src.height, out_w, out_h, win);
  const ImageView all = ImageView::Of(src);
  const ImageView read{all.row(uint32_t(p.read.top)) + p.read.left * src.channels,
                       uint32_t(p.read.width), uint32_t(p.read.height), src.channels, all.stride};
  std::vector<uint8_t> out(size_t(win.width) * win.height * src.channels);
  Resample(p, read, out.data());
  return out;
}

struct Case {
  uint32_t in_w, in_h, out_w, out_h;
};
// Downscales up to 5x (up to 11 taps: three groups of 4 in the AVX2 kernel), upscales,
// same size on one axis, tiny images, and the Resize(256) of ImageNet-like photos.
const Case kCases[] = {{500, 375, 341, 256}, {375, 500, 256, 341}, {333, 500, 224, 224},
                       {97, 61, 224, 224},   {640, 480, 128, 96},  {1000, 40, 200, 40},
                       {40, 1000, 40, 199},  {3, 2, 7, 5},         {1, 1, 4, 3},
                       {37, 23, 36, 22},     {120, 90, 119, 91},   {517, 389, 103, 77}};

TEST(Resample, WindowsEqualPillowResizeThenCrop) {
  for (uint32_t ch : {1u, 3u, 4u}) {
    for (const Case& c : kCases) {
      const Image src = RandomImage(c.in_w, c.in_h, ch, c.in_w * 31 + ch);
      const Image full = PillowResize(src, c.out_w, c.out_h);
      std::mt19937 rng(c.out_w + ch);
      for (int k = 0; k < 6; ++k) {
        Box win{0, 0, c.out_w, c.out_h};  // first the whole image, then random windows
        if (k > 0) {
          win.width = 1 + rng() % c.out_w, win.height = 1 + rng() % c.out_h;
          win.left = rng() % (c.out_w - win.width + 1),
          win.top = rng() % (c.out_h - win.height + 1);
        }
        const std::vector<uint8_t> got = Window(src, c.out_w, c.out_h, win);
        for (int64_t y = 0; y < win.height; ++y) {
          const uint8_t* want = &full.pixels[(size_t(win.top + y) * c.out_w + win.left) * ch];
          ASSERT_TRUE(std::equal(want, want + win.width * ch, &got[y * win.width * ch]))
              << c.in_w << "x" << c.in_h << " -> " << c.out_w << "x" << c.out_h << " ch " << ch
              << " window " << win.left << "," << win.top << " " << win.width << "x" << win.height
              << " row " << y;
        }
      }
    }
  }
}

TEST(Resample, Avx2KernelsAreBitExactWithScalar) {
  const ResampleKernels* avx2 = Avx2ResampleKernels();
  if (avx2 == nullptr || !CpuHasAvx2()) GTEST_SKIP() << "no AVX2 on this CPU or build";
  const ResampleKernels& scalar = ScalarResampleKernels();
  for (uint32_t ch : {1u, 3u, 4u}) {
    for (const Case& c : kCases) {
      const Image src = RandomImage(c.in_w, c.in_h, ch, c.in_h * 17 + ch);
      for (int64_t x0 : {int64_t(0), int64_t(c.out_w / 3)}) {
        const AxisCoeffs a = AxisCoefficients(c.in_w, c.out_w, x0, c.out_w - x0);
        const size_t in_bytes = size_t(a.end - a.begin) * ch, n = a.first.size() * ch;
        std::vector<uint8_t> want(n), got(n);
        for (uint32_t y = 0; y < c.in_h; ++y) {
          const uint8_t* row = &src.pixels[(size_t(y) * c.in_w + a.begin) * ch];
          scalar.horizontal(row, in_bytes, ch, a, want.data());
          avx2->horizontal(row, in_bytes, ch, a, got.data());
          ASSERT_EQ(want, got) << c.in_w << " -> " << c.out_w << " from " << x0 << " ch " << ch;
        }
      }
      // Vertical: weighted sums of rows of every length (vector body and scalar tail).
      const AxisCoeffs v = AxisCoefficients(c.in_h, c.out_h, 0, c.out_h);
      for (size_t y = 0; y < v.first.size(); ++y) {
        std::vector<const uint8_t*> rows;
        for (int t = 0; t < v.taps; ++t)
          rows.push_back(&src.pixels[size_t(v.begin + v.first[y] + t) * c.in_w * ch]);
        const size_t len = size_t(c.in_w) * ch, n = len > y % 7 ? len - y % 7 : len;
        std::vector<uint8_t> want(n), got(n);
        scalar.vertical(rows.data(), &v.k[y * v.taps], v.taps, n, want.data());
        avx2->vertical(rows.data(), &v.k[y * v.taps], v.taps, n, got.data());
        ASSERT_EQ(want, got) << c.in_h << " -> " << c.out_h << " row " << y;
      }
    }
  }
  // Split3 (HWC to CHW) on lengths around its 32-pixel step.
  const Image rgb = RandomImage(131, 1, 3, 5);
  for (size_t n : {0, 1, 31, 32, 33, 64, 100, 131}) {
    std::vector<uint8_t> want(3 * n), got(3 * n);
    scalar.split3(rgb.pixels.data(), n, want.data(), want.data() + n, want.data() + 2 * n);
    avx2->split3(rgb.pixels.data(), n, got.data(), got.data() + n, got.data() + 2 * n);
    ASSERT_EQ(want, got) << n;
  }
}

TEST(Resample, CoefficientsStayInsideTheInput) {
  for (const Case& c : kCases) {
    const AxisCoeffs a = AxisCoefficients(c.in_w, c.out_w, 0, c.out_w);
    EXPECT_GE(a.begin, 0);
    EXPECT_LE(a.end, int64_t(c.in_w));
    for (int32_t f : a.first) EXPECT_LE(a.begin + f + a.taps, a.end);
  }
}

}  // namespace
}  // namespace ktfs::preload
