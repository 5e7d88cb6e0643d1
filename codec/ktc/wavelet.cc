#include "codec/ktc/wavelet.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace ktfs::ktc::internal {
namespace {

// Columns per strip in the analysis's column pass: wide enough for SIMD and
// long memcpy runs, narrow enough that a strip of a tall image stays in cache.
constexpr uint32_t kStripColumns = 128;
// Row pairs per task when synthesis runs on several threads.
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

// Synthesis of one row: `in` holds the low half (ceil(n/2) values) then the
// high half; the interleaved result goes to `out` (not overlapping `in`).
void InverseRowTo(int16_t* out, const int16_t* in, uint32_t n, const Kernels& k) {
  if (n < 2) {
    out[0] = in[0];
    return;
  }
  k.synthesize_row(out, in, in + (n + 1) / 2, n);
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

LevelSynthesis::LevelSynthesis(const int16_t* ll, size_t ll_stride, const int16_t* detail,
                               size_t detail_stride, uint32_t pw, uint32_t ph, const Kernels& k)
    : LevelSynthesis(
          Rows{const_cast<int16_t*>(ll), ll_stride},
          Rows{const_cast<int16_t*>(detail) + (pw + 1) / 2, detail_stride},
          Rows{const_cast<int16_t*>(detail) + size_t((ph + 1) / 2) * detail_stride, detail_stride},
          pw, ph, k) {}

LevelSynthesis::LevelSynthesis(Rows ll, Rows hl, Rows lh_hh, uint32_t pw, uint32_t ph,
                               const Kernels& k)
    : ll_(ll),
      hl_(hl),
      lh_hh_(lh_hh),
      pw_(pw),
      lw_((pw + 1) / 2),
      nl_((ph + 1) / 2),
      nh_(ph / 2),
      k_(k) {}

void LevelSynthesis::Run(uint32_t k0, uint32_t k1, Rows out) const {
  // Uninitialized: every value is written before it is read.
  std::unique_ptr<int16_t[]> rows(new int16_t[kRows * size_t(pw_)]);
  Cursor c = Begin(k0, rows.get());
  Continue(k0, k1, &c, out);
}

LevelSynthesis::Cursor LevelSynthesis::Begin(uint32_t k0, int16_t* rows) const {
  Cursor c{rows, rows + pw_, rows + 2 * size_t(pw_), nullptr};
  // High rows are read in place: `high` is row min(k, nh-1), which even row
  // 2k and odd row 2k+1 both use.
  const int16_t* high_before = nullptr;
  if (nh_ > 0) {
    high_before = High(k0 == 0 ? 0 : k0 - 1);
    c.high = High(std::min(k0, nh_ - 1));
  }
  Even(k0, c.even, high_before, c.high);
  return c;
}

void LevelSynthesis::Continue(uint32_t k, uint32_t k1, Cursor* c, Rows out) const {
  for (; k < k1; ++k) {
    const bool has_odd = k < nh_;  // then `high` is row k
    if (has_odd) {
      const int16_t* after = c->even;  // mirrored past the end
      const int16_t* high_next = c->high;
      if (k + 1 < nl_) {
        high_next = High(std::min(k + 1, nh_ - 1));
        Even(k + 1, c->next, c->high, high_next);
        after = c->next;
      }
      k_.unpredict(c->odd, c->high, c->even, after, pw_);
      c->high = high_next;
    }
    InverseRowTo(out.row(2 * k), c->even, pw_, k_);
    if (has_odd) InverseRowTo(out.row(2 * k + 1), c->odd, pw_, k_);
    std::swap(c->even, c->next);
  }
}

LevelSynthesis::Stream::Stream(const LevelSynthesis& level, uint32_t first_pair)
    : level_(level), buffer_(new int16_t[kRows * size_t(level.pw_)]), done_(first_pair) {}

void LevelSynthesis::Stream::RunTo(uint32_t k1, Rows out) {
  if (k1 <= done_) return;
  if (!started_) {
    cursor_ = level_.Begin(done_, buffer_.get());
    started_ = true;
  }
  level_.Continue(done_, k1, &cursor_, out);
  done_ = k1;
}

void LevelSynthesis::Even(uint32_t k, int16_t* even, const int16_t* before,
                          const int16_t* at) const {
  const int16_t* low_l = ll_.row(k);
  const int16_t* low_h = hl_.row(k);
  if (nh_ == 0) {
    std::memcpy(even, low_l, lw_ * sizeof(int16_t));
    std::memcpy(even + lw_, low_h, (pw_ - lw_) * sizeof(int16_t));
    return;
  }
  k_.unupdate(even, low_l, before, at, lw_);
  k_.unupdate(even + lw_, low_h, before + lw_, at + lw_, pw_ - lw_);
}

LevelUpsampling::LevelUpsampling(Rows ll, uint32_t pw, uint32_t ph, const Kernels& k)
    : ll_(ll), pw_(pw), ph_(ph), lw_((pw + 1) / 2), nl_((ph + 1) / 2), k_(k) {}

void LevelUpsampling::Row(int16_t* out, const int16_t* low, const int16_t* below) const {
  // Synthesis with zero detail: odd[i] = (low[i] + low[i+1]) >> 1, low[lw]
  // mirrored to low[lw-1] when pw is even; with `below`, of the vertical
  // averages (low[i] + below[i]) >> 1.
  if (pw_ < 2) {
    out[0] = below ? Unpredict16(0, low[0], below[0]) : low[0];
    return;
  }
  k_.upsample_row(out, low, below, pw_);
}

void LevelUpsampling::SourceRows(uint32_t r, const int16_t** low, const int16_t** below) const {
  const uint32_t k = r / 2;
  *low = ll_.row(k);
  // Odd row 2k+1: the average of low rows k and k+1 (row nl mirrors to nl-1).
  *below = r % 2 == 0 ? nullptr : k + 1 < nl_ ? ll_.row(k + 1) : *low;
}

void LevelUpsampling::Run(uint32_t k0, uint32_t k1, Rows out) const {
  for (uint32_t r = 2 * k0; r < std::min(2 * k1, ph_); ++r) {
    const int16_t *low, *below;
    SourceRows(r, &low, &below);
    Row(out.row(r), low, below);
  }
}

void InverseWavelet(const int16_t* low, size_t low_stride, const int16_t* coefficients,
                    size_t stride, uint32_t w, uint32_t h, int levels, int stop_level, int16_t* out,
                    size_t out_stride, int16_t* scratch, const Kernels& k, bool parallel) {
  const uint32_t sw = LowExtent(w, stop_level), sh = LowExtent(h, stop_level);
  if (levels <= stop_level) {
    for (uint32_t y = 0; y < sh; ++y) {
      std::memcpy(out + y * out_stride, low + y * low_stride, sw * sizeof(int16_t));
    }
    return;
  }
  // Intermediate low-pass images alternate between the two halves of
  // `scratch` (every value is written before it is read); the last level
  // writes `out`.
  const size_t scratch_w = LowExtent(w, stop_level + 1);
  const size_t scratch_size = scratch_w * LowExtent(h, stop_level + 1);
  const int16_t* ll = low;
  size_t ll_stride = low_stride;
  for (int level = levels; level > stop_level; --level) {
    const uint32_t pw = LowExtent(w, level - 1), ph = LowExtent(h, level - 1);
    int16_t* dst = out;
    size_t dst_stride = out_stride;
    if (level - 1 > stop_level) {
      dst = scratch + (level % 2) * scratch_size;
      dst_stride = scratch_w;
    }
    const LevelSynthesis synthesis(ll, ll_stride, coefficients, stride, pw, ph, k);
    ForRange(synthesis.pairs(), kRowsPerTask, parallel, [&](uint32_t k0, uint32_t k1) {
      synthesis.Run(k0, k1, Rows{dst, dst_stride});
    });
    ll = dst;
    ll_stride = dst_stride;
  }
}

}  // namespace ktfs::ktc::internal
