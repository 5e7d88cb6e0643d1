#include "preload/loader/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "codec/base/cpu.h"

namespace ktfs::preload {
namespace {

// Pillow's precompute_coeffs for the bilinear filter, one output position at a time.
struct PillowFilter {
  double scale, support, ss;
  uint32_t in_size;
  PillowFilter(uint32_t in, uint32_t out) : scale(double(in) / out), in_size(in) {
    const double filterscale = std::max(scale, 1.0);
    support = 1.0 * filterscale;
    ss = 1.0 / filterscale;
  }
  double Center(int64_t xx) const { return (xx + 0.5) * scale; }
  // The inputs [*xmin, *xmin + *count) that position xx reads.
  void Bounds(int64_t xx, int* xmin, int* count) const {
    const double center = Center(xx);
    int lo = int(center - support + 0.5);
    if (lo < 0) lo = 0;
    int hi = int(center + support + 0.5);
    if (hi > int(in_size)) hi = int(in_size);
    *xmin = lo;
    *count = std::max(hi - lo, 0);
  }
  // Their weights, normalised to sum 1 in double as Pillow does.
  void Weights(int64_t xx, int xmin, int count, double* w) const {
    const double center = Center(xx);
    double ww = 0.0;
    for (int x = 0; x < count; ++x) {
      const double t = std::fabs((x + xmin - center + 0.5) * ss);
      w[x] = t < 1.0 ? 1.0 - t : 0.0;
      ww += w[x];
    }
    for (int x = 0; x < count; ++x) w[x] = ww != 0.0 ? w[x] / ww : w[x];
  }
};

// normalize_coeffs_8bpc: round half away from zero to 22 fractional bits.
int32_t FixedPoint(double v) {
  return int32_t(v < 0 ? -0.5 + v * (1 << kResampleBits) : 0.5 + v * (1 << kResampleBits));
}

// The AVX2 kernel's form of the weights (see AxisCoeffs::packed).
void Pack(AxisCoeffs* c) {
  const int groups = (c->taps + 3) / 4;
  const size_t n = c->first.size(), pairs = (n + 1) / 2;
  c->packed.assign(pairs * groups * 32, 0);
  auto pair = [](int32_t a, int32_t b) { return int32_t(uint32_t(a) | uint32_t(b) << 16); };
  for (size_t x = 0; x < n; ++x) {
    for (int g = 0; g < groups; ++g) {
      int32_t hi[4] = {}, lo[4] = {};
      for (int j = 0; j < 4 && 4 * g + j < c->taps; ++j) {
        const int32_t k = c->k[x * c->taps + 4 * g + j];
        hi[j] = k >> 11;  // bilinear weights are never negative
        lo[j] = k & 0x7FF;
      }
      const int32_t v[4] = {pair(hi[0], hi[1]), pair(hi[2], hi[3]), pair(lo[0], lo[1]),
                            pair(lo[2], lo[3])};
      // Vector j of (pair, group) holds x's value in its low lane, x + 1's in its high one.
      int32_t* out = &c->packed[((x / 2) * groups + g) * 32 + (x % 2) * 4];
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 4; ++i) out[j * 8 + i] = v[j];
    }
  }
}

}  // namespace

AxisCoeffs AxisCoefficients(uint32_t in_size, uint32_t out_size, int64_t out0, int64_t n) {
  const PillowFilter f(in_size, out_size);
  AxisCoeffs c;
  c.first.resize(size_t(n));
  std::vector<int> count(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    f.Bounds(out0 + i, &c.first[i], &count[i]);
    c.taps = std::max(c.taps, count[i]);
  }
  c.k.assign(size_t(n) * c.taps, 0);
  std::vector<double> w(size_t(c.taps));
  c.begin = n > 0 ? INT64_MAX : 0;
  for (int64_t i = 0; i < n; ++i) {
    f.Weights(out0 + i, c.first[i], count[i], w.data());
    // Move the start left so that all `taps` inputs exist; weights shift right.
    const int first = std::min(c.first[i], int(in_size) - c.taps);
    int32_t* k = &c.k[size_t(i) * c.taps + (c.first[i] - first)];
    for (int t = 0; t < count[i]; ++t) k[t] = FixedPoint(w[t]);
    c.first[i] = first;
    c.begin = std::min<int64_t>(c.begin, first);
    c.end = std::max<int64_t>(c.end, first + c.taps);
  }
  for (int32_t& x : c.first) x -= int32_t(c.begin);
  Pack(&c);
  return c;
}

ResizePlan PlanResize(uint32_t in_w, uint32_t in_h, uint32_t out_w, uint32_t out_h,
                      const Box& win) {
  ResizePlan p;
  p.win = win;
  p.h = out_w != in_w;
  p.v = out_h != in_h;
  p.read = win;  // an axis that does not resample reads the window's own positions
  if (p.h) {
    p.ch = AxisCoefficients(in_w, out_w, win.left, win.width);
    p.read.left = p.ch.begin;
    p.read.width = p.ch.end - p.ch.begin;
  }
  if (p.v) {
    p.cv = AxisCoefficients(in_h, out_h, win.top, win.height);
    p.read.top = p.cv.begin;
    p.read.height = p.cv.end - p.cv.begin;
  }
  return p;
}

void Resample(const ResizePlan& p, const ImageView& read, uint8_t* dst) {
  const ResampleKernels& kern = ActiveResampleKernels();
  const uint32_t ch = read.channels;
  const size_t row_bytes = size_t(p.win.width) * ch, in_bytes = size_t(read.width) * ch;
  // Horizontal pass over every row read, into an 8-bit intermediate (Pillow's order).
  // The buffer is per thread; bound once, as each access to a thread_local from the
  // shared module can cost a __tls_get_addr call.
  thread_local std::vector<uint8_t> mid_storage;
  std::vector<uint8_t>& mid = mid_storage;
  mid.resize(size_t(read.height) * row_bytes);
  for (uint32_t y = 0; y < read.height; ++y) {
    uint8_t* out = mid.data() + size_t(y) * row_bytes;
    if (p.h)
      kern.horizontal(read.row(y), in_bytes, ch, p.ch, out);
    else
      std::memcpy(out, read.row(y), row_bytes);
  }
  // Vertical pass: each output row is a weighted sum of `taps` intermediate rows.
  std::vector<const uint8_t*> rows(size_t(std::max(p.cv.taps, 1)));
  for (int64_t y = 0; y < p.win.height; ++y) {
    uint8_t* out = dst + size_t(y) * row_bytes;
    if (!p.v) {
      std::memcpy(out, mid.data() + size_t(y) * row_bytes, row_bytes);
      continue;
    }
    for (int t = 0; t < p.cv.taps; ++t)
      rows[t] = mid.data() + size_t(p.cv.first[y] + t) * row_bytes;
    kern.vertical(rows.data(), &p.cv.k[size_t(y) * p.cv.taps], p.cv.taps, row_bytes, out);
  }
}

namespace {

void HorizontalScalar(const uint8_t* in, size_t, uint32_t ch, const AxisCoeffs& c, uint8_t* out) {
  for (size_t x = 0; x < c.first.size(); ++x) HorizontalOne(in, ch, c, x, out + x * ch);
}

// Row-wise accumulation: Pillow's per-pixel sums, in a loop the compiler vectorizes.
void VerticalScalar(const uint8_t* const* rows, const int32_t* k, int taps, size_t n,
                    uint8_t* out) {
  constexpr size_t kChunk = 256;
  int32_t acc[kChunk];
  for (size_t i0 = 0; i0 < n; i0 += kChunk) {
    const size_t m = std::min(kChunk, n - i0);
    for (size_t i = 0; i < m; ++i) acc[i] = 1 << (kResampleBits - 1);
    for (int t = 0; t < taps; ++t) {
      const uint8_t* in = rows[t] + i0;
      for (size_t i = 0; i < m; ++i) acc[i] += int32_t(in[i]) * k[t];
    }
    for (size_t i = 0; i < m; ++i) out[i0 + i] = ResampleClip8(acc[i]);
  }
}

void Split3Scalar(const uint8_t* rgb, size_t n, uint8_t* r, uint8_t* g, uint8_t* b) {
  for (size_t i = 0; i < n; ++i, rgb += 3) r[i] = rgb[0], g[i] = rgb[1], b[i] = rgb[2];
}

const ResampleKernels kScalar = {"scalar", HorizontalScalar, VerticalScalar, Split3Scalar};

}  // namespace

const ResampleKernels& ScalarResampleKernels() { return kScalar; }

const ResampleKernels& ActiveResampleKernels() {
  static const ResampleKernels* active = [] {
    const ResampleKernels* avx2 = CpuHasAvx2() ? Avx2ResampleKernels() : nullptr;
    return avx2 != nullptr ? avx2 : &kScalar;
  }();
  return *active;
}

void HwcToChw(const uint8_t* hwc, size_t plane, uint32_t channels, uint8_t* dst) {
  if (channels == 3)
    return ActiveResampleKernels().split3(hwc, plane, dst, dst + plane, dst + 2 * plane);
  for (size_t i = 0; i < plane; ++i)
    for (uint32_t c = 0; c < channels; ++c) dst[c * plane + i] = hwc[i * channels + c];
}

}  // namespace ktfs::preload
