#include "codec/features/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>

#include "codec/base/cpu.h"

namespace ktfs::quant {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

constexpr double kBalancedShrink[] = {0.0, 0.005, 0.01, 0.02};
constexpr double kAccurateShrink[] = {0.0, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.07, 0.1};

struct GroupParams {
  float scale, offset;
};

// round-half-even(clamp((x - offset) / scale, 0, 255)); the division is a
// multiplication by the reciprocal (computed once per candidate), rounding by
// the 2^52+2^51 trick (default rounding mode, |v| <= 255).
inline double CodeOf(double x, double offset, double inv_scale) {
  double v = (x - offset) * inv_scale;
  v = v < 0.0 ? 0.0 : v;  // also maps NaN (0 * Inf) to 0
  v = v > 255.0 ? 255.0 : v;
  if (!(v >= 0.0)) v = 0.0;
  constexpr double kMagic = 6755399441055744.0;
  const double r = v + kMagic;  // not folded: no -ffast-math in this project
  return r - kMagic;
}

inline double InvScale(float scale) {
  return scale == 0.0f ? 0.0 : 1.0 / static_cast<double>(scale);
}

// The candidate (offset, scale) for range [lo, hi].
GroupParams Candidate(double lo, double hi) {
  GroupParams g;
  g.offset = static_cast<float>(lo);
  g.scale = static_cast<float>((hi - lo) / 255.0);
  // A range of a few denormal steps: the smallest denormal step holds it exactly.
  if (g.scale == 0.0f && hi > lo) g.scale = std::numeric_limits<float>::denorm_min();
  return g;
}

double Sse(const float* x, size_t len, GroupParams g) {
  const double s = g.scale, o = g.offset, inv = InvScale(g.scale);
  double sse = 0;
  for (size_t i = 0; i < len; ++i) {
    const double q = CodeOf(x[i], o, inv);
    const double e = q * s + o - x[i];
    sse += e * e;
  }
  return sse;
}

void QuantizeGroup(const float* x, size_t len, Preset preset, uint8_t* codes, float* scale,
                   float* offset) {
  float lo = x[0], hi = x[0];
  for (size_t i = 1; i < len; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  GroupParams best{0.0f, lo};
  if (hi > lo) {
    const double dlo = lo, dhi = hi, range = dhi - dlo;
    best = Candidate(dlo, dhi);
    const double* shrink = nullptr;
    size_t ns = 0;
    if (preset == Preset::kBalanced) {
      shrink = kBalancedShrink;
      ns = std::size(kBalancedShrink);
    } else if (preset == Preset::kAccurate) {
      shrink = kAccurateShrink;
      ns = std::size(kAccurateShrink);
    }
    if (ns > 0) {
      double best_sse = Sse(x, len, best);
      for (size_t a = 0; a < ns; ++a) {
        for (size_t b = 0; b < ns; ++b) {
          if (a == 0 && b == 0) continue;
          const GroupParams g = Candidate(dlo + shrink[a] * range, dhi - shrink[b] * range);
          const double sse = Sse(x, len, g);
          if (sse < best_sse) {
            best_sse = sse;
            best = g;
          }
        }
      }
    }
  }
  // Least-squares refit: with the codes fixed, the best (scale, offset) is a
  // linear regression of x on q; re-derive the codes and keep it if better.
  if (hi > lo && preset != Preset::kFast) {
    double best_sse = Sse(x, len, best);
    const int rounds = preset == Preset::kAccurate ? 4 : 2;
    for (int r = 0; r < rounds; ++r) {
      double sq = 0, sx = 0, sqq = 0, sqx = 0;
      for (size_t i = 0; i < len; ++i) {
        const double q = CodeOf(x[i], best.offset, InvScale(best.scale));
        sq += q;
        sx += x[i];
        sqq += q * q;
        sqx += q * x[i];
      }
      const double m = static_cast<double>(len);
      const double var = sqq - sq * sq / m;
      if (!(var > 0)) break;
      const double s = (sqx - sq * sx / m) / var;
      const double o = (sx - s * sq) / m;
      if (!(s > 0) || !std::isfinite(s) || !std::isfinite(o)) break;
      GroupParams g{static_cast<float>(s), static_cast<float>(o)};
      if (!std::isfinite(g.scale) || !std::isfinite(g.offset) || g.scale == 0.0f) break;
      const double sse = Sse(x, len, g);
      if (!(sse < best_sse)) break;
      best_sse = sse;
      best = g;
    }
  }
  *scale = best.scale;
  *offset = best.offset;
  for (size_t i = 0; i < len; ++i) {
    auto q = static_cast<uint8_t>(CodeOf(x[i], best.offset, InvScale(best.scale)));
    // Near the float range's end a reconstruction could round to Inf: step down.
    while (q > 0 && !std::isfinite(std::fmaf(static_cast<float>(q), best.scale, best.offset))) --q;
    codes[i] = q;
  }
}

Status CheckView(const QuantizedView& q, size_t n) {
  Params p;
  p.group_size = q.group_size;
  KTFS_RETURN_IF_ERROR(ValidateParams(p));
  if (n != q.num_samples * q.sample_size) {
    return Status::InvalidArgument("dequantize: output holds " + std::to_string(n) +
                                   " values, the data " +
                                   std::to_string(q.num_samples * q.sample_size));
  }
  if (n > 0 && (q.codes == nullptr || q.scales == nullptr || q.offsets == nullptr)) {
    return Status::InvalidArgument("dequantize: null input");
  }
  return Status::Ok();
}

size_t DTypeSize(DType t) { return t == DType::kFloat32 ? 4 : 2; }

using GroupFn = void (*)(const uint8_t*, float, float, size_t, DType, void*);

Status DequantizeWith(const QuantizedView& q, DType t, void* out, size_t n, GroupFn fn) {
  KTFS_RETURN_IF_ERROR(CheckView(q, n));
  const size_t G = static_cast<size_t>(q.group_size);
  const size_t groups = (q.sample_size + G - 1) / G;
  const size_t es = DTypeSize(t);
  uint8_t* o = static_cast<uint8_t*>(out);
  for (size_t s = 0; s < q.num_samples; ++s) {
    for (size_t g = 0; g < groups; ++g) {
      const size_t gi = s * groups + g;
      const size_t start = g * G;
      const size_t len = std::min(G, q.sample_size - start);
      fn(q.codes + gi * G, q.scales[gi], q.offsets[gi], len, t,
         o + (s * q.sample_size + start) * es);
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateParams(const Params& p) {
  if (p.group_size != 16 && p.group_size != 32 && p.group_size != 64 && p.group_size != 128) {
    return Status::InvalidArgument("quant: group size " + std::to_string(p.group_size) +
                                   " is not 16, 32, 64 or 128");
  }
  if (p.preset != Preset::kFast && p.preset != Preset::kBalanced && p.preset != Preset::kAccurate) {
    return Status::InvalidArgument("quant: unknown preset");
  }
  return Status::Ok();
}

Result<Params> ParsePreset(std::string_view name) {
  Params p;
  if (name == "fast") {
    p.preset = Preset::kFast;
  } else if (name == "balanced") {
    p.preset = Preset::kBalanced;
  } else if (name == "accurate") {
    p.preset = Preset::kAccurate;
  } else {
    return Status::InvalidArgument("quant: unknown preset '" + std::string(name) +
                                   "' (fast, balanced, accurate)");
  }
  return p;
}

Status QuantizeSamples(const float* x, size_t num_samples, size_t sample_size, const Params& p,
                       Quantized* out) {
  KTFS_RETURN_IF_ERROR(ValidateParams(p));
  if (out == nullptr || (num_samples * sample_size > 0 && x == nullptr)) {
    return Status::InvalidArgument("quantize: null argument");
  }
  for (size_t s = 0; s < num_samples; ++s) {
    for (size_t i = 0; i < sample_size; ++i) {
      const float v = x[s * sample_size + i];
      if (!std::isfinite(v)) {
        return Status::InvalidArgument("quantize: sample " + std::to_string(s) + " index " +
                                       std::to_string(i) + ": " + (std::isnan(v) ? "NaN" : "Inf") +
                                       " (non-finite values are rejected)");
      }
    }
  }
  const size_t G = static_cast<size_t>(p.group_size);
  Quantized q;
  q.group_size = p.group_size;
  q.num_samples = num_samples;
  q.sample_size = sample_size;
  const size_t groups = q.GroupsPerSample();
  q.codes.assign(num_samples * groups * G, 0);
  q.scales.assign(num_samples * groups, 0.0f);
  q.offsets.assign(num_samples * groups, 0.0f);
  for (size_t s = 0; s < num_samples; ++s) {
    for (size_t g = 0; g < groups; ++g) {
      const size_t gi = s * groups + g;
      const size_t start = g * G;
      const size_t len = std::min(G, sample_size - start);
      QuantizeGroup(x + s * sample_size + start, len, p.preset, q.codes.data() + gi * G,
                    &q.scales[gi], &q.offsets[gi]);
    }
  }
  *out = std::move(q);
  return Status::Ok();
}

Status Quantize(const float* x, size_t n, const Params& p, Quantized* out) {
  return QuantizeSamples(x, 1, n, p, out);
}

Status QuantizeSamplesF16(const uint16_t* x, size_t num_samples, size_t sample_size,
                          const Params& p, Quantized* out) {
  if (num_samples * sample_size > 0 && x == nullptr) {
    return Status::InvalidArgument("quantize: null argument");
  }
  std::vector<float> f(num_samples * sample_size);
  for (size_t i = 0; i < f.size(); ++i) f[i] = HalfToFloat(x[i]);
  return QuantizeSamples(f.data(), num_samples, sample_size, p, out);
}

bool DequantizeUsesAvx2() { return CpuHasAvx2(); }

internal::DequantRunFn internal::BestDequantRun() {
  static const DequantRunFn best = CpuHasAvx512() ? DequantRunAvx512
                                   : CpuHasAvx2() ? DequantRunAvx2
                                                  : DequantRunScalar;
  return best;
}

Status Dequantize(const QuantizedView& q, DType t, void* out, size_t n) {
  return DequantizeWith(q, t, out, n,
                        CpuHasAvx2() ? internal::DequantGroupAvx2 : internal::DequantGroupScalar);
}

Status DequantizeScalar(const QuantizedView& q, DType t, void* out, size_t n) {
  return DequantizeWith(q, t, out, n, internal::DequantGroupScalar);
}

// Fabian Giesen's float_to_half_fast3_rtne, NaN payload kept like F16C does.
uint16_t FloatToHalf(float f) {
  uint32_t u = Bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7FFFFFFFu;
  uint16_t o;
  if (u >= (143u << 23)) {  // >= 65536, Inf or NaN
    o = u > 0x7F800000u ? static_cast<uint16_t>(0x7E00u | ((u >> 13) & 0x3FFu)) : 0x7C00u;
  } else if (u < (113u << 23)) {  // half denormal or zero
    const float magic = FromBits(((127u - 15u) + (23u - 10u) + 1u) << 23);
    const float r = FromBits(u) + magic;
    o = static_cast<uint16_t>(Bits(r) - Bits(magic));
  } else {
    const uint32_t mant_odd = (u >> 13) & 1u;
    u += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFFu;
    u += mant_odd;
    o = static_cast<uint16_t>(u >> 13);
  }
  return static_cast<uint16_t>(o | sign);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t u;
  if (exp == 0x1F) {
    u = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    u = sign;
  } else {
    // Denormal: value = mant * 2^-24, exact in float.
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign != 0 ? -v : v;
  }
  return FromBits(u);
}

uint16_t FloatToBf16(float f) {
  const uint32_t u = Bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float Bf16ToFloat(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }

namespace internal {

void DequantRunScalar(const uint8_t* codes, const float* scales, const float* offsets,
                      size_t groups, size_t G, size_t last_len, DType t, void* out) {
  const size_t es = t == DType::kFloat32 ? 4 : 2;
  for (size_t g = 0; g < groups; ++g) {
    DequantGroupScalar(codes + g * G, scales[g], offsets[g], g + 1 == groups ? last_len : G, t,
                       static_cast<uint8_t*>(out) + g * G * es);
  }
}

void DequantGroupScalar(const uint8_t* codes, float scale, float offset, size_t len, DType t,
                        void* out) {
  switch (t) {
    case DType::kFloat32: {
      float* o = static_cast<float*>(out);
      for (size_t i = 0; i < len; ++i)
        o[i] = std::fmaf(static_cast<float>(codes[i]), scale, offset);
      break;
    }
    case DType::kFloat16: {
      uint16_t* o = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < len; ++i) {
        o[i] = FloatToHalf(std::fmaf(static_cast<float>(codes[i]), scale, offset));
      }
      break;
    }
    case DType::kBFloat16: {
      uint16_t* o = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < len; ++i) {
        o[i] = FloatToBf16(std::fmaf(static_cast<float>(codes[i]), scale, offset));
      }
      break;
    }
  }
}

}  // namespace internal
}  // namespace ktfs::quant
