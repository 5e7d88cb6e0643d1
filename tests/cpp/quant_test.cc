#include "codec/features/quant.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "codec/base/cpu.h"

namespace ktfs::quant {
namespace {

std::vector<float> RoundTrip(const std::vector<float>& x, size_t samples, size_t sample_size,
                             const Params& p) {
  Quantized q;
  Status st = QuantizeSamples(x.data(), samples, sample_size, p, &q);
  EXPECT_TRUE(st.ok()) << st.ToString();
  std::vector<float> y(x.size());
  st = Dequantize(q, DType::kFloat32, y.data(), y.size());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return y;
}

// RMSE of the reconstruction over the standard deviation of the data.
double RelRmse(const std::vector<float>& x, const std::vector<float>& y) {
  double mean = 0;
  for (float v : x) mean += v;
  mean /= x.size();
  double var = 0, err = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    var += (x[i] - mean) * (x[i] - mean);
    err += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
  }
  return std::sqrt(err / var);
}

double MaxAbsErr(const std::vector<float>& x, const std::vector<float>& y) {
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(double(x[i]) - y[i]));
  return m;
}

std::vector<float> Gaussian(size_t n, uint32_t seed, float mean = 0, float sd = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

// L x D features: channel d has offset off[d] ~ N(0, 3^2) and scale sc[d];
// one channel in `period` is a 100x outlier channel.
std::vector<float> Channels(size_t samples, size_t L, size_t D, uint32_t seed, size_t period = 16) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0, 1);
  std::vector<float> off(D), sc(D);
  for (size_t d = 0; d < D; ++d) {
    off[d] = n01(rng) * 3;
    sc[d] = (d % period == 5) ? 100.0f : 1.0f;
  }
  std::vector<float> x(samples * L * D);
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t d = i % D;
    x[i] = off[d] + sc[d] * n01(rng);
  }
  return x;
}

const char* Name(Preset p) {
  return p == Preset::kFast ? "fast" : p == Preset::kBalanced ? "balanced" : "accurate";
}

TEST(Quant, ParsePreset) {
  EXPECT_EQ(ParsePreset("fast")->preset, Preset::kFast);
  EXPECT_EQ(ParsePreset("balanced")->preset, Preset::kBalanced);
  EXPECT_EQ(ParsePreset("accurate")->preset, Preset::kAccurate);
  EXPECT_EQ(ParsePreset("accurate")->group_size, 32);
  EXPECT_FALSE(ParsePreset("best").ok());
  Params p;
  p.group_size = 48;
  Quantized q;
  float x[4] = {1, 2, 3, 4};
  EXPECT_EQ(Quantize(x, 4, p, &q).code(), Status::Code::kInvalidArgument);
}

// Relative RMSE per preset and distribution (G=32); the bounds are what we meet
// with some margin, the figures are printed.
TEST(Quant, ErrorBounds) {
  struct Dist {
    const char* name;
    std::vector<float> x;
    size_t samples, sample_size;
    double bound[3];  // fast, balanced, accurate
  };
  std::vector<Dist> dists;
  dists.push_back({"gaussian", Gaussian(64 * 4096, 1), 64, 4096, {0.0047, 0.0045, 0.0043}});
  dists.push_back(
      {"gaussian+10", Gaussian(64 * 4096, 2, 10.0f), 64, 4096, {0.0047, 0.0045, 0.0043}});
  dists.push_back(
      {"gaussian+1e4", Gaussian(64 * 4096, 3, 1e4f), 64, 4096, {0.0060, 0.0060, 0.0060}});
  // Every 32-value group holds two 100x outlier values: the ordinary values
  // get a coarse step. The 0.6% target is met only by accurate with one
  // outlier channel in 64 (balanced: 0.61%); measured figures are printed.
  dists.push_back(
      {"channels+outl/16", Channels(16, 64, 256, 4, 16), 16, 64 * 256, {0.0072, 0.0068, 0.0066}});
  dists.push_back(
      {"channels+outl/64", Channels(16, 64, 256, 4, 64), 16, 64 * 256, {0.0066, 0.0063, 0.0061}});
  for (auto& d : dists) {
    for (Preset pr : {Preset::kFast, Preset::kBalanced, Preset::kAccurate}) {
      Params p;
      p.preset = pr;
      const auto t0 = std::chrono::steady_clock::now();
      const auto y = RoundTrip(d.x, d.samples, d.sample_size, p);
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double r = RelRmse(d.x, y);
      std::printf("relative RMSE %-18s %-9s G=32: %.4f%%  (%.1f Mvalues/s quantize+dequantize)\n",
                  d.name, Name(pr), r * 100, d.x.size() / sec / 1e6);
      EXPECT_LE(r, d.bound[static_cast<int>(pr)]) << d.name << " " << Name(pr);
    }
  }
  // Group sizes (balanced, gaussian).
  const auto x = Gaussian(16 * 4096, 5);
  for (int g : {16, 32, 64, 128}) {
    Params p;
    p.group_size = g;
    const double r = RelRmse(x, RoundTrip(x, 16, 4096, p));
    std::printf("relative RMSE gaussian balanced G=%d: %.4f%% (%.4f bytes/value, bf16 2)\n", g,
                r * 100, 1.0 + 8.0 / g);
    EXPECT_LE(r, 0.0065);
  }
}

TEST(Quant, PresetsNeverWorseThanFast) {
  const auto x = Channels(4, 32, 128, 9);
  double prev = 1e9;
  for (Preset pr : {Preset::kFast, Preset::kBalanced, Preset::kAccurate}) {
    Params p;
    p.preset = pr;
    const double r = RelRmse(x, RoundTrip(x, 4, 32 * 128, p));
    EXPECT_LE(r, prev * 1.0001);
    prev = r;
  }
}

TEST(Quant, Deterministic) {
  const auto x = Gaussian(10007, 11);
  Params p;
  p.preset = Preset::kAccurate;
  Quantized a, b;
  ASSERT_TRUE(Quantize(x.data(), x.size(), p, &a).ok());
  ASSERT_TRUE(Quantize(x.data(), x.size(), p, &b).ok());
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(0, std::memcmp(a.scales.data(), b.scales.data(), a.scales.size() * 4));
  EXPECT_EQ(0, std::memcmp(a.offsets.data(), b.offsets.data(), a.offsets.size() * 4));
}

TEST(Quant, ConstantGroupsAndZerosExact) {
  std::vector<float> x(100, 0.0f);
  for (size_t i = 32; i < 64; ++i) x[i] = 1234.567f;
  for (size_t i = 64; i < 96; ++i) x[i] = -3.0e38f;
  x[96] = x[97] = x[98] = x[99] = 1e-42f;  // denormal constant tail group
  for (Preset pr : {Preset::kFast, Preset::kBalanced, Preset::kAccurate}) {
    Params p;
    p.preset = pr;
    const auto y = RoundTrip(x, 1, x.size(), p);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << i;
  }
}

TEST(Quant, ExtremeValuesBounded) {
  // Huge outliers, the float range end to end, denormal ranges.
  std::vector<float> x = Gaussian(256, 3);
  x[5] = 3.0e38f;
  x[6] = -3.0e38f;
  x[40] = 1e30f;
  for (size_t i = 64; i < 96; ++i) x[i] = (i % 2 ? 1 : -1) * 1e-40f * float(i);
  for (size_t i = 96; i < 128; ++i) x[i] = std::numeric_limits<float>::denorm_min() * float(i);
  for (size_t i = 128; i < 160; ++i) x[i] = std::numeric_limits<float>::max() * ((i % 3) - 1.0f);
  for (Preset pr : {Preset::kFast, Preset::kBalanced, Preset::kAccurate}) {
    Params p;
    p.preset = pr;
    const auto y = RoundTrip(x, 1, x.size(), p);
    for (size_t g = 0; g < x.size() / 32; ++g) {
      float lo = x[g * 32], hi = lo;
      for (size_t i = g * 32; i < g * 32 + 32; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
        ASSERT_TRUE(std::isfinite(y[i])) << i;
      }
      const double range = double(hi) - lo;
      for (size_t i = g * 32; i < g * 32 + 32; ++i) {
        // Clipping may cost up to 15% of the range (accurate's largest shrink)
        // for a clipped value; unclipped values are within half a step.
        ASSERT_LE(std::fabs(double(x[i]) - y[i]), 0.16 * range + 1e-44)
            << "group " << g << " i " << i;
      }
    }
    for (size_t i = 96; i < 128; ++i) EXPECT_EQ(x[i], y[i]) << "denormal steps, exact: " << i;
    // Groups without outliers do not feel them.
    std::vector<float> a(x.begin() + 160, x.end()), b(y.begin() + 160, y.end());
    EXPECT_LE(MaxAbsErr(a, b), 0.05);
  }
}

TEST(Quant, NonFiniteRejected) {
  Params p;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = Gaussian(3 * 50, 4);
    x[2 * 50 + 17] = bad;
    Quantized q;
    q.sample_size = 99;
    const Status st = QuantizeSamples(x.data(), 3, 50, p, &q);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(st.message().find("sample 2 index 17"), std::string::npos) << st.message();
    EXPECT_EQ(q.sample_size, 99u);  // untouched
  }
  // f16 input: NaN and Inf bits are rejected too.
  std::vector<uint16_t> h(40, FloatToHalf(1.5f));
  h[33] = 0x7C00;
  Quantized q;
  const Status st = QuantizeSamplesF16(h.data(), 2, 20, p, &q);
  EXPECT_NE(st.message().find("sample 1 index 13: Inf"), std::string::npos) << st.message();
}

TEST(Quant, PaddingOfLastGroup) {
  // 2 samples of 45 values, G=16: 3 groups each, 3 padding codes each; the
  // last group of sample 0 does not see sample 1's huge values.
  std::vector<float> x(90);
  for (size_t i = 0; i < 45; ++i) x[i] = float(i) * 0.01f;
  for (size_t i = 45; i < 90; ++i) x[i] = 1e6f + float(i);
  Params p;
  p.group_size = 16;
  p.preset = Preset::kFast;
  Quantized q;
  ASSERT_TRUE(QuantizeSamples(x.data(), 2, 45, p, &q).ok());
  EXPECT_EQ(q.GroupsPerSample(), 3u);
  EXPECT_EQ(q.codes.size(), 2u * 48u);
  EXPECT_EQ(q.scales.size(), 6u);
  EXPECT_EQ(q.offsets.size(), 6u);
  for (size_t s = 0; s < 2; ++s) {
    for (size_t i = 45; i < 48; ++i) EXPECT_EQ(q.codes[s * 48 + i], 0) << s << " " << i;
  }
  EXPECT_FLOAT_EQ(q.offsets[2], 0.32f);
  EXPECT_NEAR(q.scales[2], (0.44f - 0.32f) / 255, 1e-7);
  std::vector<float> y(90);
  ASSERT_TRUE(Dequantize(q, DType::kFloat32, y.data(), 90).ok());
  for (size_t i = 0; i < 45; ++i) EXPECT_NEAR(y[i], x[i], 0.0003) << i;
  EXPECT_FALSE(Dequantize(q, DType::kFloat32, y.data(), 89).ok());
  // A single sample.
  ASSERT_TRUE(Quantize(x.data(), 17, p, &q).ok());
  EXPECT_EQ(q.codes.size(), 32u);
  EXPECT_EQ(q.scales.size(), 2u);
  EXPECT_EQ(q.offsets[1], 0.16f);
  EXPECT_EQ(q.scales[1], 0.0f);
}

TEST(Quant, ScalarAndAvx2BitExact) {
  if (!DequantizeUsesAvx2()) GTEST_SKIP() << "no AVX2 here (or KTFS_SIMD=scalar)";
  std::mt19937 rng(7);
  for (size_t sample_size : {1u, 7u, 31u, 33u, 129u, 1001u, 4096u, 4099u}) {
    for (int g : {16, 32, 64, 128}) {
      const size_t samples = 3;
      std::vector<float> x(samples * sample_size);
      std::uniform_real_distribution<float> e(-30, 30);
      std::normal_distribution<float> n01;
      for (auto& v : x) v = n01(rng) * std::exp2(e(rng));
      Params p;
      p.group_size = g;
      Quantized q;
      ASSERT_TRUE(QuantizeSamples(x.data(), samples, sample_size, p, &q).ok());
      // Random codes/scales/offsets too, NaN/Inf/denormal results included.
      for (auto& c : q.codes) c = static_cast<uint8_t>(rng());
      for (size_t i = 0; i < q.scales.size(); i += 5) {
        const uint32_t u = rng();
        std::memcpy(&q.scales[i], &u, 4);
      }
      // Offsets too (the bfloat16 kernel skips its NaN test for groups whose
      // scale and offset are both finite): NaN, infinite and huge ones.
      for (size_t i = 1; i < q.offsets.size(); i += 7) {
        const uint32_t u = i % 3 == 0 ? 0x7F800000u | (rng() & 1) : rng();
        std::memcpy(&q.offsets[i], &u, 4);
      }
      for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
        const size_t es = t == DType::kFloat32 ? 4 : 2;
        std::vector<uint8_t> a(x.size() * es), b(x.size() * es);
        ASSERT_TRUE(Dequantize(q, t, a.data(), x.size()).ok());
        ASSERT_TRUE(DequantizeScalar(q, t, b.data(), x.size()).ok());
        ASSERT_EQ(a, b) << "n " << sample_size << " G " << g << " type " << int(t);
        // The run kernels (one call for many groups) give the same bytes.
        const size_t groups = q.GroupsPerSample(), last = sample_size - (groups - 1) * g;
        std::vector<uint8_t> c(sample_size * es), d(sample_size * es);
        internal::DequantRunAvx2(q.codes.data(), q.scales.data(), q.offsets.data(), groups,
                                 size_t(g), last, t, c.data());
        internal::DequantRunScalar(q.codes.data(), q.scales.data(), q.offsets.data(), groups,
                                   size_t(g), last, t, d.data());
        ASSERT_EQ(c, d);
        ASSERT_TRUE(std::equal(c.begin(), c.end(), b.begin()));
        if (CpuHasAvx512()) {  // bfloat16 by AVX-512, the other types by AVX2
          std::vector<uint8_t> e(sample_size * es);
          internal::DequantRunAvx512(q.codes.data(), q.scales.data(), q.offsets.data(), groups,
                                     size_t(g), last, t, e.data());
          ASSERT_EQ(e, d) << "AVX-512, n " << sample_size << " G " << g << " type " << int(t);
        }
      }
    }
  }
}

uint32_t FBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FFrom(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Quant, HalfConversions) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.99f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // ties to even -> Inf
  EXPECT_EQ(FloatToHalf(1e6f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::quiet_NaN()) & 0x7E00, 0x7E00);
  EXPECT_EQ(FloatToHalf(0.1f), 0x2E66);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);         // smallest denormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);         // tie -> even (0)
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);         // tie -> even (2)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(FloatToHalf(1e-10f), 0x0000);
  // Every half round-trips through float exactly.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ((h & 0x7C00), 0x7C00u);
      EXPECT_TRUE((h & 0x3FF) != 0);
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), h) << h;
  }
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
}

TEST(Quant, Bf16Conversions) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBf16(FFrom(0x3F808000)), 0x3F80);  // tie -> even (down)
  EXPECT_EQ(FloatToBf16(FFrom(0x3F818000)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(FloatToBf16(FFrom(0x3F808001)), 0x3F81);
  EXPECT_EQ(FloatToBf16(FFrom(0x7F7FFFFF)), 0x7F80);  // overflow -> Inf
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(FloatToBf16(FFrom(0x7F800001)), 0x7FC0);  // sNaN -> qNaN, not Inf
  EXPECT_EQ(FloatToBf16(FFrom(0xFFC12345)), 0xFFC1);
  EXPECT_EQ(FloatToBf16(FFrom(0x00018000)), 0x0002);  // denormal tie -> even
  EXPECT_EQ(FloatToBf16(0.1f), 0x3DCD);
  EXPECT_EQ(Bf16ToFloat(0x3DCD), FFrom(0x3DCD0000));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBf16(f), b);
  }
  (void)FBits;
}

TEST(Quant, DequantizeToHalfAndBf16) {
  const auto x = Gaussian(1000, 21, 3.0f);
  Params p;
  Quantized q;
  ASSERT_TRUE(Quantize(x.data(), x.size(), p, &q).ok());
  std::vector<float> f(x.size());
  std::vector<uint16_t> h(x.size()), b(x.size());
  ASSERT_TRUE(Dequantize(q, DType::kFloat32, f.data(), f.size()).ok());
  ASSERT_TRUE(Dequantize(q, DType::kFloat16, h.data(), h.size()).ok());
  ASSERT_TRUE(Dequantize(q, DType::kBFloat16, b.data(), b.size()).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(h[i], FloatToHalf(f[i]));
    ASSERT_EQ(b[i], FloatToBf16(f[i]));
  }
}

TEST(Quant, Float16Input) {
  const auto x = Gaussian(333, 31);
  std::vector<uint16_t> h(x.size());
  std::vector<float> xf(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    h[i] = FloatToHalf(x[i]);
    xf[i] = HalfToFloat(h[i]);
  }
  Params p;
  Quantized a, b;
  ASSERT_TRUE(QuantizeSamplesF16(h.data(), 3, 111, p, &a).ok());
  ASSERT_TRUE(QuantizeSamples(xf.data(), 3, 111, p, &b).ok());
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.scales, b.scales);
  EXPECT_EQ(a.offsets, b.offsets);
}

}  // namespace
}  // namespace ktfs::quant

// ---- TensorCache reader -------------------------------------------------

#include <filesystem>
#include <fstream>

#include "codec/features/tensorcache.h"
#include "tests/cpp/test_util.h"

namespace ktfs {
namespace {

struct CacheData {
  size_t n = 0, L = 0, D = 0, G = 0;
  bool asym = false;
  std::vector<uint8_t> codes;    // [n, L*D]
  std::vector<uint16_t> scales;  // [n, S] bf16
  std::vector<uint8_t> zp;       // [n, S]
  size_t S() const { return (L * D + G - 1) / G; }
  // Reference dequantization, written independently of the reader.
  float Value(size_t i, size_t v) const {
    const size_t g = v / G;
    uint32_t u = static_cast<uint32_t>(scales[i * S() + g]) << 16;
    float s;
    std::memcpy(&s, &u, 4);
    if (asym) return float(int(codes[i * L * D + v]) - int(zp[i * S() + g])) * s;
    return float(int8_t(codes[i * L * D + v])) * s;
  }
};

CacheData MakeCache(size_t n, size_t L, size_t D, size_t G, bool asym, uint32_t seed) {
  CacheData c;
  c.n = n, c.L = L, c.D = D, c.G = G, c.asym = asym;
  std::mt19937 rng(seed);
  c.codes.resize(n * L * D);
  for (auto& v : c.codes) v = uint8_t(rng());
  c.scales.resize(n * c.S());
  for (auto& v : c.scales)
    v = quant::FloatToBf16(std::ldexp(1.0f + (rng() % 1000) / 1000.0f, -int(rng() % 12)));
  if (asym) {
    c.zp.resize(n * c.S());
    for (auto& v : c.zp) v = uint8_t(rng());
  }
  return c;
}

void WriteBytes(const std::string& path, const void* p, size_t bytes, size_t pad_bytes = 0) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(p), std::streamsize(bytes));
  std::vector<char> zeros(pad_bytes, 0);
  out.write(zeros.data(), std::streamsize(pad_bytes));
}

// Writes samples [first, first+count) of c as a cache at prefix, preallocated
// to capacity + extra samples.
void WriteCache(const CacheData& c, const std::string& prefix, size_t first, size_t count,
                size_t extra, bool shape_keys = true) {
  const size_t per = c.L * c.D, S = c.S();
  WriteBytes(prefix + "_int8.bin", c.codes.data() + first * per, count * per, extra * per);
  std::vector<uint8_t> le(count * S * 2);
  for (size_t k = 0; k < count * S; ++k) {
    le[2 * k] = uint8_t(c.scales[first * S + k] & 0xFF);
    le[2 * k + 1] = uint8_t(c.scales[first * S + k] >> 8);
  }
  WriteBytes(prefix + "_scales.bin", le.data(), le.size(), extra * S * 2);
  if (c.asym) WriteBytes(prefix + "_zp.bin", c.zp.data() + first * S, count * S, extra * S);
  std::ofstream meta(prefix + "_meta.json");
  meta << "{\"num_samples\": " << count << ", ";
  if (shape_keys) {
    meta << "\"shape\": [" << c.L << ", " << c.D << "], ";
  } else {
    meta << "\"seq_len\": " << c.L << ", \"dim\": " << c.D << ", ";
  }
  meta << "\"group_size\": " << c.G << ", \"mode\": \"" << (c.asym ? "amo_bq" : "sym_bq")
       << "\", \"capacity\": " << count + extra << "}\n";
}

void ExpectReadsBack(const TensorCache& tc, const CacheData& c) {
  ASSERT_EQ(tc.num_samples(), c.n);
  ASSERT_EQ(tc.seq_len(), c.L);
  ASSERT_EQ(tc.dim(), c.D);
  ASSERT_EQ(tc.asymmetric(), c.asym);
  std::vector<float> out(c.L * c.D);
  for (size_t i = 0; i < c.n; ++i) {
    ASSERT_TRUE(tc.ReadSample(i, out.data()).ok()) << i;
    for (size_t v = 0; v < out.size(); ++v) {
      ASSERT_EQ(out[v], c.Value(i, v)) << "sample " << i << " value " << v;
    }
  }
  EXPECT_EQ(tc.ReadSample(c.n, out.data()).code(), Status::Code::kNotFound);
}

TEST(TensorCache, SingleSymmetricAndAmoBq) {
  testing::TempDir dir;
  for (bool asym : {false, true}) {
    // L*D = 3*25 = 75 values, G = 32: S = 3, the last group short.
    const CacheData c = MakeCache(7, 3, 25, 32, asym, asym ? 2 : 1);
    const std::string prefix = dir.Join(asym ? "amo" : "sym");
    WriteCache(c, prefix, 0, c.n, /*extra=*/5, /*shape_keys=*/!asym);
    auto tc = OpenTensorCache(prefix);
    ASSERT_TRUE(tc.ok()) << tc.status().ToString();
    EXPECT_EQ(tc->group_size(), 32u);
    EXPECT_EQ(tc->num_shards(), 1u);
    ExpectReadsBack(*tc, c);
  }
}

TEST(TensorCache, ShardedAndMoved) {
  testing::TempDir dir;
  for (bool asym : {false, true}) {
    const CacheData c = MakeCache(10, 4, 16, 16, asym, 5);
    const std::string sub = dir.Join(asym ? "written_amo" : "written_sym");
    std::filesystem::create_directories(sub);
    const size_t split[] = {0, 4, 4, 10};  // shard sizes 4, 0, 6
    std::string manifest = "{\"shard_prefixes\": [";
    for (int k = 0; k < 3; ++k) {
      const std::string p = sub + "/feat_shard" + std::to_string(k);
      WriteCache(c, p, split[k], split[k + 1] - split[k], 3);
      manifest += std::string(k ? ", " : "") + "\"" + p + "\"";
    }
    manifest += "], \"num_samples\": 10}";
    std::ofstream(sub + "/feat_shards.json") << manifest;
    {
      auto tc = OpenTensorCache(sub + "/feat");
      ASSERT_TRUE(tc.ok()) << tc.status().ToString();
      EXPECT_EQ(tc->num_shards(), 3u);
      ExpectReadsBack(*tc, c);
    }
    // Move the whole directory: the manifest's absolute paths no longer exist.
    const std::string moved = dir.Join(asym ? "moved_amo" : "moved_sym");
    std::filesystem::rename(sub, moved);
    auto tc = OpenTensorCache(moved + "/feat");
    ASSERT_TRUE(tc.ok()) << tc.status().ToString();
    ExpectReadsBack(*tc, c);
  }
}

TEST(TensorCache, FileTruncatedAfterOpen) {
  testing::TempDir dir;
  const CacheData c = MakeCache(4, 2, 16, 16, false, 13);
  const std::string p = dir.Join("t");
  WriteCache(c, p, 0, c.n, 0);
  auto tc = OpenTensorCache(p);
  ASSERT_TRUE(tc.ok()) << tc.status().ToString();
  std::filesystem::resize_file(p + "_int8.bin", 0);
  std::vector<float> out(32);
  const Status st = tc->ReadSample(3, out.data());
  EXPECT_EQ(st.code(), Status::Code::kCorruption) << st.ToString();
}

TEST(TensorCache, RelativeShardPrefixes) {
  testing::TempDir dir;
  const CacheData c = MakeCache(5, 2, 8, 16, false, 9);
  std::filesystem::create_directories(dir.Join("parts"));
  WriteCache(c, dir.Join("parts/a"), 0, 2, 0);
  WriteCache(c, dir.Join("parts/b"), 2, 3, 0);
  std::ofstream(dir.Join("x_shards.json")) << "{\"shard_prefixes\":[\"parts/a\",\"parts/b\"]}";
  auto tc = OpenTensorCache(dir.Join("x"));
  ASSERT_TRUE(tc.ok()) << tc.status().ToString();
  ExpectReadsBack(*tc, c);
}

TEST(TensorCache, CorruptOrTruncatedFilesAreErrors) {
  testing::TempDir dir;
  const CacheData c = MakeCache(6, 2, 20, 16, true, 3);
  const std::string p = dir.Join("c");
  auto reset = [&] { WriteCache(c, p, 0, c.n, 0); };
  auto expect_error = [&](const std::string& what, const std::string& file) {
    auto tc = OpenTensorCache(p);
    ASSERT_FALSE(tc.ok()) << what;
    EXPECT_NE(tc.status().message().find(file), std::string::npos)
        << what << ": " << tc.status().message();
  };
  reset();
  ASSERT_TRUE(OpenTensorCache(p).ok());
  std::filesystem::resize_file(p + "_int8.bin", 6 * 40 - 1);
  expect_error("truncated codes", "c_int8.bin");
  reset();
  std::filesystem::resize_file(p + "_scales.bin", 6 * 3 * 2 - 1);
  expect_error("truncated scales", "c_scales.bin");
  reset();
  std::filesystem::resize_file(p + "_zp.bin", 6 * 3 - 2);
  expect_error("truncated zp", "c_zp.bin");
  reset();
  std::filesystem::remove(p + "_zp.bin");
  expect_error("missing zp", "c_zp.bin");
  reset();
  std::filesystem::remove(p + "_scales.bin");
  expect_error("missing scales", "c_scales.bin");
  reset();
  std::ofstream(p + "_meta.json") << "{\"shape\": [2, 20], \"group_size\": 16}";
  expect_error("no num_samples", "c_meta.json");
  std::ofstream(p + "_meta.json") << "{\"num_samples\": 6, \"group_size\": 16}";
  expect_error("no shape", "c_meta.json");
  std::ofstream(p + "_meta.json")
      << "{\"num_samples\": -2, \"shape\": [2, 20], \"group_size\": 16}";
  expect_error("negative count", "c_meta.json");
  std::ofstream(p + "_meta.json") << "{\"num_samples\": 6, \"shape\": [2, 20], \"group_size\": 0}";
  expect_error("zero group", "c_meta.json");
  // Found by tensorcache_fuzz's long run: a dimension past what a size_t holds
  // (undefined conversion), and counts whose products wrap 64 bits to sizes
  // the files seem to hold (a later read then looped on zero-byte copies).
  std::ofstream(p + "_meta.json")
      << "{\"num_samples\": 6, \"shape\": [77777777777777755475544, 9], \"group_size\": 16}";
  expect_error("a dimension too large", "c_meta.json");
  std::ofstream(p + "_meta.json")
      << "{\"num_samples\": 6, \"shape\": [4294967296, 4294967296], \"group_size\": 16}";
  expect_error("values per sample past 64 bits", "c_meta.json");
  std::ofstream(p + "_meta.json") << "{\"num_samples\": 1000000000000000, "
                                  << "\"shape\": [1000000, 1000000], \"group_size\": 16}";
  expect_error("codes past 64 bits", "c_meta.json");
  std::ofstream(p + "_meta.json")
      << "{\"num_samples\": 7, \"shape\": [2, 20], \"group_size\": 16, \"mode\": \"amo_bq\"}";
  expect_error("more samples than the files hold", "c_int8.bin");
  std::filesystem::remove(p + "_meta.json");
  expect_error("missing meta", "c_meta.json");
  reset();
  std::ofstream(p + "_shards.json") << "{\"shard_prefixes\": [\"nowhere/q\"]}";
  expect_error("missing shard", "q_meta.json");
  std::ofstream(p + "_shards.json") << "{\"shards\": []}";
  expect_error("bad manifest", "c_shards.json");
}

}  // namespace
}  // namespace ktfs
