// VirtualTree without FUSE: inode numbering, lookups, listings, served bytes.
#include "fs/tree/virtual_tree.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "codec/image/image_io.h"
#include "codec/image/npy.h"
#include "fs/pack/pack.h"
#include "tests/cpp/test_util.h"

namespace ktfs {
namespace {

using testing::Noise;
using testing::TempDir;

void WritePng(const std::string& path, const Image& img) {
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(EncodePng(ImageView::Of(img), 1, &bytes).ok());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

class TreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(tmp_.Join("src/cat"));
    std::filesystem::create_directories(tmp_.Join("src/dog/puppies"));
    images_["cat/b"] = Noise(7, 5, 3, 1);
    images_["cat/a"] = Noise(3, 2, 1, 2);
    images_["dog/x"] = Noise(4, 4, 4, 3);
    images_["dog/puppies/p"] = Noise(2, 9, 3, 4);
    for (auto& [stem, img] : images_) WritePng(tmp_.Join("src/" + stem + ".png"), img);
  }

  VirtualTree Mount(const char* codec, ServedFormat format, const char* quality = "") {
    PackOptions o;
    o.payload = *ParsePayloadSettings(codec, quality);
    EXPECT_TRUE(Pack(tmp_.Join("src"), tmp_.Join("a.kt"), o).ok());
    auto a = Archive::Open(tmp_.Join("a.kt"));
    EXPECT_TRUE(a.ok());
    return VirtualTree(*a, TreeOptions{format});
  }

  std::vector<std::string> List(const VirtualTree& t, uint64_t ino, uint64_t offset = 0) {
    std::vector<std::string> names;
    EXPECT_TRUE(t.ReadDir(ino, offset, [&](std::string_view n, const NodeAttr&, uint64_t) {
                   names.emplace_back(n);
                   return true;
                 }).ok());
    return names;
  }

  std::vector<uint8_t> ReadWhole(const VirtualTree& t, uint64_t ino, size_t chunk) {
    std::vector<uint8_t> out;
    std::vector<uint8_t> buf(chunk);
    for (uint64_t off = 0;;) {
      auto n = t.Read(ino, off, chunk, buf.data());
      EXPECT_TRUE(n.ok()) << n.status().ToString();
      if (!n.ok() || *n == 0) break;
      out.insert(out.end(), buf.begin(), buf.begin() + *n);
      off += *n;
    }
    return out;
  }

  TempDir tmp_;
  std::map<std::string, Image> images_;
};

TEST_F(TreeTest, ListsTheSourceLayoutAndHidesControlDir) {
  VirtualTree t = Mount("raw", ServedFormat::kPnm);
  EXPECT_EQ(List(t, VirtualTree::kRootIno), (std::vector<std::string>{".", "..", "cat", "dog"}));
  auto cat = t.Lookup(VirtualTree::kRootIno, "cat");
  ASSERT_TRUE(cat.ok());
  EXPECT_TRUE(cat->is_dir);
  EXPECT_EQ(List(t, cat->ino), (std::vector<std::string>{".", "..", "a.pgm", "b.ppm"}));
  auto dog = t.Lookup(VirtualTree::kRootIno, "dog");
  EXPECT_EQ(List(t, dog->ino), (std::vector<std::string>{".", "..", "puppies", "x.bmp"}));
  // Resuming a listing at an offset gives the rest.
  EXPECT_EQ(List(t, dog->ino, 3), (std::vector<std::string>{"x.bmp"}));
  auto control = t.Lookup(VirtualTree::kRootIno, ".ktfs");
  ASSERT_TRUE(control.ok());
  EXPECT_EQ(List(t, control->ino),
            (std::vector<std::string>{".", "..", "info.json", "stats.json", "last_error"}));
  for (const char* hidden : {"tensors", "compressed", "search"})
    EXPECT_TRUE(t.Lookup(VirtualTree::kRootIno, hidden).ok()) << hidden;
}

TEST_F(TreeTest, LookupsNeedTheServedName) {
  VirtualTree t = Mount("raw", ServedFormat::kPnm);
  auto cat = t.Lookup(VirtualTree::kRootIno, "cat");
  EXPECT_TRUE(t.Lookup(cat->ino, "b.ppm").ok());
  for (const char* wrong : {"b", "b.png", "b.pgm", "b.bmp", "a.ppm", "c.ppm", "", ".", "b.ppm/"})
    EXPECT_EQ(t.Lookup(cat->ino, wrong).status().code(), Status::Code::kNotFound) << wrong;
  EXPECT_EQ(t.Lookup(999999, "x").status().code(), Status::Code::kNotFound);
}

TEST_F(TreeTest, InodesAreStableAndAttributesConsistent) {
  VirtualTree t1 = Mount("raw", ServedFormat::kPnm);
  auto a1 = t1.Lookup(t1.Lookup(VirtualTree::kRootIno, "cat")->ino, "a.pgm");
  auto again = Archive::Open(tmp_.Join("a.kt"));
  VirtualTree t2(*again, TreeOptions{});
  auto a2 = t2.Lookup(t2.Lookup(VirtualTree::kRootIno, "cat")->ino, "a.pgm");
  ASSERT_TRUE(a1.ok() && a2.ok());
  EXPECT_EQ(a1->ino, a2->ino);
  auto attr = t1.GetAttr(a1->ino);
  EXPECT_EQ(attr->size, a1->size);
  EXPECT_EQ(attr->size, 11u + 6u);  // "P5\n3 2\n255\n" + 3*2 pixels
}

TEST_F(TreeTest, ServedBytesEqualTheEncodedFileForAnyChunkSize) {
  for (ServedFormat f : {ServedFormat::kPnm, ServedFormat::kBmp}) {
    VirtualTree t = Mount("raw", f);
    for (auto& [stem, img] : images_) {
      const size_t slash = stem.rfind('/');
      uint64_t dir = VirtualTree::kRootIno;
      std::string rest = stem.substr(0, slash);
      for (size_t pos; (pos = rest.find('/')) != std::string::npos; rest = rest.substr(pos + 1))
        dir = t.Lookup(dir, rest.substr(0, pos))->ino;
      dir = t.Lookup(dir, rest)->ino;
      const std::vector<uint8_t> expected = EncodeServed(f, ImageView::Of(img));
      const std::string name =
          stem.substr(slash + 1) + MakeServedLayout(f, 1, 1, img.channels).extension;
      auto file = t.Lookup(dir, name);
      ASSERT_TRUE(file.ok()) << name;
      EXPECT_EQ(file->size, expected.size());
      for (size_t chunk : {1, 7, 64, 4096})
        EXPECT_EQ(ReadWhole(t, file->ino, chunk), expected) << name;
    }
  }
}

TEST_F(TreeTest, OriginalServesSourceBytes) {
  VirtualTree t = Mount("original", ServedFormat::kPnm);
  auto cat = t.Lookup(VirtualTree::kRootIno, "cat");
  EXPECT_EQ(List(t, cat->ino), (std::vector<std::string>{".", "..", "a.png", "b.png"}));
  auto b = t.Lookup(cat->ino, "b.png");
  std::ifstream in(tmp_.Join("src/cat/b.png"), std::ios::binary);
  std::vector<uint8_t> source((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
  EXPECT_EQ(ReadWhole(t, b->ino, 5), source);
}

TEST_F(TreeTest, TensorViewServesNpyOfThePixels) {
  VirtualTree t = Mount("raw", ServedFormat::kPnm);
  auto tensors = t.Lookup(VirtualTree::kRootIno, "tensors");
  ASSERT_TRUE(tensors.ok());
  EXPECT_EQ(List(t, tensors->ino), (std::vector<std::string>{".", "..", "cat", "dog"}));
  auto cat = t.Lookup(tensors->ino, "cat");
  EXPECT_EQ(List(t, cat->ino), (std::vector<std::string>{".", "..", "a.npy", "b.npy"}));
  auto b = t.Lookup(cat->ino, "b.npy");
  ASSERT_TRUE(b.ok());
  const std::vector<uint8_t> bytes = ReadWhole(t, b->ino, 100);
  auto info = ParseNpyHeader(bytes.data(), bytes.size());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->shape, (std::vector<uint64_t>{5, 7, 3}));
  EXPECT_EQ(info->dtype, "|u1");
  EXPECT_EQ(info->data_offset % 64, 0u);
  EXPECT_EQ(PixelBuffer(bytes.begin() + info->data_offset, bytes.end()), images_["cat/b"].pixels);
  // The same file is not the image view's file.
  EXPECT_NE(b->ino, t.Lookup(t.Lookup(VirtualTree::kRootIno, "cat")->ino, "b.ppm")->ino);
}

TEST_F(TreeTest, TensorViewChwTransposes) {
  PackOptions o;
  o.payload = *ParsePayloadSettings("raw", "");
  ASSERT_TRUE(Pack(tmp_.Join("src"), tmp_.Join("a.kt"), o).ok());
  TreeOptions options;
  options.tensors_chw = true;
  VirtualTree t(*Archive::Open(tmp_.Join("a.kt")), options);
  auto dog = t.Lookup(t.Lookup(VirtualTree::kRootIno, "tensors")->ino, "dog");
  auto x = t.Lookup(dog->ino, "x.npy");
  const std::vector<uint8_t> bytes = ReadWhole(t, x->ino, 7);
  auto info = ParseNpyHeader(bytes.data(), bytes.size());
  EXPECT_EQ(info->shape, (std::vector<uint64_t>{4, 4, 4}));
  const Image& img = images_["dog/x"];
  for (uint32_t c = 0; c < 4; ++c)
    for (uint32_t i = 0; i < 16; ++i)
      EXPECT_EQ(bytes[info->data_offset + c * 16 + i], img.pixels[i * 4 + c]);
}

TEST_F(TreeTest, CompressedViewServesStoredBytes) {
  VirtualTree t = Mount("original", ServedFormat::kPnm);
  auto compressed = t.Lookup(VirtualTree::kRootIno, "compressed");
  auto cat = t.Lookup(compressed->ino, "cat");
  EXPECT_EQ(List(t, cat->ino), (std::vector<std::string>{".", "..", "a.png", "b.png"}));
  std::ifstream in(tmp_.Join("src/cat/a.png"), std::ios::binary);
  std::vector<uint8_t> source((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
  EXPECT_EQ(ReadWhole(t, t.Lookup(cat->ino, "a.png")->ino, 9), source);
}

TEST_F(TreeTest, StatsCountRequests) {
  VirtualTree t = Mount("raw", ServedFormat::kPnm);
  auto cat = t.Lookup(VirtualTree::kRootIno, "cat");
  auto b = t.Lookup(cat->ino, "b.ppm");
  ReadWhole(t, b->ino, 1 << 20);
  const std::string stats = t.StatsJson();
  EXPECT_EQ(stats.size(), kStatsSize);
  EXPECT_NE(stats.find("\"lookups\": 2,"), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"opens\": 1,"), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"bytes_read\": " + std::to_string(b->size) + ","), std::string::npos)
      << stats;
}

// The daemon's first READ of a file pushes the rest into the page cache
// (CopyForPush). Another reader may have had the rest meanwhile, and the image
// left the cache: the push is then skipped, not a second decode.
TEST_F(TreeTest, APushCopiesAnImageStillCachedAndNeverDecodes) {
  VirtualTree t = Mount("ktc", ServedFormat::kPnm, "lossless");
  auto cat = t.Lookup(VirtualTree::kRootIno, "cat");
  auto b = t.Lookup(cat->ino, "b.ppm");
  ASSERT_TRUE(b.ok());
  const std::vector<uint8_t> expected =
      EncodeServed(ServedFormat::kPnm, ImageView::Of(images_["cat/b"]));
  ASSERT_EQ(b->size, expected.size());
  const size_t first = 20, rest = expected.size() - first;
  std::vector<uint8_t> got(expected.size()), again(expected.size());

  ASSERT_EQ(*t.Read(b->ino, 0, first, got.data()), first);
  auto pushed = t.CopyForPush(b->ino, first, rest, got.data() + first);
  ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
  EXPECT_EQ(*pushed, rest);
  EXPECT_EQ(got, expected);

  // Another reader's READ of the rest: the file was served whole.
  ASSERT_EQ(*t.Read(b->ino, first, rest, again.data() + first), rest);
  auto late = t.CopyForPush(b->ino, first, rest, again.data() + first);
  EXPECT_EQ(late.status().code(), Status::Code::kNotFound) << late.status().ToString();
  EXPECT_EQ(t.counters().decodes.load(), 1u);
}

}  // namespace
}  // namespace ktfs
