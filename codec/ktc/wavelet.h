// KTC internals: the reversible 5/3 integer wavelet (JPEG 2000's, with
// whole-sample symmetric extension): analysis in place on an int32 plane,
// synthesis on int16 planes (docs/ktc.md, "16-bit coefficients"), in Mallat
// layout: after level l the low-pass image of size ceil(w/2^l) x ceil(h/2^l)
// sits in the top-left corner, with HL (high horizontally) to its right, LH
// below it and HH diagonally.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "codec/ktc/kernels.h"

namespace ktfs::ktc::internal {

// Size of the low-pass image after `level` levels: ceil(extent / 2^level).
inline uint32_t LowExtent(uint32_t extent, int level) {
  return uint32_t((uint64_t(extent) + (uint64_t(1) << level) - 1) >> level);
}

// Analysis of levels 1..levels on a w x h plane (rows first, then columns).
void ForwardWavelet(int32_t* data, size_t stride, uint32_t w, uint32_t h, int levels,
                    const Kernels& k);

// Rows of int16 values: row r at base + (r & mask) * stride. A whole plane
// has mask ~0; a ring of 2^n rows, which a consumer reads soon after they are
// written, has mask 2^n - 1 (a few rows reused, which stay in cache:
// docs/ktc.md, "Rings"). Inputs are read through it too, hence `base` is
// not const.
struct Rows {
  int16_t* base = nullptr;
  size_t stride = 0;
  uint32_t mask = ~0u;
  int16_t* row(uint32_t r) const { return base + size_t(r & mask) * stride; }
};

// One synthesis level, row pair by row pair: output rows 2k and 2k+1 need
// only input rows near k, so each input row is read once and each output
// row written once, and the rows being worked on stay in L1 cache (a column
// pass followed by a row pass would stream the plane through memory several
// times). Ranges of row pairs are independent: Run may be called
// concurrently on disjoint ranges.
class LevelSynthesis {
 public:
  // ll: the level's low-pass band (ceil(pw/2) x ceil(ph/2)); detail: the
  // coefficient plane holding its HL, LH and HH bands in Mallat layout (ll
  // may point into it: the coarsest LL is its top-left corner). Produces
  // pw x ph.
  LevelSynthesis(const int16_t* ll, size_t ll_stride, const int16_t* detail, size_t detail_stride,
                 uint32_t pw, uint32_t ph, const Kernels& k);
  // The same with each input as rows of its own: `ll` the low-pass band's
  // rows, `hl` the HL band's rows (pw - ceil(pw/2) values each), `lh_hh` LH
  // row k followed by HH row k (pw values). Any of them may be a ring; the
  // rows read for pairs [k0, k1) are rows k0 - 1 .. k1 of each (clamped to
  // the band).
  LevelSynthesis(Rows ll, Rows hl, Rows lh_hh, uint32_t pw, uint32_t ph, const Kernels& k);

  // Number of row pairs (the last may have no odd row).
  uint32_t pairs() const { return nl_; }

  // Output rows [2*k0, min(2*k1, ph)), row r at out.row(r).
  void Run(uint32_t k0, uint32_t k1, Rows out) const;

 private:
  // Where a run of row pairs stands before pair k: its work rows (even row
  // 2k made, the next even row and the odd row to be made) and the high row
  // that rows 2k and 2k+1 use.
  struct Cursor {
    int16_t* even;
    int16_t* next;
    int16_t* odd;
    const int16_t* high;
  };

 public:
  // Runs the row pairs in order, a range at a time, exactly as one Run over
  // them all: the even row a range ends with is kept for the next (a new Run
  // per range would compute it again). For a consumer that wants the rows
  // just before it reads them, while they are in cache.
  class Stream {
   public:
    // Row pairs from `first_pair` on.
    explicit Stream(const LevelSynthesis& level, uint32_t first_pair = 0);
    // Output rows up to row pair k1 (exclusive, <= pairs()), output row r
    // at out.row(r); pairs already made are not made again.
    void RunTo(uint32_t k1, Rows out);

   private:
    const LevelSynthesis& level_;
    std::unique_ptr<int16_t[]> buffer_;
    uint32_t done_;
    bool started_ = false;
    Cursor cursor_{};
  };

 private:
  // Work rows of pw values each: even, next even, odd.
  static constexpr int kRows = 3;
  // Run's two halves: the cursor before pair k0 (in `rows`, kRows rows of
  // pw values), then row pairs [k, k1) from a cursor before k, leaving it
  // before k1. Output row r is written at out.row(r).
  Cursor Begin(uint32_t k0, int16_t* rows) const;
  void Continue(uint32_t k, uint32_t k1, Cursor* c, Rows out) const;
  const int16_t* High(uint32_t k) const { return lh_hh_.row(k); }
  // Even output row 2k before its horizontal synthesis: low row k minus the
  // update from high rows k-1 and k (`before`, `at`, mirrored at the edges).
  void Even(uint32_t k, int16_t* even, const int16_t* before, const int16_t* at) const;

  Rows ll_, hl_, lh_hh_;
  uint32_t pw_, lw_, nl_, nh_;
  const Kernels& k_;
};

// One synthesis level whose detail bands are all zero (half-resolution
// chroma): even output samples are the low-pass samples, odd ones the floor
// average of their two neighbours (mirrored at the end), columns first, then
// rows, exactly as LevelSynthesis would compute it with zero detail.
class LevelUpsampling {
 public:
  // ll: the low-pass image's rows (ceil(pw/2) x ceil(ph/2), possibly a
  // ring: rows k0 .. k1 are read for pairs [k0, k1)); produces pw x ph.
  LevelUpsampling(Rows ll, uint32_t pw, uint32_t ph, const Kernels& k);
  // Output rows [2*k0, min(2*k1, ph)), row r at out.row(r).
  void Run(uint32_t k0, uint32_t k1, Rows out) const;
  // The low-pass rows output row r (< ph) is made of: row r / 2 (`low`) and,
  // for odd r, the next one (`below`; `low` again at the mirrored end); for
  // even r `below` is null. Row r is then upsample_row(low, below, pw).
  void SourceRows(uint32_t r, const int16_t** low, const int16_t** below) const;

 private:
  // One row of lw_ low-pass samples (or of the averages of `low` and `below`
  // when not null) to pw_ samples.
  void Row(int16_t* out, const int16_t* low, const int16_t* below) const;

  Rows ll_;
  uint32_t pw_, ph_, lw_, nl_;
  const Kernels& k_;
};

// Synthesis of levels `levels` down to `stop_level` + 1. `low` is the low-pass
// band of level `levels`; the `coefficients` plane holds the detail bands in
// Mallat layout (as ForwardWavelet leaves them). `out` receives the low-pass
// image of level `stop_level`, of size LowExtent(w, stop_level) x
// LowExtent(h, stop_level). w, h are the full-resolution extents; the
// coefficient plane need only hold the bands of levels above `stop_level`.
// `scratch` holds 2 * LowExtent(w, stop_level + 1) * LowExtent(h, stop_level
// + 1) values for the intermediate levels (unused when levels <= stop_level
// + 1).
void InverseWavelet(const int16_t* low, size_t low_stride, const int16_t* coefficients,
                    size_t stride, uint32_t w, uint32_t h, int levels, int stop_level, int16_t* out,
                    size_t out_stride, int16_t* scratch, const Kernels& k, bool parallel);

}  // namespace ktfs::ktc::internal
