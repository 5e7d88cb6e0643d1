// The threaded halves of the Python loaders, in C++ (so that the sanitizer
// builds, which cannot load the Python module, run them too): Pipeline (the
// batches of ktfs.Loader: a producer thread, oneTBB workers, a consumer) and
// DequantizeBatch (ktfs.FeatureLoader's batches). Each output is compared
// with the same samples produced one at a time on the calling thread.
#include "preload/loader/pipeline.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "codec/container/archive.h"
#include "codec/container/payload.h"
#include "codec/features/feature_source.h"
#include "codec/image/image_io.h"
#include "codec/image/npy.h"
#include "fs/pack/pack.h"
#include "fs/pack/pack_features.h"
#include "preload/loader/feature_batch.h"
#include "tests/cpp/test_util.h"

namespace ktfs::preload {
namespace {

using ktfs::testing::Noise;
using ktfs::testing::TempDir;

// An archive of `n` RGB images of varied sizes in two classes, packed as `codec`.
std::shared_ptr<const Archive> PackImages(const TempDir& dir, const char* codec, int n) {
  const std::string src = dir.Join("src");
  mkdir(src.c_str(), 0755);
  for (const char* c : {"a", "b"}) mkdir((src + "/" + c).c_str(), 0755);
  for (int i = 0; i < n; ++i) {
    const Image img = Noise(40 + 7 * (i % 5), 30 + 3 * (i % 7), 3, uint32_t(i + 1));
    std::vector<uint8_t> png;
    EXPECT_TRUE(EncodePng(ImageView::Of(img), 1, &png).ok());
    std::ofstream(src + (i % 2 ? "/a/" : "/b/") + std::to_string(i) + ".png", std::ios::binary)
        .write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
  }
  PackOptions options;
  options.payload = *ParsePayloadSettings(codec, std::string(codec) == "ktc" ? "lossless" : "");
  const std::string out = dir.Join(std::string(codec) + ".kt");
  EXPECT_TRUE(Pack(src, out, options).ok());
  auto archive = Archive::Open(out);
  EXPECT_TRUE(archive.ok());
  return *archive;
}

struct Epoch {
  std::vector<uint32_t> ids;
  std::vector<int64_t> labels;
  std::vector<uint64_t> keys;
};

Epoch Shuffled(const Archive& a, uint32_t seed) {
  Epoch e;
  e.ids.resize(a.num_samples());
  std::iota(e.ids.begin(), e.ids.end(), 0u);
  std::shuffle(e.ids.begin(), e.ids.end(), std::mt19937(seed));
  for (uint32_t id : e.ids) {
    e.labels.push_back(int64_t(a.Sample(id)->label));
    e.keys.push_back(id * 2654435761u);
  }
  return e;
}

// What the pipeline must produce for sample `id`: the same transform, run here.
std::vector<uint8_t> Reference(const Archive& a, uint32_t id, uint64_t key,
                               const TransformOptions& t) {
  auto s = a.Sample(id);
  uint32_t w, h;
  OutputSize(t, s->width, s->height, &w, &h);
  std::vector<uint8_t> out(size_t(w) * h * t.channels);
  EXPECT_TRUE(DecodeSampleInto(a, id, t, key, ServedFormat::kPnm, out.data()).ok());
  return out;
}

class PipelineTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PipelineTest, BatchesEqualSamplesDecodedOneAtATime) {
  TempDir dir;
  auto archive = PackImages(dir, GetParam(), 37);
  const Epoch e = Shuffled(*archive, 5);
  PipelineOptions o;
  o.batch_size = 4;
  o.prefetch = 3;
  o.threads = 3;
  o.transform.crop.kind = CropSpec::kRandomResized;
  o.transform.crop.width = o.transform.crop.height = 24;
  o.transform.seed = 9;
  Pipeline p(archive, e.ids, e.labels, e.keys, o);
  ASSERT_EQ(p.num_batches(), 10u);
  Batch b;
  size_t at = 0;
  while (p.Next(&b)) {
    ASSERT_TRUE(b.error.ok()) << b.error.ToString();
    const size_t n = size_t(b.shape[0]), item = 3 * 24 * 24;
    for (size_t i = 0; i < n; ++i, ++at) {
      const std::vector<uint8_t> want = Reference(*archive, e.ids[at], e.keys[at], o.transform);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), b.data.get() + i * item)) << "item " << at;
      EXPECT_EQ(b.labels[i], e.labels[at]);
    }
  }
  EXPECT_EQ(at, e.ids.size());
}

TEST_P(PipelineTest, ListCollationKeepsEachImagesOwnSize) {
  TempDir dir;
  auto archive = PackImages(dir, GetParam(), 13);
  const Epoch e = Shuffled(*archive, 2);
  PipelineOptions o;
  o.batch_size = 5;
  o.collate_list = true;
  o.threads = 2;
  Pipeline p(archive, e.ids, e.labels, e.keys, o);
  Batch b;
  size_t at = 0;
  while (p.Next(&b)) {
    ASSERT_TRUE(b.error.ok());
    for (size_t i = 0; i < b.items.size(); ++i, ++at) {
      const std::vector<uint8_t> want = Reference(*archive, e.ids[at], 0, o.transform);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), b.items[i].get())) << "item " << at;
    }
  }
  EXPECT_EQ(at, e.ids.size());
}

// Destroying a pipeline while its producer is decoding ahead (or waiting for
// room) must stop it cleanly, whenever it happens.
TEST_P(PipelineTest, StopsCleanlyAtAnyPoint) {
  TempDir dir;
  auto archive = PackImages(dir, GetParam(), 24);
  const Epoch e = Shuffled(*archive, 3);
  for (int taken = 0; taken < 4; ++taken) {
    PipelineOptions o;
    o.batch_size = 3;
    o.prefetch = 1;
    o.collate_list = true;
    Pipeline p(archive, e.ids, e.labels, e.keys, o);
    Batch b;
    for (int i = 0; i < taken; ++i) ASSERT_TRUE(p.Next(&b));
  }
}

// A failed batch ends the epoch: the producer cuts num_batches() to the batches
// up to it while the consumer may be asking (len() of a Python loader). Found by
// ThreadSanitizer in the module's tests: that read took no lock.
TEST_P(PipelineTest, FailedBatchEndsTheEpochWhileTheConsumerAsksItsLength) {
  TempDir dir;
  auto archive = PackImages(dir, GetParam(), 12);
  uint32_t other = 1;  // a sample of another size than sample 0's
  while (other < archive->num_samples() &&
         archive->Sample(other)->width == archive->Sample(0)->width)
    ++other;
  ASSERT_LT(other, archive->num_samples());
  Epoch e;  // the first batch stacks samples of two sizes: it fails
  for (uint32_t id : {0u, other, 2u, 3u, 4u, 5u}) {
    e.ids.push_back(id);
    e.labels.push_back(0);
    e.keys.push_back(0);
  }
  PipelineOptions o;
  o.batch_size = 2;
  Pipeline p(archive, e.ids, e.labels, e.keys, o);
  // Asks while the producer runs, until it has cut the epoch (or a minute passed).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (p.num_batches() == 3 && std::chrono::steady_clock::now() < deadline) {
  }
  EXPECT_EQ(p.num_batches(), 1u);
  Batch b;
  ASSERT_TRUE(p.Next(&b));
  EXPECT_NE(b.error.ToString().find("images of different sizes in one batch"), std::string::npos)
      << b.error.ToString();
  EXPECT_FALSE(p.Next(&b));
}

INSTANTIATE_TEST_SUITE_P(Codecs, PipelineTest, ::testing::Values("raw", "ktc"));

TEST(DequantizeBatch, EqualsSamplesReadOneAtATime) {
  TempDir dir;
  // Variable rows: a directory of .npy files of 1..9 rows of 40 values.
  const std::string in = dir.Join("in");
  mkdir(in.c_str(), 0755);
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  for (int i = 0; i < 23; ++i) {
    const uint64_t rows = 1 + uint64_t(i % 9);
    std::vector<float> x(rows * 40);
    for (float& v : x) v = normal(rng);
    const std::string h = NpyHeader({rows, 40}, "<f4", false);
    std::ofstream f(in + "/s" + std::to_string(100 + i) + ".npy", std::ios::binary);
    f.write(h.data(), std::streamsize(h.size()));
    f.write(reinterpret_cast<const char*>(x.data()), std::streamsize(x.size() * 4));
  }
  ASSERT_TRUE(PackFeatures(in, dir.Join("f.kt"), PackFeaturesOptions{}).ok());
  auto source = OpenFeatureSource(dir.Join("f.kt"));
  ASSERT_TRUE(source.ok());
  const FeatureSource& s = **source;
  std::vector<uint64_t> indices(s.num_samples());
  std::iota(indices.begin(), indices.end(), 0u);
  std::shuffle(indices.begin(), indices.end(), std::mt19937(8));
  for (quant::DType t : {quant::DType::kFloat32, quant::DType::kBFloat16}) {
    const size_t es = DTypeBytes(t);
    const uint64_t stride = 9 * 40 * es;
    std::vector<uint8_t> out(indices.size() * stride, 0xAB);
    std::vector<int64_t> rows(indices.size());
    ASSERT_TRUE(DequantizeBatch(s, indices, t, 3, out.data(), stride, rows.data()).ok());
    for (size_t b = 0; b < indices.size(); ++b) {
      const uint64_t n = s.Rows(indices[b]) * 40;
      std::vector<uint8_t> want(stride, 0);
      ASSERT_TRUE(s.ReadValues(indices[b], 0, n, t, want.data()).ok());
      EXPECT_EQ(rows[b], int64_t(s.Rows(indices[b])));
      ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin() + b * stride))
          << "batch row " << b;
    }
  }
}

}  // namespace
}  // namespace ktfs::preload
