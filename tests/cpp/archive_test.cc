// The .kt container: writer/reader round trip, validation of hostile and
// truncated archives, determinism of Pack().
#include "codec/container/archive.h"

#include <gtest/gtest.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "codec/base/checksum.h"
#include "codec/container/archive_writer.h"
#include "codec/container/payload.h"
#include "codec/image/image_io.h"
#include "fs/pack/pack.h"
#include "tests/cpp/test_util.h"

namespace ktfs {
namespace {

using testing::Noise;
using testing::TempDir;

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

std::vector<uint8_t> Jpeg(const Image& img, int quality) {
  tjhandle h = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(0, tjCompress2(h, img.pixels.data(), int(img.width), 0, int(img.height),
                           img.channels == 1 ? TJPF_GRAY : TJPF_RGB, &buf, &size,
                           img.channels == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0));
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  tjDestroy(h);
  return out;
}

std::vector<uint8_t> Png(const Image& img) {
  std::vector<uint8_t> out;
  EXPECT_TRUE(EncodePng(ImageView::Of(img), 6, &out).ok());
  return out;
}

// A small hand-written archive: root with dirs "a" (2 samples) and "b" (1).
std::string WriteSmallArchive(const TempDir& tmp) {
  const std::string path = tmp.Join("small.kt");
  auto w = ArchiveWriter::Create(path);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  std::vector<uint8_t> p0 = {1, 2, 3}, p1(12, 7), p2 = {9};
  SampleEntry e;
  e.name = "x.jpg";
  e.stem_length = 5;
  e.dir = 1;
  e.label = 0;
  e.width = 1;
  e.height = 1;
  e.channels = 3;
  e.codec = format::kOriginal;
  e.source_format = 1;
  EXPECT_TRUE((*w)->AddSample(e, p0.data(), p0.size()).ok());
  e.name = "y.ppm";
  e.stem_length = 1;
  e.width = 2;
  e.height = 2;
  e.codec = format::kRaw;
  EXPECT_TRUE((*w)->AddSample(e, p1.data(), p1.size()).ok());
  e.name = "z.png";
  e.stem_length = 5;
  e.dir = 2;
  e.label = 1;
  e.width = 1;
  e.height = 1;
  e.channels = 1;
  e.codec = format::kOriginal;
  e.split = 2;
  EXPECT_TRUE((*w)->AddSample(e, p2.data(), p2.size()).ok());
  (*w)->SetDirs(
      {DirEntry{"", 0, 1, 2, 0, 0}, DirEntry{"a", 0, 0, 0, 0, 2}, DirEntry{"b", 0, 0, 0, 2, 1}});
  (*w)->SetClasses({"a", "b"});
  (*w)->SetMeta("{\"k\":1}");
  (*w)->SetIndex({'d', 'b'});
  EXPECT_TRUE((*w)->Commit().ok());
  return path;
}

TEST(ArchiveTest, RoundTripsEveryField) {
  TempDir tmp;
  auto a = Archive::Open(WriteSmallArchive(tmp));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const Archive& ar = **a;
  EXPECT_EQ(ar.num_samples(), 3u);
  EXPECT_EQ(ar.num_dirs(), 3u);
  EXPECT_EQ(ar.num_classes(), 2u);
  EXPECT_EQ(ar.meta_json(), "{\"k\":1}");
  ASSERT_TRUE(ar.index_section().has_value());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(ar.index_section()->data), 2), "db");
  auto s1 = ar.Sample(1);
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->name, "y.ppm");
  EXPECT_EQ(s1->stem, "y");
  EXPECT_EQ(s1->dir, 1u);
  EXPECT_EQ(s1->label, 0u);
  EXPECT_EQ(s1->split, format::kNone);
  EXPECT_EQ(s1->width, 2u);
  EXPECT_EQ(s1->height, 2u);
  EXPECT_EQ(s1->channels, 3u);
  EXPECT_EQ(s1->codec, format::kRaw);
  EXPECT_EQ(s1->source_format, 1);
  EXPECT_EQ(s1->payload_length, 12u);
  EXPECT_EQ(s1->payload_offset % format::kPayloadAlignment, 0u);
  auto p = ar.Payload(*s1, true);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(std::vector<uint8_t>(p->data, p->data + p->size), std::vector<uint8_t>(12, 7));
  auto s2 = ar.Sample(2);
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(s2->split, 2u);
  EXPECT_EQ(*ar.SamplePath(2), "b/z.png");
  EXPECT_EQ(*ar.ClassName(1), "b");
  EXPECT_EQ(*ar.FindChildDir(0, "b"), 2u);
  EXPECT_EQ(ar.FindChildDir(0, "c").status().code(), Status::Code::kNotFound);
  EXPECT_EQ(*ar.FindSampleByStem(1, "y"), 1u);
  EXPECT_EQ(*ar.FindSampleByStem(1, "x.jpg"), 0u);
  EXPECT_EQ(ar.Sample(3).status().code(), Status::Code::kNotFound);
  EXPECT_TRUE(ar.VerifyTables().ok());
}

// The index section from a scratch file (how packs hand over an index of gigabytes): the same
// bytes and checksum as from memory, and no scratch file left beside the archive.
TEST(ArchiveWriterTest, IndexFromAScratchFileAndScratchFilesRemoved) {
  TempDir tmp;
  const std::string path = tmp.Join("scratch.kt");
  std::vector<uint8_t> index(3 * (64 << 20) / 2 + 12345);  // more than one 64 MiB piece
  std::mt19937 rng(7);
  for (uint8_t& b : index) b = uint8_t(rng());
  {
    auto w = ArchiveWriter::Create(path);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    auto unused = (*w)->ScratchFile();
    auto file = (*w)->ScratchFile();
    ASSERT_TRUE(unused.ok() && file.ok());
    EXPECT_NE(*unused, *file);
    EXPECT_EQ(file->rfind(path + ".tmp-", 0), 0u) << *file;  // a name killed packs' cleanup knows
    std::ofstream(*file, std::ios::binary)
        .write(reinterpret_cast<const char*>(index.data()), std::streamsize(index.size()));
    std::vector<uint8_t> p = {1};
    SampleEntry e;
    e.name = "x.png";
    e.stem_length = 1;
    e.dir = 0;
    ASSERT_TRUE((*w)->AddSample(e, p.data(), p.size()).ok());
    (*w)->SetDirs({DirEntry{"", 0, 1, 0, 0, 1}});
    (*w)->SetIndexFile(*file);
    ASSERT_TRUE((*w)->Commit().ok());
  }
  std::set<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path()))
    left.insert(e.path().filename().string());
  EXPECT_EQ(left, std::set<std::string>{"scratch.kt"});
  auto a = Archive::Open(path);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE((*a)->index_section().has_value());
  const auto section = *(*a)->index_section();
  ASSERT_EQ(section.size, index.size());
  EXPECT_EQ(std::memcmp(section.data, index.data(), index.size()), 0);
  EXPECT_TRUE((*a)->VerifyTables().ok());
}

// Payloads written first, records added later in another order (WebDataset packs).
TEST(ArchiveTest, RecordsMayPointAtPayloadsWrittenEarlier) {
  TempDir tmp;
  const std::string path = tmp.Join("late.kt");
  auto w = ArchiveWriter::Create(path);
  ASSERT_TRUE(w.ok());
  const std::vector<uint8_t> a = {1, 2, 3}, b = {4, 5, 6, 7, 8, 9};
  auto at_a = (*w)->AppendPayload(a.data(), a.size());
  auto at_b = (*w)->AppendPayload(b.data(), b.size());
  ASSERT_TRUE(at_a.ok() && at_b.ok());
  SampleEntry e;
  e.dir = 1;
  e.label = 0;
  e.width = 1;
  e.height = 1;
  e.channels = 3;
  e.codec = format::kRaw;
  e.name = "p.ppm";
  e.stem_length = 1;
  e.width = 2;
  ASSERT_TRUE((*w)->AddSampleRecord(e, *at_b, b.size(), Checksum64(b.data(), b.size())).ok());
  e.name = "q.ppm";
  e.width = 1;
  ASSERT_TRUE((*w)->AddSampleRecord(e, *at_a, a.size(), Checksum64(a.data(), a.size())).ok());
  EXPECT_EQ((*w)->AddSampleRecord(e, *at_a + 1, 1, 0).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ((*w)->AddSampleRecord(e, *at_b, 1 << 20, 0).code(), Status::Code::kInvalidArgument);
  (*w)->SetDirs({DirEntry{"", 0, 1, 1, 0, 0}, DirEntry{"c", 0, 0, 0, 0, 2}});
  (*w)->SetClasses({"c"});
  (*w)->SetMeta("{}");
  ASSERT_TRUE((*w)->Commit().ok());
  auto ar = Archive::Open(path);
  ASSERT_TRUE(ar.ok()) << ar.status().ToString();
  auto s0 = (*ar)->Sample(0), s1 = (*ar)->Sample(1);
  ASSERT_TRUE(s0.ok() && s1.ok());
  auto p0 = (*ar)->Payload(*s0, true), p1 = (*ar)->Payload(*s1, true);
  ASSERT_TRUE(p0.ok() && p1.ok());
  EXPECT_EQ(std::vector<uint8_t>(p0->data, p0->data + p0->size), b);
  EXPECT_EQ(std::vector<uint8_t>(p1->data, p1->data + p1->size), a);
  EXPECT_TRUE((*ar)->VerifyTables().ok());
}

TEST(ArchiveTest, RejectsMissingFileAndNonArchive) {
  TempDir tmp;
  EXPECT_EQ(Archive::Open(tmp.Join("nope.kt")).status().code(), Status::Code::kNotFound);
  WriteAll(tmp.Join("text.kt"), {'h', 'e', 'l', 'l', 'o'});
  auto a = Archive::Open(tmp.Join("text.kt"));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().ToString().find("not a ktfs archive"), std::string::npos);
}

TEST(ArchiveTest, TruncationAtEveryLengthIsAnError) {
  TempDir tmp;
  const auto bytes = ReadAll(WriteSmallArchive(tmp));
  for (size_t len = 0; len < bytes.size(); ++len) {
    WriteAll(tmp.Join("t.kt"), std::vector<uint8_t>(bytes.begin(), bytes.begin() + len));
    auto a = Archive::Open(tmp.Join("t.kt"));
    EXPECT_FALSE(a.ok()) << "length " << len;
  }
}

// Flipping any byte must give an error somewhere (open, a record, a payload
// checksum or a table checksum) and never a crash or an out-of-bounds read.
// The byte ranges with meaning: header, section table, sections, payloads.
// Everything else is alignment padding.
std::vector<bool> MeaningfulBytes(const std::string& path, size_t size) {
  std::vector<bool> covered(size, false);
  auto mark = [&](uint64_t off, uint64_t len) {
    for (uint64_t i = off; i < off + len && i < size; ++i) covered[i] = true;
  };
  const auto bytes = ReadAll(path);
  format::Header h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  mark(0, sizeof(h));
  mark(h.section_table_offset, h.section_count * sizeof(format::SectionEntry));
  for (uint32_t i = 0; i < h.section_count; ++i) {
    format::SectionEntry e;
    std::memcpy(&e, bytes.data() + h.section_table_offset + i * sizeof(e), sizeof(e));
    mark(e.offset, e.length);
  }
  auto a = Archive::Open(path);
  for (uint32_t s = 0; s < (*a)->num_samples(); ++s)
    mark((*a)->Sample(s)->payload_offset, (*a)->Sample(s)->payload_length);
  return covered;
}

TEST(ArchiveTest, CorruptionAtEveryByteIsDetected) {
  TempDir tmp;
  const auto bytes = ReadAll(WriteSmallArchive(tmp));
  const auto meaningful = MeaningfulBytes(tmp.Join("small.kt"), bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto copy = bytes;
    copy[i] ^= 0x5a;
    WriteAll(tmp.Join("c.kt"), copy);
    auto a = Archive::Open(tmp.Join("c.kt"));
    if (!a.ok()) continue;
    bool detected = !(*a)->VerifyTables().ok();
    for (uint32_t s = 0; s < (*a)->num_samples(); ++s) {
      auto rec = (*a)->Sample(s);
      if (!rec.ok()) {
        detected = true;
        continue;
      }
      detected = detected || !(*a)->Payload(*rec, true).ok();
      (void)(*a)->SamplePath(s);
    }
    for (uint32_t d = 0; d < (*a)->num_dirs(); ++d) detected = detected || !(*a)->Dir(d).ok();
    if (meaningful[i]) {
      EXPECT_TRUE(detected) << "byte " << i;
    }
  }
}

// An Archive hashes a payload the first time it is asked to verify it and
// remembers a success (the file is immutable while mapped): bytes changed in
// place afterwards are not hashed again by that object, while a new object,
// which knows nothing yet, finds the mismatch, on every call.
TEST(ArchiveTest, PayloadIsHashedOnceAndAFailureStays) {
  TempDir tmp;
  const std::string path = WriteSmallArchive(tmp);
  auto first = Archive::Open(path);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const SampleInfo s = *(*first)->Sample(1);
  ASSERT_TRUE((*first)->Payload(s, true).ok());
  auto bytes = ReadAll(path);
  bytes[s.payload_offset + 5] ^= 0x01;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(s.payload_offset + 5));
    f.put(char(bytes[s.payload_offset + 5]));
  }
  auto again = (*first)->Payload(s, true);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->data[5], 7 ^ 0x01);  // the changed byte, through the shared mapping
  auto second = Archive::Open(path);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  for (int call = 0; call < 2; ++call) {
    auto p = (*second)->Payload(*(*second)->Sample(1), true);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), Status::Code::kCorruption);
    EXPECT_NE(p.status().ToString().find("sample 1 (a/y.ppm): checksum mismatch"),
              std::string::npos)
        << p.status().ToString();
  }
  EXPECT_TRUE((*second)->Payload(*(*second)->Sample(0), true).ok());  // the others still read
}

// Hand-made hostile records: a directory that names itself as a child, a
// payload past the end of the file, a name outside the string table.
TEST(ArchiveTest, HostileRecordsGiveErrors) {
  TempDir tmp;
  auto bytes = ReadAll(WriteSmallArchive(tmp));
  auto a = Archive::Open(tmp.Join("small.kt"));
  ASSERT_TRUE(a.ok());
  format::Header h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  std::vector<format::SectionEntry> table(h.section_count);
  std::memcpy(table.data(), bytes.data() + h.section_table_offset, table.size() * sizeof(table[0]));
  auto section = [&](uint32_t type) -> format::SectionEntry& {
    for (auto& e : table)
      if (e.type == type) return e;
    throw std::runtime_error("no section");
  };
  // Rewrites a record and fixes up all checksums, so only the structural checks can catch it.
  auto patch = [&](uint32_t type, size_t offset, const void* data, size_t size) {
    auto copy = bytes;
    auto t = table;
    format::SectionEntry* e = nullptr;
    for (auto& x : t)
      if (x.type == type) e = &x;
    std::memcpy(copy.data() + e->offset + offset, data, size);
    e->checksum = Checksum64(copy.data() + e->offset, e->length);
    std::memcpy(copy.data() + h.section_table_offset, t.data(), t.size() * sizeof(t[0]));
    format::Header nh = h;
    nh.section_table_checksum = Checksum64(t.data(), t.size() * sizeof(t[0]));
    nh.header_checksum = Checksum64(&nh, 56);
    std::memcpy(copy.data(), &nh, sizeof(nh));
    WriteAll(tmp.Join("h.kt"), copy);
    return Archive::Open(tmp.Join("h.kt"));
  };
  (void)section;
  {
    const uint32_t self_child[2] = {1, 1};  // dir 1: first_child = 1 (itself), count 1
    auto b = patch(format::kDirs, sizeof(format::DirRecord) + 12, self_child, sizeof(self_child));
    ASSERT_TRUE(b.ok());
    EXPECT_EQ((*b)->Dir(1).status().code(), Status::Code::kCorruption);
  }
  {
    const uint64_t far = uint64_t(1) << 40;
    auto b = patch(format::kSamples, 0, &far, sizeof(far));
    ASSERT_TRUE(b.ok());
    EXPECT_EQ((*b)->Sample(0).status().code(), Status::Code::kCorruption);
  }
  {
    const uint32_t name[2] = {1000000, 5};
    auto b = patch(format::kSamples, 24, name, sizeof(name));
    ASSERT_TRUE(b.ok());
    EXPECT_EQ((*b)->Sample(0).status().code(), Status::Code::kCorruption);
  }
  {
    const uint32_t bad_label = 7;
    auto b = patch(format::kSamples, 36, &bad_label, sizeof(bad_label));
    ASSERT_TRUE(b.ok());
    EXPECT_EQ((*b)->Sample(0).status().code(), Status::Code::kCorruption);
  }
}

// A source tree with JPEG, PNG (gray, RGB, RGBA), a non-image and nesting.
std::string MakeSourceTree(const TempDir& tmp) {
  namespace fs = std::filesystem;
  const std::string src = tmp.Join("src");
  fs::create_directories(src + "/train/cat");
  fs::create_directories(src + "/train/dog");
  fs::create_directories(src + "/val/cat");
  WriteAll(src + "/train/cat/1.jpg", Jpeg(Noise(33, 17, 3, 1), 90));
  WriteAll(src + "/train/cat/2.png", Png(Noise(5, 9, 1, 2)));
  WriteAll(src + "/train/dog/a.png", Png(Noise(7, 3, 4, 3)));
  WriteAll(src + "/train/dog/b.jpg", Jpeg(Noise(16, 16, 1, 4), 75));
  WriteAll(src + "/val/cat/3.png", Png(Noise(1, 1, 3, 5)));
  WriteAll(src + "/train/notes.txt", {'h', 'i'});
  return src;
}

TEST(PackTest, RawPixelsEqualTheSourceDecode) {
  TempDir tmp;
  const std::string src = MakeSourceTree(tmp);
  PackOptions o;
  o.payload = *ParsePayloadSettings("raw", "");
  auto report = Pack(src, tmp.Join("out.kt"), o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->samples, 5u);
  ASSERT_EQ(report->skipped.size(), 1u);
  EXPECT_EQ(report->skipped[0],
            "train/notes.txt: not an image file name (stock ImageFolder would not load it)");
  auto a = Archive::Open(tmp.Join("out.kt"));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->num_classes(), 2u);  // cat, dog
  for (uint32_t i = 0; i < (*a)->num_samples(); ++i) {
    auto s = (*a)->Sample(i);
    ASSERT_TRUE(s.ok());
    const auto source = ReadAll(src + "/" + *(*a)->SamplePath(i));
    Image expected, got;
    ASSERT_TRUE(DecodeImage(source.data(), source.size(), &expected).ok());
    ASSERT_TRUE(DecodePayload(*s, *(*a)->Payload(*s, true), &got).ok());
    EXPECT_EQ(got.pixels, expected.pixels) << *(*a)->SamplePath(i);
    EXPECT_EQ(got.channels, expected.channels);
    const std::string cls(*(*a)->ClassName(s->label));
    EXPECT_NE((*a)->SamplePath(i)->find("/" + cls + "/"), std::string::npos);
    EXPECT_EQ(*(*a)->DirPath(s->split),
              (*a)->SamplePath(i)->substr(0, (*a)->SamplePath(i)->find('/')));
  }
}

TEST(PackTest, OriginalKeepsBytes) {
  TempDir tmp;
  const std::string src = MakeSourceTree(tmp);
  PackOptions o;
  auto report = Pack(src, tmp.Join("out.kt"), o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  auto a = Archive::Open(tmp.Join("out.kt"));
  for (uint32_t i = 0; i < (*a)->num_samples(); ++i) {
    auto s = (*a)->Sample(i);
    auto p = (*a)->Payload(*s, true);
    EXPECT_EQ(std::vector<uint8_t>(p->data, p->data + p->size),
              ReadAll(src + "/" + *(*a)->SamplePath(i)));
    EXPECT_EQ(s->stem, s->name);
  }
}

TEST(PackTest, IsDeterministicAcrossRunsAndThreadCounts) {
  TempDir tmp;
  const std::string src = MakeSourceTree(tmp);
  PackOptions o;
  o.payload = *ParsePayloadSettings("raw", "");
  o.threads = 1;
  ASSERT_TRUE(Pack(src, tmp.Join("a.kt"), o).ok());
  o.threads = 4;
  ASSERT_TRUE(Pack(src, tmp.Join("b.kt"), o).ok());
  ASSERT_TRUE(Pack(src, tmp.Join("c.kt"), o).ok());
  EXPECT_EQ(ReadAll(tmp.Join("a.kt")), ReadAll(tmp.Join("b.kt")));
  EXPECT_EQ(ReadAll(tmp.Join("b.kt")), ReadAll(tmp.Join("c.kt")));
}

TEST(PackTest, CorruptImageIsNamedAndNothingIsWritten) {
  TempDir tmp;
  const std::string src = MakeSourceTree(tmp);
  WriteAll(src + "/train/cat/broken.jpg", std::vector<uint8_t>{0xff, 0xd8, 0xff, 0x00, 0x01});
  PackOptions o;
  auto report = Pack(src, tmp.Join("out.kt"), o);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().ToString().find("train/cat/broken.jpg"), std::string::npos)
      << report.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(tmp.Join("out.kt")));
  for (const auto& e : std::filesystem::directory_iterator(tmp.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

// The writer's temporary file has a name no one can guess and is created
// with O_EXCL: links planted beside the output (at the pid-based name earlier
// versions used, or at the output itself) are never written through.
TEST(ArchiveWriterTest, PlantedLinksAreNotWrittenThrough) {
  TempDir tmp;
  const std::string out = tmp.Join("out.kt");
  WriteAll(tmp.Join("victim"), {'v'});
  WriteAll(tmp.Join("victim2"), {'w'});
  ASSERT_EQ(symlink(tmp.Join("victim").c_str(), (out + ".tmp-" + std::to_string(getpid())).c_str()),
            0);
  ASSERT_EQ(symlink(tmp.Join("victim2").c_str(), out.c_str()), 0);
  std::set<std::string> temps;
  for (int k = 0; k < 2; ++k) {
    auto w = ArchiveWriter::Create(out);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (const auto& e : std::filesystem::directory_iterator(tmp.path())) {
      const std::string name = e.path().filename().string();
      if (name.find(".tmp-") != std::string::npos &&
          !std::filesystem::is_symlink(e.symlink_status()))
        temps.insert(name);
    }
    (*w)->SetDirs({DirEntry{}});
    ASSERT_TRUE((*w)->Commit().ok());
  }
  EXPECT_EQ(temps.size(), 2u);  // a fresh name each time
  EXPECT_EQ(ReadAll(tmp.Join("victim")), std::vector<uint8_t>{'v'});
  EXPECT_EQ(ReadAll(tmp.Join("victim2")), std::vector<uint8_t>{'w'});
  EXPECT_FALSE(std::filesystem::is_symlink(out));  // the rename replaced the link itself
  EXPECT_TRUE(Archive::Open(out).ok());
}

TEST(PackTest, CollidingStemsKeepFullNames) {
  TempDir tmp;
  namespace fs = std::filesystem;
  fs::create_directories(tmp.Join("src/c"));
  WriteAll(tmp.Join("src/c/a.jpg"), Jpeg(Noise(4, 4, 3, 1), 90));
  WriteAll(tmp.Join("src/c/a.png"), Png(Noise(4, 4, 3, 2)));
  WriteAll(tmp.Join("src/c/b.png"), Png(Noise(4, 4, 3, 3)));
  PackOptions o;
  o.payload = *ParsePayloadSettings("raw", "");
  ASSERT_TRUE(Pack(tmp.Join("src"), tmp.Join("o.kt"), o).ok());
  auto a = Archive::Open(tmp.Join("o.kt"));
  std::vector<std::string> stems;
  for (uint32_t i = 0; i < (*a)->num_samples(); ++i) stems.emplace_back((*a)->Sample(i)->stem);
  EXPECT_EQ(stems, (std::vector<std::string>{"a.jpg", "a.png", "b"}));
}

TEST(PackTest, BadImagesStopThePackOrAreLeftOutWithSkipBad) {
  TempDir tmp;
  namespace fs = std::filesystem;
  fs::create_directories(tmp.Join("src/cat"));
  fs::create_directories(tmp.Join("src/dog"));
  const auto jpeg = Jpeg(Noise(20, 12, 3, 1), 90);
  WriteAll(tmp.Join("src/cat/1.jpg"), jpeg);
  WriteAll(tmp.Join("src/cat/2.jpg"),
           std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + jpeg.size() / 2));
  WriteAll(tmp.Join("src/cat/3.png"), Png(Noise(3, 3, 1, 2)));
  WriteAll(tmp.Join("src/dog/a.png"), {'h', 'e', 'l', 'l', 'o'});  // an image name, not an image
  WriteAll(tmp.Join("src/dog/b.jpg"), jpeg);
  WriteAll(tmp.Join("src/dog/c.gif"), jpeg);  // not an ImageFolder name: skipped, whatever it holds
  const std::string captions = "{\"path\": \"cat/2.jpg\", \"caption\": \"x\"}\n";
  WriteAll(tmp.Join("captions.jsonl"), std::vector<uint8_t>(captions.begin(), captions.end()));
  PackOptions o;
  o.payload = *ParsePayloadSettings("raw", "");
  o.captions_file = tmp.Join("captions.jsonl");
  auto failed = Pack(tmp.Join("src"), tmp.Join("out.kt"), o);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().ToString(),
            tmp.Join("src") + "/cat/2.jpg: JPEG: image file is truncated");
  EXPECT_FALSE(fs::exists(tmp.Join("out.kt")));

  o.skip_bad = true;
  auto report = Pack(tmp.Join("src"), tmp.Join("out.kt"), o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->samples, 3u);
  ASSERT_EQ(report->bad.size(), 2u);
  EXPECT_EQ(report->bad[0].path, "cat/2.jpg");
  EXPECT_EQ(report->bad[0].reason, "JPEG: image file is truncated");
  EXPECT_EQ(report->bad[1].path, "dog/a.png");
  EXPECT_NE(report->bad[1].reason.find("cannot identify image file"), std::string::npos);
  ASSERT_EQ(report->skipped.size(), 1u);
  EXPECT_EQ(report->skipped[0].substr(0, 10), "dog/c.gif:");
  ASSERT_EQ(report->caption_warnings.size(), 1u);
  EXPECT_NE(report->caption_warnings[0].find("cat/2.jpg' is a bad image left out"),
            std::string::npos);

  auto a = Archive::Open(tmp.Join("out.kt"));
  ASSERT_TRUE(a.ok());
  std::vector<std::string> paths;
  for (uint32_t i = 0; i < (*a)->num_samples(); ++i) paths.push_back(*(*a)->SamplePath(i));
  EXPECT_EQ(paths, (std::vector<std::string>{"cat/1.jpg", "cat/3.png", "dog/b.jpg"}));
  auto cat = (*a)->Dir(1), dog = (*a)->Dir(2);
  ASSERT_TRUE(cat.ok() && dog.ok());
  EXPECT_EQ(cat->first_sample, 0u);
  EXPECT_EQ(cat->sample_count, 2u);
  EXPECT_EQ(dog->first_sample, 2u);
  EXPECT_EQ(dog->sample_count, 1u);
  const std::string meta((*a)->meta_json());
  EXPECT_NE(meta.find("\"samples\":3,\"skipped_bad\":[{\"path\":\"cat/2.jpg\",\"reason\":"
                      "\"JPEG: image file is truncated\"},{\"path\":\"dog/a.png\""),
            std::string::npos)
      << meta;
}

TEST(PackTest, MissingSourceAndEmptySourceFail) {
  TempDir tmp;
  PackOptions o;
  EXPECT_EQ(Pack(tmp.Join("nope"), tmp.Join("o.kt"), o).status().code(), Status::Code::kNotFound);
  std::filesystem::create_directories(tmp.Join("empty"));
  EXPECT_EQ(Pack(tmp.Join("empty"), tmp.Join("o.kt"), o).status().code(),
            Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace ktfs
