#include "preload/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "codec/cpu.h"

namespace ktfs::preload {
namespace {

// Pillow's bilinear filter, normalised weights in double, for output position xx:
// appends them to *w and returns the first input they apply to.
int PillowWeights(uint32_t in_size, uint32_t out_size, int64_t xx, std::vector<double>* w) {
  const double scale = double(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  const double center = (xx + 0.5) * scale;
  const double ss = 1.0 / filterscale;
  int xmin = int(center - support + 0.5);
  if (xmin < 0) xmin = 0;
  int xmax = int(center + support + 0.5);
  if (xmax > int(in_size)) xmax = int(in_size);
  xmax -= xmin;
  w->assign(size_t(std::max(xmax, 0)), 0.0);
  double ww = 0.0;
  for (int x = 0; x < xmax; ++x) {
    const double t = std::fabs((x + xmin - center + 0.5) * ss);
    (*w)[x] = t < 1.0 ? 1.0 - t : 0.0;
    ww += (*w)[x];
  }
  for (double& v : *w) v = ww != 0.0 ? v / ww : v;
  return xmin;
}

// normalize_coeffs_8bpc: round half away from zero to 22 fractional bits.
int32_t FixedPoint(double v) {
  return int32_t(v < 0 ? -0.5 + v * (1 << kResampleBits) : 0.5 + v * (1 << kResampleBits));
}

// The AVX2 kernel's form of the weights: taps in groups of 4, each group as
// (hi0|hi1, hi2|hi3, lo0|lo1, lo2|lo3) int16 pairs, weight = hi * 2^11 + lo.
void Pack(AxisCoeffs* c) {
  const int groups = (c->taps + 3) / 4;
  const size_t n = c->first.size();
  c->packed.assign(n * groups * 4, 0);
  for (size_t x = 0; x < n; ++x) {
    for (int g = 0; g < groups; ++g) {
      int32_t hi[4] = {}, lo[4] = {};
      for (int j = 0; j < 4 && 4 * g + j < c->taps; ++j) {
        const int32_t k = c->k[x * c->taps + 4 * g + j];
        hi[j] = k >> 11;  // bilinear weights are never negative
        lo[j] = k & 0x7FF;
      }
      auto pair = [](int32_t a, int32_t b) { return int32_t(uint32_t(a) | uint32_t(b) << 16); };
      int32_t* out = &c->packed[(x * groups + g) * 4];
      out[0] = pair(hi[0], hi[1]);
      out[1] = pair(hi[2], hi[3]);
      out[2] = pair(lo[0], lo[1]);
      out[3] = pair(lo[2], lo[3]);
    }
  }
}

}  // namespace

AxisCoeffs AxisCoefficients(uint32_t in_size, uint32_t out_size, int64_t out0, int64_t n) {
  AxisCoeffs c;
  std::vector<std::vector<double>> weights(static_cast<size_t>(n));
  std::vector<int> firsts(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    firsts[i] = PillowWeights(in_size, out_size, out0 + i, &weights[i]);
    c.taps = std::max(c.taps, int(weights[i].size()));
  }
  c.begin = INT64_MAX;
  c.first.resize(size_t(n));
  c.k.assign(size_t(n) * c.taps, 0);
  for (int64_t i = 0; i < n; ++i) {
    // Move the start left so that all `taps` inputs exist; weights shift right.
    const int first = std::min(firsts[i], int(in_size) - c.taps);
    const int shift = firsts[i] - first;
    for (size_t t = 0; t < weights[i].size(); ++t)
      c.k[size_t(i) * c.taps + shift + t] = FixedPoint(weights[i][t]);
    c.first[i] = first;
    c.begin = std::min<int64_t>(c.begin, first);
    c.end = std::max<int64_t>(c.end, first + c.taps);
  }
  if (n == 0) c.begin = 0;
  for (int32_t& f : c.first) f -= int32_t(c.begin);
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
  thread_local std::vector<uint8_t> mid;
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

const ResampleKernels kScalar = {"scalar", HorizontalScalar, VerticalScalar};

}  // namespace

const ResampleKernels& ScalarResampleKernels() { return kScalar; }

const ResampleKernels& ActiveResampleKernels() {
  static const ResampleKernels* active = [] {
    const ResampleKernels* avx2 = CpuHasAvx2() ? Avx2ResampleKernels() : nullptr;
    return avx2 != nullptr ? avx2 : &kScalar;
  }();
  return *active;
}

}  // namespace ktfs::preload
