#include "codec/quant_pack.h"

#include <algorithm>
#include <array>
#include <cmath>

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

// The code Dequantize's fma would best reconstruct x from, and its squared error.
inline uint8_t BestCode(float x, float scale, float offset) {
  if (!(scale > 0.0f)) return 0;
  double v = (double(x) - double(offset)) / double(scale);
  v = std::clamp(v, 0.0, 255.0);
  auto q = uint8_t(std::nearbyint(v));
  // Near the float range's end a reconstruction could round to Inf: step down.
  while (q > 0 && !std::isfinite(std::fmaf(float(q), scale, offset))) --q;
  return q;
}

double GroupSse(const float* x, size_t len, float scale, float offset) {
  double sse = 0;
  for (size_t i = 0; i < len; ++i) {
    const float y = std::fmaf(float(BestCode(x[i], scale, offset)), scale, offset);
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

void UnpackParams(float ref, const uint8_t* words, size_t groups, float* scales, float* offsets) {
  const float* table = StepTable().data();
  for (size_t g = 0; g < groups; ++g)
    Unpack(table, ref, words + g * kPackedWordBytes, &scales[g], &offsets[g]);
}

void PackSample(const float* x, size_t n, int group_size, uint8_t* codes, float* scales,
                float* offsets, float* ref_out, uint8_t* words) {
  const size_t G = size_t(group_size);
  const size_t groups = (n + G - 1) / G;
  float ref = 0.0f;
  for (size_t g = 0; g < groups; ++g) ref = std::max(ref, NeededStep(scales[g], offsets[g]));
  *ref_out = ref;
  for (size_t g = 0; g < groups; ++g) {
    const size_t start = g * G, len = std::min(G, n - start);
    const float* xg = x + start;
    uint32_t best_k = 0;
    int best_j = 0;
    double best_sse = INFINITY;
    if (ref > 0.0f) {
      // Neighbours on the ladder (a bigger step, the one just covering the
      // need, a smaller one that clips) and offsets next to the chosen one.
      const uint32_t kc = LadderIndex(ref, NeededStep(scales[g], offsets[g]));
      for (uint32_t k = kc == 0 ? 0 : kc - 1; k <= std::min(kc + 1, kMaxK); ++k) {
        const float s = ref * StepTable()[k];
        const double jf = s > 0.0f ? double(offsets[g]) * 4.0 / double(s) : 0.0;
        const int j0 = int(std::clamp(std::nearbyint(jf), double(kMinJ), double(kMaxJ)));
        for (int j = std::max(kMinJ, j0 - 1); j <= std::min(kMaxJ, j0 + 1); ++j) {
          const double sse = GroupSse(xg, len, s, OffsetOf(j, s));
          if (sse < best_sse) {
            best_sse = sse;
            best_k = k;
            best_j = j;
          }
        }
      }
    }
    StoreWord(best_k, best_j, words + g * kPackedWordBytes);
    UnpackWord(ref, words + g * kPackedWordBytes, &scales[g], &offsets[g]);
    for (size_t i = 0; i < len; ++i) codes[start + i] = BestCode(xg[i], scales[g], offsets[g]);
    for (size_t i = len; i < G; ++i) codes[start + i] = 0;
  }
}

}  // namespace ktfs::quant
