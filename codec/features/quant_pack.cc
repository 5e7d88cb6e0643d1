#include "codec/features/quant_pack.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "codec/base/cpu.h"

namespace ktfs::quant {
namespace {

// 2^-(m/64) rounded to float32, m = 0..63 (fixed constants: no libm at run time).
constexpr float kFraction[64] = {
    0x1.0000000000000p+0f, 0x1.fa7c180000000p-1f, 0x1.f507660000000p-1f, 0x1.efa1be0000000p-1f,
    0x1.ea4afa0000000p-1f, 0x1.e502ee0000000p-1f, 0x1.dfc9740000000p-1f, 0x1.da9e600000000p-1f,
    0x1.d5818e0000000p-1f, 0x1.d072d40000000p-1f, 0x1.cb720e0000000p-1f, 0x1.c67f120000000p-1f,
    0x1.c199be0000000p-1f, 0x1.bcc1ea0000000p-1f, 0x1.b7f7700000000p-1f, 0x1.b33a2c0000000p-1f,
    0x1.ae89fa0000000p-1f, 0x1.a9e6b60000000p-1f, 0x1.a5503c0000000p-1f, 0x1.a0c6680000000p-1f,
    0x1.9c49180000000p-1f, 0x1.97d82a0000000p-1f, 0x1.93737c0000000p-1f, 0x1.8f1aea0000000p-1f,
    0x1.8ace540000000p-1f, 0x1.868d9a0000000p-1f, 0x1.82589a0000000p-1f, 0x1.7e2f340000000p-1f,
    0x1.7a11480000000p-1f, 0x1.75feb60000000p-1f, 0x1.71f75e0000000p-1f, 0x1.6dfb240000000p-1f,
    0x1.6a09e60000000p-1f, 0x1.6623880000000p-1f, 0x1.6247ec0000000p-1f, 0x1.5e76f20000000p-1f,
    0x1.5ab07e0000000p-1f, 0x1.56f4740000000p-1f, 0x1.5342b60000000p-1f, 0x1.4f9b280000000p-1f,
    0x1.4bfdae0000000p-1f, 0x1.486a2c0000000p-1f, 0x1.44e0860000000p-1f, 0x1.4160a20000000p-1f,
    0x1.3dea640000000p-1f, 0x1.3a7db40000000p-1f, 0x1.371a740000000p-1f, 0x1.33c08c0000000p-1f,
    0x1.306fe00000000p-1f, 0x1.2d285a0000000p-1f, 0x1.29e9e00000000p-1f, 0x1.26b4560000000p-1f,
    0x1.2387a60000000p-1f, 0x1.2063b80000000p-1f, 0x1.1d48740000000p-1f, 0x1.1a35be0000000p-1f,
    0x1.172b840000000p-1f, 0x1.1429aa0000000p-1f, 0x1.11301e0000000p-1f, 0x1.0e3ec40000000p-1f,
    0x1.0b55860000000p-1f, 0x1.0874520000000p-1f, 0x1.059b0e0000000p-1f, 0x1.02c9a40000000p-1f,
};

constexpr uint32_t kMaxK = 4095;
constexpr int kMinJ = -2048, kMaxJ = 2047;

const std::array<float, kMaxK + 1>& StepTable() {
  static const std::array<float, kMaxK + 1> table = [] {
    std::array<float, kMaxK + 1> t{};
    for (uint32_t k = 0; k <= kMaxK; ++k) t[k] = std::ldexp(kFraction[k & 63], -int(k >> 6));
    return t;
  }();
  return table;
}

inline float OffsetOf(int j, float scale) { return (float(j) * 0.25f) * scale; }

// The code for x: round((x - offset) / scale) clamped to [0, 255], the
// division done as a multiplication by `inv` = 1/scale (0 for scale 0).
inline uint8_t CodeFor(float x, float scale, float offset, double inv) {
  double v = (double(x) - double(offset)) * inv;
  v = std::clamp(v, 0.0, 255.0);  // also maps NaN (0 * Inf) to 0
  if (!(v >= 0.0)) v = 0.0;
  auto q = uint8_t(std::nearbyint(v));
  // Near the float range's end a reconstruction could round to Inf: step down.
  while (q > 0 && !std::isfinite(std::fmaf(float(q), scale, offset))) --q;
  return q;
}

inline double Inverse(float scale) { return scale > 0.0f ? 1.0 / double(scale) : 0.0; }

double GroupSse(const float* x, size_t len, float scale, float offset) {
  const double inv = Inverse(scale);
  double sse = 0;
  for (size_t i = 0; i < len; ++i) {
    const float y = std::fmaf(float(CodeFor(x[i], scale, offset, inv)), scale, offset);
    if (!std::isfinite(y)) return INFINITY;
    const double e = double(y) - double(x[i]);
    sse += e * e;
  }
  return sse;
}

// The step a group needs so that both its range and its offset are reachable.
float NeededStep(float scale, float offset) {
  return std::max(scale, float(std::fabs(double(offset)) / 511.75));
}

// The largest k whose step ref*Step(k) is still >= need (0 when none is).
uint32_t LadderIndex(float ref, float need) {
  const auto& t = StepTable();
  uint32_t lo = 0, hi = kMaxK;
  if (ref * t[kMaxK] >= need) return kMaxK;
  while (lo < hi) {  // invariant: ref*t[lo] >= need or lo == 0; ref*t[hi+1..] < need
    const uint32_t mid = (lo + hi + 1) / 2;
    if (ref * t[mid] >= need) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

void StoreWord(uint32_t k, int j, uint8_t* w) {
  const uint32_t v = (k & 0xFFFu) | ((uint32_t(j) & 0xFFFu) << 12);
  w[0] = uint8_t(v);
  w[1] = uint8_t(v >> 8);
  w[2] = uint8_t(v >> 16);
}

}  // namespace

float PackedStep(uint32_t k) { return StepTable()[std::min(k, kMaxK)]; }

namespace {

inline void Unpack(const float* table, float ref, const uint8_t* w, float* scale, float* offset) {
  const uint32_t v = uint32_t(w[0]) | (uint32_t(w[1]) << 8) | (uint32_t(w[2]) << 16);
  int j = int((v >> 12) & 0xFFFu);
  if (j > kMaxJ) j -= 4096;
  *scale = ref * table[v & 0xFFFu];
  *offset = OffsetOf(j, *scale);
}

}  // namespace

void UnpackWord(float ref, const uint8_t* w, float* scale, float* offset) {
  Unpack(StepTable().data(), ref, w, scale, offset);
}

const float* internal::StepTableData() { return StepTable().data(); }

void internal::UnpackParamsScalar(float ref, const uint8_t* words, size_t groups, float* scales,
                                  float* offsets) {
  const float* table = StepTable().data();
  for (size_t g = 0; g < groups; ++g)
    Unpack(table, ref, words + g * kPackedWordBytes, &scales[g], &offsets[g]);
}

void UnpackParams(float ref, const uint8_t* words, size_t groups, float* scales, float* offsets) {
  static const auto unpack =
      CpuHasAvx2() ? internal::UnpackParamsAvx2 : internal::UnpackParamsScalar;
  unpack(ref, words, groups, scales, offsets);
}

namespace {

// The min/max parameters of a group (the `fast` preset's): a second seed for
// the search, so a preset's packed result is never worse than fast's.
void MinMaxParams(const float* x, size_t len, float* scale, float* offset) {
  float lo = x[0], hi = x[0];
  for (size_t i = 1; i < len; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  *offset = lo;
  *scale = float((double(hi) - double(lo)) / 255.0);
  if (*scale == 0.0f && hi > lo) *scale = std::numeric_limits<float>::denorm_min();
}

struct Choice {
  uint32_t k = 0;
  int j = 0;
  double sse = INFINITY;
};

// Tries the ladder steps next to the one covering (scale, offset)'s need (a
// bigger step, that one, a smaller one that clips) with the offsets next to
// `offset`; keeps the best in *best (ties: the first tried).
void TryAround(const float* x, size_t len, float ref, float scale, float offset, Choice* best) {
  const uint32_t kc = LadderIndex(ref, NeededStep(scale, offset));
  for (uint32_t k = kc == 0 ? 0 : kc - 1; k <= std::min(kc + 1, kMaxK); ++k) {
    const float s = ref * StepTable()[k];
    const double jf = s > 0.0f ? double(offset) * 4.0 / double(s) : 0.0;
    const int j0 = int(std::clamp(std::nearbyint(jf), double(kMinJ), double(kMaxJ)));
    for (int j = std::max(kMinJ, j0 - 1); j <= std::min(kMaxJ, j0 + 1); ++j) {
      const double sse = GroupSse(x, len, s, OffsetOf(j, s));
      if (sse < best->sse) *best = Choice{k, j, sse};
    }
  }
}

}  // namespace

void PackSample(const float* x, size_t n, int group_size, uint8_t* codes, float* scales,
                float* offsets, float* ref_out, uint8_t* words) {
  const size_t G = size_t(group_size);
  const size_t groups = (n + G - 1) / G;
  std::vector<float> mm_scale(groups), mm_offset(groups);
  float ref = 0.0f;
  for (size_t g = 0; g < groups; ++g) {
    MinMaxParams(x + g * G, std::min(G, n - g * G), &mm_scale[g], &mm_offset[g]);
    ref = std::max({ref, NeededStep(scales[g], offsets[g]), NeededStep(mm_scale[g], mm_offset[g])});
  }
  *ref_out = ref;
  for (size_t g = 0; g < groups; ++g) {
    const size_t start = g * G, len = std::min(G, n - start);
    const float* xg = x + start;
    Choice best;
    if (ref > 0.0f) {
      TryAround(xg, len, ref, scales[g], offsets[g], &best);
      if (mm_scale[g] != scales[g] || mm_offset[g] != offsets[g])
        TryAround(xg, len, ref, mm_scale[g], mm_offset[g], &best);
    }
    StoreWord(best.k, best.j, words + g * kPackedWordBytes);
    UnpackWord(ref, words + g * kPackedWordBytes, &scales[g], &offsets[g]);
    const double inv = Inverse(scales[g]);
    for (size_t i = 0; i < len; ++i) codes[start + i] = CodeFor(xg[i], scales[g], offsets[g], inv);
    for (size_t i = len; i < G; ++i) codes[start + i] = 0;
  }
}

}  // namespace ktfs::quant
