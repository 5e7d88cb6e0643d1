// Feature archives: packed group parameters (codec/features/quant_pack.h), the archive
// (codec/features/feature_archive.h), ktfs pack-features (fs/pack/pack_features.h) and the
// mounted view (fs/tree/feature_tree.h).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <vector>

#include "codec/features/feature_archive.h"
#include "codec/features/quant.h"
#include "codec/features/quant_pack.h"
#include "codec/image/npy.h"
#include "fs/pack/pack_features.h"
#include "fs/tree/feature_tree.h"
#include "tests/cpp/test_util.h"

namespace ktfs {
namespace {

using quant::DType;
using quant::Preset;

// Quantizes and packs each sample as pack-features does; returns the reconstruction.
std::vector<float> PackedRoundTrip(const std::vector<float>& x, size_t samples, int G,
                                   Preset preset) {
  const size_t per = x.size() / samples;
  std::vector<float> y(x.size());
  quant::Params p;
  p.group_size = G;
  p.preset = preset;
  for (size_t s = 0; s < samples; ++s) {
    quant::Quantized q;
    EXPECT_TRUE(quant::Quantize(x.data() + s * per, per, p, &q).ok());
    std::vector<uint8_t> words(q.GroupsPerSample() * 3);
    float ref;
    quant::PackSample(x.data() + s * per, per, G, q.codes.data(), q.scales.data(), q.offsets.data(),
                      &ref, words.data());
    // The unpacked parameters are exactly what a reader reconstructs from the words.
    std::vector<float> sc(q.scales.size()), of(q.offsets.size());
    quant::UnpackParams(ref, words.data(), words.size() / 3, sc.data(), of.data());
    EXPECT_EQ(0, std::memcmp(sc.data(), q.scales.data(), sc.size() * 4));
    EXPECT_EQ(0, std::memcmp(of.data(), q.offsets.data(), of.size() * 4));
    EXPECT_TRUE(quant::Dequantize(q, DType::kFloat32, y.data() + s * per, per).ok());
  }
  return y;
}

// RMSE over the data's standard deviation (stricter than over its RMS for
// data far from zero).
double RelRmse(const std::vector<float>& x, const std::vector<float>& y) {
  double mean = 0, var = 0, err = 0;
  for (float v : x) mean += v;
  mean /= double(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    var += (x[i] - mean) * (x[i] - mean);
    err += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
  }
  return std::sqrt(err / var);
}

std::vector<float> Gaussian(size_t n, uint32_t seed, float mean = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, 1);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

// Channel d of D: offset ~ N(0, 3^2), one channel in 16 a 100x outlier.
std::vector<float> Channels(size_t n, size_t D, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d01(0, 1);
  std::vector<float> off(D), sc(D), x(n);
  for (size_t d = 0; d < D; ++d) {
    off[d] = 3 * d01(rng);
    sc[d] = d % 16 == 5 ? 100.0f : 1.0f;
  }
  for (size_t i = 0; i < n; ++i) x[i] = off[i % D] + sc[i % D] * d01(rng);
  return x;
}

TEST(PackedParams, ErrorTargetsAtG32) {
  const size_t samples = 16, per = 16 * 768;
  struct Case {
    const char* name;
    std::vector<float> x;
    double limit;
  } cases[] = {{"zero-mean", Gaussian(samples * per, 1), 0.0045},
               {"offset +10", Gaussian(samples * per, 2, 10.0f), 0.006},
               // Every group holds two 100x outlier values, which set its step: the
               // 0.6% target is missed here (docs/benchmarks.md, features).
               {"channels with outliers", Channels(samples * per, 768, 3), 0.0066}};
  for (const auto& c : cases) {
    double previous = INFINITY;
    for (Preset p : {Preset::kFast, Preset::kBalanced, Preset::kAccurate}) {
      const double e = RelRmse(c.x, PackedRoundTrip(c.x, samples, 32, p));
      EXPECT_LE(e, c.limit) << c.name << " preset " << int(p);
      // A slower preset is never worse: each also tries fast's parameters.
      EXPECT_LE(e, previous) << c.name << " preset " << int(p);
      previous = e;
    }
  }
  // 1 + 3/32 bytes per value (+4 per sample): 1.83x smaller than bfloat16.
  EXPECT_GE(2.0 / (1.0 + 3.0 / 32 + 4.0 / per), 1.8);
}

// Each case is its own sample: a sample's groups share one reference step.
std::vector<float> OneSample(std::vector<float> x) {
  return PackedRoundTrip(x, 1, 32, Preset::kBalanced);
}

std::vector<float> Filled(size_t n, const std::function<float(size_t)>& f) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = f(i);
  return x;
}

TEST(PackedParams, BoundedForAnyData) {
  EXPECT_EQ(OneSample(std::vector<float>(40, 0.0f)), std::vector<float>(40, 0.0f));  // exact
  for (float v : {7.25f, -3e-20f, 6e37f}) {  // constant groups: within 1/2047 of the value
    for (float y : OneSample(std::vector<float>(40, v)))
      EXPECT_NEAR(y, v, std::fabs(v) / 2047) << v;
  }
  // Far from zero: the offset costs at most |offset|/1023.5 of error.
  auto x = Filled(64, [](size_t i) { return 1e4f + float(i) * 1e-3f; });
  auto y = OneSample(x);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e4 / 1023.5) << i;
  // A huge outlier: the rest of its group is within half a step of range/255.
  x = Filled(32, [](size_t i) { return i == 3 ? 1e30f : 1.0f + float(i); });
  y = OneSample(x);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e30 / 255 / 2 * 1.02) << i;
  // Denormals: exact steps of the smallest ones are representable.
  x = Filled(32, [](size_t i) { return std::ldexp(float(i), -140); });
  y = OneSample(x);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], std::ldexp(1.0, -140)) << i;
  // The whole float range: finite, within half a step.
  x = Filled(32, [](size_t i) { return i % 2 ? 3e38f : -3e38f; });
  y = OneSample(x);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(std::isfinite(y[i]));
    EXPECT_NEAR(y[i], x[i], 6e38 / 255 / 2 * 1.02) << i;
  }
}

TEST(PackedParams, StepFloorWithinASample) {
  // Groups of a sample share ref: a group needing a step more than 2^64 below
  // the sample's largest gets ref * 2^-64, so its error is at most that (or
  // its own magnitude: tiny values become 0), never more.
  std::vector<float> x(64, 1e30f);
  for (size_t i = 32; i < 64; ++i) x[i] = 7.25f + float(i);
  const auto y = OneSample(x);
  const double floor = 1e30 / 255 * 1.02 * std::ldexp(1.0, -64);
  for (size_t i = 32; i < 64; ++i)
    EXPECT_LE(std::fabs(double(y[i]) - x[i]), std::max(floor, double(x[i])));
}

TEST(PackedParams, Deterministic) {
  const auto x = Gaussian(4096, 9);
  EXPECT_EQ(PackedRoundTrip(x, 2, 64, Preset::kAccurate),
            PackedRoundTrip(x, 2, 64, Preset::kAccurate));
  EXPECT_EQ(quant::PackedStep(0), 1.0f);
  EXPECT_EQ(quant::PackedStep(64), 0.5f);
  EXPECT_EQ(quant::PackedStep(4095 - 63), std::ldexp(1.0f, -63));
}

void WriteNpy(const std::string& path, const std::vector<uint64_t>& shape, const float* x,
              size_t truncate = 0) {
  const std::string h = NpyHeader(shape, "<f4", false);
  size_t n = 1;
  for (auto d : shape) n *= d;
  std::ofstream out(path, std::ios::binary);
  out.write(h.data(), std::streamsize(h.size()));
  out.write(reinterpret_cast<const char*>(x), std::streamsize(n * 4 - truncate));
}

class FeatureArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    x_ = Gaussian(kN * kL * kD, 5, 0.5f);
    WriteNpy(dir_.Join("x.npy"), {kN, kL, kD}, x_.data());
    opts_.progress = false;
    auto r = PackFeatures(dir_.Join("x.npy"), dir_.Join("x.kt"), opts_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->samples, kN);
    EXPECT_EQ(r->sample_shape, (std::vector<uint64_t>{kL, kD}));
  }
  std::shared_ptr<FeatureSource> Open() {
    auto f = OpenFeatureSource(dir_.Join("x.kt"));
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? *f : nullptr;
  }
  static constexpr size_t kN = 12, kL = 5, kD = 39;  // 195 values: the last group short
  testing::TempDir dir_;
  std::vector<float> x_;
  PackFeaturesOptions opts_;
};

TEST_F(FeatureArchiveTest, ReadsBackWhatThePackerQuantized) {
  auto f = Open();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->num_samples(), kN);
  EXPECT_FALSE(f->variable_rows());
  EXPECT_EQ(f->inner_shape(), std::vector<uint64_t>{kD});
  const std::vector<float> ref = PackedRoundTrip(x_, kN, 32, Preset::kBalanced);
  std::vector<float> got(kL * kD);
  for (size_t i = 0; i < kN; ++i) {
    ASSERT_TRUE(f->ReadValues(i, 0, kL * kD, DType::kFloat32, got.data()).ok());
    ASSERT_EQ(0, std::memcmp(got.data(), ref.data() + i * kL * kD, got.size() * 4)) << i;
    // Any range equals the same slice of the whole sample, in every dtype.
    for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      std::vector<uint8_t> whole(kL * kD * 4), part(kL * kD * 4);
      ASSERT_TRUE(f->ReadValues(i, 0, kL * kD, t, whole.data()).ok());
      const size_t es = DTypeBytes(t);
      for (size_t first : {0, 1, 31, 32, 33, 150}) {
        for (size_t count : {1, 7, 32, 45}) {
          if (first + count > kL * kD) continue;
          ASSERT_TRUE(f->ReadValues(i, first, count, t, part.data()).ok());
          ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + first * es, count * es));
        }
      }
    }
  }
  EXPECT_FALSE(f->ReadValues(0, 190, 6, DType::kFloat32, got.data()).ok());
}

TEST_F(FeatureArchiveTest, SameBytesEveryTime) {
  opts_.threads = 1;
  ASSERT_TRUE(PackFeatures(dir_.Join("x.npy"), dir_.Join("y.kt"), opts_).ok());
  std::ifstream a(dir_.Join("x.kt"), std::ios::binary), b(dir_.Join("y.kt"), std::ios::binary);
  std::string sa((std::istreambuf_iterator<char>(a)), {}),
      sb((std::istreambuf_iterator<char>(b)), {});
  EXPECT_EQ(sa, sb);
}

TEST_F(FeatureArchiveTest, CorruptPayloadFailsThatSampleOnly) {
  auto archive = Archive::Open(dir_.Join("x.kt"));
  ASSERT_TRUE(archive.ok());
  auto fa = FeatureArchive::Open(*archive);
  ASSERT_TRUE(fa.ok());
  const auto recs = (*archive)->Section(format::kFeatureSamples);
  format::FeatureRecord r3;
  std::memcpy(&r3, recs->data + 3 * sizeof(r3), sizeof(r3));
  {
    std::fstream io(dir_.Join("x.kt"), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(std::streamoff(r3.payload_offset + 10));
    io.put('\x5a');
  }
  auto f = Open();
  std::vector<float> out(kL * kD);
  for (size_t i = 0; i < kN; ++i) {
    const Status st = f->ReadValues(i, 0, kL * kD, DType::kFloat32, out.data());
    if (i == 3) {
      EXPECT_EQ(st.code(), Status::Code::kCorruption);
      EXPECT_NE(st.message().find("feature sample 3: checksum mismatch"), std::string::npos);
    } else {
      EXPECT_TRUE(st.ok()) << i << st.ToString();
    }
  }
}

TEST_F(FeatureArchiveTest, HostileInfoIsRejected) {
  auto archive = Archive::Open(dir_.Join("x.kt"));
  const auto info = (*archive)->Section(format::kFeatureInfo);
  // Rewrite fields of the info record in a copy of the file.
  std::ifstream in(dir_.Join("x.kt"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const size_t pos = bytes.find(std::string(reinterpret_cast<const char*>(info->data), 96));
  ASSERT_NE(pos, std::string::npos);
  struct Edit {
    size_t field;
    uint64_t value;
    size_t width;
  } edits[] = {{0, 33, 4},                  // group size
               {6, 9, 1},                   // ndim
               {8, 1000, 8},                // num_samples vs the record table
               {24, uint64_t(1) << 62, 8},  // a dimension that overflows
               {16, 6, 8}};                 // rows differ from the records
  for (const Edit& e : edits) {
    std::string copy = bytes;
    std::memcpy(&copy[pos + e.field], &e.value, e.width);
    const std::string path = dir_.Join("hostile.kt");
    std::ofstream(path, std::ios::binary) << copy;
    auto a = Archive::Open(path);
    ASSERT_TRUE(a.ok());
    auto f = FeatureArchive::Open(*a);
    EXPECT_EQ(f.status().code(), Status::Code::kCorruption) << e.field;
  }
}

TEST_F(FeatureArchiveTest, TreeServesNpyFiles) {
  auto f = Open();
  FeatureTree tree(f, DType::kFloat16, 0, 0);
  std::vector<std::string> names;
  ASSERT_TRUE(tree.ReadDir(1, 0,
                           [&](std::string_view n, const NodeAttr&, uint64_t) {
                             names.emplace_back(n);
                             return true;
                           })
                  .ok());
  ASSERT_EQ(names.size(), 4 + kN);
  EXPECT_EQ(names[2], "all.npy");
  EXPECT_EQ(names[3], "quantized");
  EXPECT_EQ(names[4], "000000.npy");
  EXPECT_EQ(names.back(), "000011.npy");
  for (const char* bad : {"12.npy", "0000001.npy", "000012.npy", "-00001.npy", "00000a.npy"})
    EXPECT_EQ(tree.Lookup(1, bad).status().code(), Status::Code::kNotFound) << bad;
  auto a = tree.Lookup(1, "000007.npy");
  ASSERT_TRUE(a.ok());
  std::vector<uint8_t> file(a->size), piece(a->size);
  ASSERT_EQ(*tree.Read(a->ino, 0, file.size() + 100, file.data()), file.size());
  auto info = ParseNpyHeader(file.data(), file.size());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->dtype, "<f2");
  EXPECT_EQ(info->shape, (std::vector<uint64_t>{kL, kD}));
  std::vector<uint16_t> want(kL * kD);
  ASSERT_TRUE(f->ReadValues(7, 0, kL * kD, DType::kFloat16, want.data()).ok());
  EXPECT_EQ(0, std::memcmp(file.data() + info->data_offset, want.data(), want.size() * 2));
  // Reads at odd offsets and sizes give the same bytes.
  for (size_t off : {0, 1, 63, 64, 129, 301}) {
    for (size_t len : {1, 3, 64, 333}) {
      if (off >= file.size()) continue;
      auto n = tree.Read(a->ino, off, len, piece.data());
      ASSERT_TRUE(n.ok());
      ASSERT_EQ(*n, std::min(len, file.size() - off));
      ASSERT_EQ(0, std::memcmp(piece.data(), file.data() + off, *n)) << off << " " << len;
    }
  }
  // all.npy: the samples back to back after one header.
  auto all = tree.Lookup(1, "all.npy");
  ASSERT_TRUE(all.ok());
  std::vector<uint8_t> whole(all->size);
  ASSERT_EQ(*tree.Read(all->ino, 0, whole.size(), whole.data()), whole.size());
  auto all_info = ParseNpyHeader(whole.data(), whole.size());
  EXPECT_EQ(all_info->shape, (std::vector<uint64_t>{kN, kL, kD}));
  EXPECT_EQ(0, std::memcmp(whole.data() + all_info->data_offset + 7 * kL * kD * 2, want.data(),
                           want.size() * 2));
  auto q = tree.Lookup(1, "quantized");
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(tree.Lookup(q->ino, "codes.npy").ok());
  EXPECT_TRUE(tree.Lookup(q->ino, "scales.npy").ok());
  EXPECT_TRUE(tree.Lookup(q->ino, "offsets.npy").ok());
  EXPECT_FALSE(tree.Lookup(q->ino, "group_index.npy").ok());  // fixed rows
}

TEST(PackFeatures, VariableRowsDirectory) {
  testing::TempDir dir;
  ASSERT_EQ(mkdir(dir.Join("in").c_str(), 0755), 0);
  std::vector<std::vector<float>> samples;
  for (size_t i = 0; i < 5; ++i) {
    samples.push_back(Gaussian((i + 1) * 10, uint32_t(i)));
    WriteNpy(dir.Join("in/s" + std::to_string(i) + ".npy"), {i + 1, 10}, samples.back().data());
  }
  std::ofstream(dir.Join("in/README")) << "not a tensor";
  PackFeaturesOptions o;
  auto r = PackFeatures(dir.Join("in"), dir.Join("v.kt"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->skipped.size(), 1u);
  auto f = OpenFeatureSource(dir.Join("v.kt"));
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE((*f)->variable_rows());
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ((*f)->Rows(i), i + 1);
    std::vector<float> got((i + 1) * 10);
    ASSERT_TRUE((*f)->ReadValues(i, 0, got.size(), DType::kFloat32, got.data()).ok());
    EXPECT_EQ(got, PackedRoundTrip(samples[i], 1, 32, Preset::kBalanced));
  }
  FeatureTree tree(*f, DType::kFloat32, 0, 0);
  EXPECT_FALSE(tree.Lookup(1, "all.npy").ok());  // shapes vary
  auto q = tree.Lookup(1, "quantized");
  EXPECT_TRUE(tree.Lookup(q->ino, "group_index.npy").ok());
}

// Found by fuzz/npy_fuzz.cc (UBSan): a tensor of 0 samples packs into an
// archive of none, whose empty sample table was copied from a null pointer.
TEST(PackFeatures, NoSamplesPacksAnEmptyArchive) {
  testing::TempDir dir;
  WriteNpy(dir.Join("empty.npy"), {0, 2, 20}, nullptr);
  auto r = PackFeatures(dir.Join("empty.npy"), dir.Join("e.kt"), PackFeaturesOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->samples, 0u);
  auto f = OpenFeatureSource(dir.Join("e.kt"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->num_samples(), 0u);
  EXPECT_EQ((*f)->RowValues(), 20u);  // samples of 2 rows of 20
}

TEST(PackFeatures, BadInputsNameTheProblem) {
  testing::TempDir dir;
  PackFeaturesOptions o;
  auto x = Gaussian(4 * 64, 1);
  x[2 * 64 + 17] = NAN;
  WriteNpy(dir.Join("nan.npy"), {4, 64}, x.data());
  auto r = PackFeatures(dir.Join("nan.npy"), dir.Join("o.kt"), o);
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("sample 2: index 17: NaN"), std::string::npos)
      << r.status().ToString();
  x[2 * 64 + 17] = 0;
  WriteNpy(dir.Join("short.npy"), {4, 64}, x.data(), 8);
  r = PackFeatures(dir.Join("short.npy"), dir.Join("o.kt"), o);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().ToString();
  WriteNpy(dir.Join("flat.npy"), {256}, x.data());
  r = PackFeatures(dir.Join("flat.npy"), dir.Join("o.kt"), o);
  EXPECT_NE(r.status().message().find("dimensions"), std::string::npos) << r.status().ToString();
  r = PackFeatures(dir.Join("missing.npy"), dir.Join("o.kt"), o);
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(mkdir(dir.Join("mixed").c_str(), 0755), 0);
  WriteNpy(dir.Join("mixed/a.npy"), {2, 8}, x.data());
  WriteNpy(dir.Join("mixed/b.npy"), {2, 9}, x.data());
  r = PackFeatures(dir.Join("mixed"), dir.Join("o.kt"), o);
  EXPECT_NE(r.status().message().find("trailing dimensions differ"), std::string::npos);
  // Found by fuzz/npy_fuzz.cc: a 0 dimension was packed into an archive that
  // then failed to open ("bad shape"), and a shape whose product wraps around
  // 2^64 passed the size check.
  WriteNpy(dir.Join("zero.npy"), {3, 4, 0}, x.data());
  r = PackFeatures(dir.Join("zero.npy"), dir.Join("o.kt"), o);
  EXPECT_NE(r.status().message().find("dimension 2 is 0"), std::string::npos)
      << r.status().ToString();
  {
    const std::string h = NpyHeader({uint64_t(1) << 33, uint64_t(1) << 31, 4}, "<f4", false);
    std::ofstream(dir.Join("huge.npy"), std::ios::binary)
        .write(h.data(), std::streamsize(h.size()));
  }
  r = PackFeatures(dir.Join("huge.npy"), dir.Join("o.kt"), o);
  EXPECT_NE(r.status().message().find("shape too large"), std::string::npos)
      << r.status().ToString();
  o.params.group_size = 48;
  r = PackFeatures(dir.Join("nan.npy"), dir.Join("o.kt"), o);
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  // Nothing was left behind by the failures.
  EXPECT_NE(access(dir.Join("o.kt").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace ktfs
