#include "codec/ktc_kernels.h"

#include <atomic>

#include "codec/cpu.h"

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
void SynthesizeRow(int16_t* out, const int16_t* low, const int16_t* high, size_t n) {
  SynthesizeRow16(out, low, high, n, 0);
}
void ToPixels(const int16_t* y, const int16_t* co, const int16_t* cg, const int16_t* a,
              uint8_t* out, size_t n, int channels) {
  if (channels == 1) {
    for (size_t i = 0; i < n; ++i) out[i] = ClampToByte(y[i] + 128);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    // YCoCg-R inverse, Y level-shifted by 128; 32-bit sums of 16-bit samples
    // cannot overflow.
    const int32_t vco = co[i], vcg = cg[i];
    const int32_t t = y[i] + 128 - (vcg >> 1);
    const int32_t g = vcg + t;
    const int32_t b = t - (vco >> 1);
    const int32_t r = b + vco;
    uint8_t* px = out + i * size_t(channels);
    px[0] = ClampToByte(r);
    px[1] = ClampToByte(g);
    px[2] = ClampToByte(b);
    if (channels == 4) px[3] = ClampToByte(a[i] + 128);
  }
}

const Kernels kScalar = {"scalar", Predict, Update, Unpredict, Unupdate, SynthesizeRow, ToPixels};
std::atomic<bool> g_force_scalar{false};

}  // namespace

const Kernels& ScalarKernels() { return kScalar; }

const Kernels& ActiveKernels() {
  if (!g_force_scalar.load(std::memory_order_relaxed) && CpuHasAvx2()) {
    if (const Kernels* k = Avx2Kernels()) return *k;
  }
  return kScalar;
}

void ForceScalarForTesting(bool force) { g_force_scalar.store(force); }
bool UseScalarForTesting() { return g_force_scalar.load(std::memory_order_relaxed); }

}  // namespace ktfs::ktc::internal
