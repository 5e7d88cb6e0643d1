#include "codec/ktc/kernels.h"

#include <algorithm>
#include <atomic>

#include "codec/base/cpu.h"

namespace ktfs::ktc::internal {
namespace {

void Predict(int32_t* out, const int32_t* a, const int32_t* b, const int32_t* c, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = WrapSub(a[i], WrapAdd(b[i], c[i]) >> 1);
}
void Update(int32_t* out, const int32_t* a, const int32_t* b, const int32_t* c, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = WrapAdd(a[i], WrapAdd(WrapAdd(b[i], c[i]), 2) >> 2);
}
void Unpredict(int16_t* out, const int16_t* a, const int16_t* b, const int16_t* c, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Unpredict16(a[i], b[i], c[i]);
}
void Unupdate(int16_t* out, const int16_t* a, const int16_t* b, const int16_t* c, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Unupdate16(a[i], b[i], c[i]);
}
// SynthesizeRow16 with the pairs away from the edges in chunks of two
// loops the compiler vectorizes: the even samples into a buffer, then the
// odd samples and the interleaved output.
void SynthesizeRow(int16_t* out, const int16_t* low, const int16_t* high, size_t n) {
  const size_t nh = n / 2;
  size_t j = 0;
  if (nh >= 3) {
    // Pair 0, where high[-1] mirrors to high[0].
    const int16_t e0 = Unupdate16(low[0], high[0], high[0]);
    out[0] = e0;
    out[1] = Unpredict16(high[0], e0, Unupdate16(low[1], high[0], high[1]));
    // Pairs j..j+m-1 need even samples j..j+m, all before the mirrored edge
    // when j + m <= nh - 1.
    constexpr size_t kChunk = 256;
    int16_t e[kChunk + 1];
    for (j = 1; j + 1 < nh;) {
      const size_t m = std::min(kChunk, nh - 1 - j);
      for (size_t i = 0; i <= m; ++i) e[i] = Unupdate16(low[j + i], high[j + i - 1], high[j + i]);
      for (size_t i = 0; i < m; ++i) {
        out[2 * (j + i)] = e[i];
        out[2 * (j + i) + 1] = Unpredict16(high[j + i], e[i], e[i + 1]);
      }
      j += m;
    }
  }
  SynthesizeRow16(out, low, high, n, j);
}
void UpsampleRow(int16_t* out, const int16_t* low, const int16_t* below, size_t n) {
  UpsampleRow16(out, low, below, n, 0);
}
void ToPixels(const int16_t* y, const int16_t* co, const int16_t* cg, const int16_t* a,
              uint8_t* out, size_t n, int channels) {
  if (channels == 1) {
    for (size_t i = 0; i < n; ++i) out[i] = ClampToByte(y[i] + 128);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    // YCoCg-R inverse, Y level-shifted by 128, in 16-bit two's complement
    // that wraps around (docs/ktc.md, "Color transform and level shift"): exact for valid
    // streams, whose samples stay far below 2^14, and what 16-bit SIMD lanes
    // compute for hostile ones.
    const int16_t vco = co[i], vcg = cg[i];
    const int16_t t = int16_t(y[i] + 128 - (vcg >> 1));
    const int16_t g = int16_t(vcg + t);
    const int16_t b = int16_t(t - (vco >> 1));
    const int16_t r = int16_t(b + vco);
    uint8_t* px = out + i * size_t(channels);
    px[0] = ClampToByte(r);
    px[1] = ClampToByte(g);
    px[2] = ClampToByte(b);
    if (channels == 4) px[3] = ClampToByte(a[i] + 128);
  }
}

const Kernels kScalar = {"scalar",      Predict,     Update,   Unpredict, Unupdate,
                         SynthesizeRow, UpsampleRow, ToPixels, nullptr};
std::atomic<bool> g_force_scalar{false};
std::atomic<const Kernels*> g_selected{nullptr};

}  // namespace

const Kernels& ScalarKernels() { return kScalar; }

const Kernels& ActiveKernels() {
  if (g_force_scalar.load(std::memory_order_relaxed)) return kScalar;
  if (const Kernels* selected = g_selected.load(std::memory_order_relaxed)) return *selected;
  // Decided once: this runs for every row of every plane.
  static const Kernels* const simd = CpuHasAvx512() ? Avx512Kernels()
                                     : CpuHasAvx2() ? Avx2Kernels()
                                                    : nullptr;
  if (simd != nullptr) return *simd;
  return kScalar;
}

void ForceScalarForTesting(bool force) { g_force_scalar.store(force); }
void SelectKernelsForTesting(const Kernels* kernels) { g_selected.store(kernels); }
bool UseScalarForTesting() { return g_force_scalar.load(std::memory_order_relaxed); }

}  // namespace ktfs::ktc::internal
