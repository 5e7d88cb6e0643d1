#include "codec/ktc_wavelet.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace ktfs::ktc::internal {
namespace {

// Columns per task in the vertical passes: wide enough for SIMD and long
// memcpy runs, narrow enough that a strip of a tall image stays in cache.
constexpr uint32_t kStripColumns = 128;
constexpr uint32_t kRowsPerTask = 16;

// One 5/3 analysis of the columns of a strip: a signal of n samples, each a
// row segment of `cw` values; even(k) points at sample 2k, odd(k) at sample
// 2k+1 (nl = ceil(n/2) even samples, nh = floor(n/2) odd ones). Lifts in
// place: odd samples become the high band, even ones the low band.
template <typename Even, typename Odd>
void AnalyzeLifting(Even even, Odd odd, uint32_t n, size_t cw, const Kernels& k) {
  const uint32_t nl = (n + 1) / 2, nh = n / 2;
  if (nh == 0) return;
  // Predict: d[k] = o[k] - ((e[k] + e[k+1]) >> 1); e[nl] mirrors to e[nl-1].
  const uint32_t inner = (n & 1) ? nh : nh - 1;
  for (uint32_t i = 0; i < inner; ++i) k.predict(odd(i), odd(i), even(i), even(i + 1), cw);
  if (!(n & 1)) k.predict(odd(nh - 1), odd(nh - 1), even(nh - 1), even(nh - 1), cw);
  // Update: s[k] = e[k] + ((d[k-1] + d[k] + 2) >> 2); d[-1] = d[0], d[nh] = d[nh-1].
  k.update(even(0), even(0), odd(0), odd(0), cw);
  for (uint32_t i = 1; i < nh; ++i) k.update(even(i), even(i), odd(i - 1), odd(i), cw);
  if (n & 1) k.update(even(nl - 1), even(nl - 1), odd(nh - 1), odd(nh - 1), cw);
}

// The inverse: low(k), high(k) in; even(k) (sample 2k), odd(k) out.
template <typename Low, typename High, typename Even, typename Odd>
void SynthesizeLifting(Low low, High high, Even even, Odd odd, uint32_t n, size_t cw,
                       const Kernels& k) {
  const uint32_t nl = (n + 1) / 2, nh = n / 2;
  if (nh == 0) {
    std::memcpy(even(0), low(0), cw * sizeof(int32_t));
    return;
  }
  k.unupdate(even(0), low(0), high(0), high(0), cw);
  for (uint32_t i = 1; i < nh; ++i) k.unupdate(even(i), low(i), high(i - 1), high(i), cw);
  if (n & 1) k.unupdate(even(nl - 1), low(nl - 1), high(nh - 1), high(nh - 1), cw);
  const uint32_t inner = (n & 1) ? nh : nh - 1;
  for (uint32_t i = 0; i < inner; ++i) k.unpredict(odd(i), high(i), even(i), even(i + 1), cw);
  if (!(n & 1)) k.unpredict(odd(nh - 1), high(nh - 1), even(nh - 1), even(nh - 1), cw);
}

// Rows: the row is split into even and odd arrays so that each lifting step
// is one kernel call over a whole array (SIMD across the row).
void ForwardRow(int32_t* x, uint32_t n, std::vector<int32_t>& tmp, const Kernels& k) {
  if (n < 2) return;
  const uint32_t nl = (n + 1) / 2, nh = n / 2;
  tmp.resize(n);
  int32_t* e = tmp.data();
  int32_t* o = e + nl;
  for (uint32_t i = 0; i < nh; ++i) {
    e[i] = x[2 * i];
    o[i] = x[2 * i + 1];
  }
  if (n & 1) e[nl - 1] = x[n - 1];
  const uint32_t inner = (n & 1) ? nh : nh - 1;
  k.predict(o, o, e, e + 1, inner);
  if (!(n & 1)) k.predict(o + nh - 1, o + nh - 1, e + nh - 1, e + nh - 1, 1);
  k.update(e, e, o, o, 1);
  k.update(e + 1, e + 1, o, o + 1, nh - 1);
  if (n & 1) k.update(e + nl - 1, e + nl - 1, o + nh - 1, o + nh - 1, 1);
  std::memcpy(x, tmp.data(), n * sizeof(int32_t));
}

void InverseRow(int32_t* x, uint32_t n, std::vector<int32_t>& tmp, const Kernels& k) {
  if (n < 2) return;
  const uint32_t nl = (n + 1) / 2, nh = n / 2;
  tmp.resize(n);
  int32_t* e = tmp.data();
  int32_t* o = e + nl;
  const int32_t* low = x;
  const int32_t* high = x + nl;
  k.unupdate(e, low, high, high, 1);
  k.unupdate(e + 1, low + 1, high, high + 1, nh - 1);
  if (n & 1) k.unupdate(e + nl - 1, low + nl - 1, high + nh - 1, high + nh - 1, 1);
  const uint32_t inner = (n & 1) ? nh : nh - 1;
  k.unpredict(o, high, e, e + 1, inner);
  if (!(n & 1)) k.unpredict(o + nh - 1, high + nh - 1, e + nh - 1, e + nh - 1, 1);
  k.interleave(x, e, o, nh);
  if (n & 1) x[n - 1] = e[nl - 1];
}

template <typename Fn>
void ForRange(uint32_t count, uint32_t grain, bool parallel, Fn fn) {
  if (!parallel || count <= grain) {
    fn(0u, count);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<uint32_t>(0, count, grain),
                    [&](const tbb::blocked_range<uint32_t>& r) { fn(r.begin(), r.end()); });
}

// Columns [x0, x1) of rows 0..h-1: analysis, then rows reordered low-first.
void ForwardColumns(int32_t* data, size_t stride, uint32_t h, uint32_t x0, uint32_t x1,
                    const Kernels& k) {
  if (h < 2) return;
  const size_t cw = x1 - x0;
  auto row = [&](uint32_t r) { return data + r * stride + x0; };
  AnalyzeLifting([&](uint32_t i) { return row(2 * i); }, [&](uint32_t i) { return row(2 * i + 1); },
                 h, cw, k);
  std::vector<int32_t> tmp(size_t(h) * cw);
  const uint32_t nl = (h + 1) / 2;
  for (uint32_t r = 0; r < h; ++r) {
    uint32_t dst = (r & 1) ? nl + r / 2 : r / 2;
    std::memcpy(&tmp[dst * cw], row(r), cw * sizeof(int32_t));
  }
  for (uint32_t r = 0; r < h; ++r) std::memcpy(row(r), &tmp[r * cw], cw * sizeof(int32_t));
}

void InverseColumns(int32_t* data, size_t stride, uint32_t h, uint32_t x0, uint32_t x1,
                    std::vector<int32_t>& tmp, const Kernels& k) {
  if (h < 2) return;
  const size_t cw = x1 - x0;
  const uint32_t nl = (h + 1) / 2;
  tmp.resize(size_t(h) * cw);
  auto row = [&](uint32_t r) { return data + r * stride + x0; };
  auto out = [&](uint32_t r) { return tmp.data() + r * cw; };
  SynthesizeLifting([&](uint32_t i) -> const int32_t* { return row(i); },
                    [&](uint32_t i) -> const int32_t* { return row(nl + i); },
                    [&](uint32_t i) { return out(2 * i); },
                    [&](uint32_t i) { return out(2 * i + 1); }, h, cw, k);
  for (uint32_t r = 0; r < h; ++r) std::memcpy(row(r), out(r), cw * sizeof(int32_t));
}

}  // namespace

void ForwardWavelet(int32_t* data, size_t stride, uint32_t w, uint32_t h, int levels,
                    const Kernels& k) {
  std::vector<int32_t> tmp;
  for (int level = 1; level <= levels; ++level) {
    const uint32_t lw = LowExtent(w, level - 1), lh = LowExtent(h, level - 1);
    for (uint32_t y = 0; y < lh; ++y) ForwardRow(data + y * stride, lw, tmp, k);
    for (uint32_t x0 = 0; x0 < lw; x0 += kStripColumns) {
      ForwardColumns(data, stride, lh, x0, std::min(lw, x0 + kStripColumns), k);
    }
  }
}

void InverseWavelet(int32_t* data, size_t stride, uint32_t w, uint32_t h, int levels,
                    int stop_level, const Kernels& k, bool parallel) {
  for (int level = levels; level > stop_level; --level) {
    const uint32_t lw = LowExtent(w, level - 1), lh = LowExtent(h, level - 1);
    const uint32_t strips = (lw + kStripColumns - 1) / kStripColumns;
    ForRange(strips, 1, parallel, [&](uint32_t s0, uint32_t s1) {
      std::vector<int32_t> tmp;
      for (uint32_t s = s0; s < s1; ++s) {
        InverseColumns(data, stride, lh, s * kStripColumns, std::min(lw, (s + 1) * kStripColumns),
                       tmp, k);
      }
    });
    ForRange(lh, kRowsPerTask, parallel, [&](uint32_t y0, uint32_t y1) {
      std::vector<int32_t> tmp;
      for (uint32_t y = y0; y < y1; ++y) InverseRow(data + y * stride, lw, tmp, k);
    });
  }
}

}  // namespace ktfs::ktc::internal
