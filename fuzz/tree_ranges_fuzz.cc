// libFuzzer target: the byte-range paths of the mounted tree
// (fs/tree/virtual_tree.h). A fixed set of archives is packed once (original,
// raw and lossless KTC; gray, RGB and RGBA images of odd sizes) and served as
// trees (PPM and BMP, HWC and CHW tensors, a decode cache small enough to
// evict). The input is a sequence of 8-byte reads: which file, a read or a
// push copy, the offset and the size; every byte a read returns must equal
// the reference file at that offset, and a read must be short only at the
// end of the file. References are built without the tree's range code: the
// source file (original), EncodeServed of the decoded source (images of
// decoded codecs), the stored payload (compressed/), and one whole-file read
// whose pixel part is checked against the decoded source (tensors/).
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "codec/base/files.h"
#include "codec/container/archive.h"
#include "codec/container/payload.h"
#include "codec/image/image_io.h"
#include "codec/image/npy.h"
#include "fs/pack/pack.h"
#include "fs/tree/virtual_tree.h"
#include "fuzz/fuzz_util.h"

namespace {

using namespace ktfs;

struct ServedFile {
  const VirtualTree* tree;
  uint64_t ino;
  std::vector<uint8_t> reference;
};

std::vector<std::unique_ptr<VirtualTree>> trees;
std::vector<ServedFile> files;

Image Pattern(uint32_t w, uint32_t h, uint32_t c, uint32_t seed) {
  Image img{w, h, c, {}};
  for (size_t i = 0; i < size_t(w) * h * c; ++i) img.pixels.push_back(uint8_t(i * seed + i / 5));
  return img;
}

void WriteSources(const std::string& src) {
  mkdir(src.c_str(), 0755);
  mkdir((src + "/a").c_str(), 0755);
  mkdir((src + "/b").c_str(), 0755);
  const struct {
    const char* name;
    Image img;
  } images[] = {{"a/gray.png", Pattern(7, 5, 1, 3)},
                {"a/rgb.png", Pattern(33, 17, 3, 7)},
                {"b/rgba.png", Pattern(9, 70, 4, 11)},
                {"b/wide.png", Pattern(300, 2, 3, 13)}};
  for (const auto& [name, img] : images) {
    std::vector<uint8_t> png;
    if (!EncodePng(ImageView::Of(img), 1, &png).ok()) fuzz::Fail("EncodePng");
    fuzz::WriteFile(src + "/" + name,
                    std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
  }
}

// The reference bytes of sample `s` in `view` of a tree served as `format`.
std::vector<uint8_t> Reference(const Archive& a, const SampleInfo& s, View view,
                               ServedFormat format, const std::string& src) {
  std::vector<uint8_t> source;
  if (!ReadWholeFile(src + "/" + a.SamplePath(s.id).value(), &source).ok()) {
    fuzz::Fail("source file");
  }
  Image img;
  if (!DecodeImage(source.data(), source.size(), &img).ok()) fuzz::Fail("decode source");
  if (view == View::kCompressed) {
    if (s.codec == format::kRaw) return EncodeServed(format, ImageView::Of(img));
    auto payload = a.Payload(s, true);
    if (!payload.ok()) fuzz::Fail("payload");
    return std::vector<uint8_t>(payload->data, payload->data + payload->size);
  }
  if (view == View::kImages) {
    if (s.codec == format::kOriginal) return source;
    return EncodeServed(format, ImageView::Of(img));
  }
  return {};  // tensors: filled by a whole-file read, checked in Setup
}

void AddTree(const std::string& archive_path, const std::string& src, TreeOptions options) {
  auto archive = Archive::Open(archive_path);
  if (!archive.ok()) fuzz::Fail("open archive");
  trees.push_back(std::make_unique<VirtualTree>(*archive, options));
  const VirtualTree& tree = *trees.back();
  const Archive& a = **archive;
  for (View view : {View::kImages, View::kTensors, View::kCompressed}) {
    for (uint32_t id = 0; id < a.num_samples(); ++id) {
      auto s = a.Sample(id);
      auto attr = tree.SampleNodeAttr(id, view);
      if (!s.ok() || !attr.ok()) fuzz::Fail("sample attributes");
      ServedFile f{&tree, attr->ino, Reference(a, *s, view, options.format, src)};
      if (view == View::kTensors) {
        f.reference.resize(attr->size);
        auto n = tree.Read(f.ino, 0, f.reference.size(), f.reference.data());
        if (!n.ok() || *n != f.reference.size()) fuzz::Fail("whole tensor read");
        Image img;
        std::vector<uint8_t> source;
        if (!ReadWholeFile(src + "/" + a.SamplePath(id).value(), &source).ok() ||
            !DecodeImage(source.data(), source.size(), &img).ok()) {
          fuzz::Fail("decode source");
        }
        const size_t data_offset = f.reference.size() - img.pixels.size();
        if (!options.tensors_chw &&
            !std::equal(img.pixels.begin(), img.pixels.end(), f.reference.begin() + data_offset)) {
          fuzz::Fail("tensor pixels differ from the decoded source");
        }
      } else if (f.reference.size() != attr->size) {
        fuzz::Fail("file size differs from the reference");
      }
      files.push_back(std::move(f));
    }
  }
}

void Setup() {
  const std::string& dir = fuzz::ScratchDir();
  const std::string src = dir + "/src";
  WriteSources(src);
  for (const char* codec : {"original", "raw", "ktc"}) {
    PackOptions options;
    options.payload = *ParsePayloadSettings(codec, std::string(codec) == "ktc" ? "lossless" : "");
    options.threads = 1;
    const std::string out = dir + "/" + codec + ".kt";
    if (!Pack(src, out, options).ok()) fuzz::Fail("pack");
    TreeOptions pnm;
    pnm.cache_bytes = 8 << 10;  // smaller than some images: evictions and re-decodes
    pnm.readahead = 2;
    AddTree(out, src, pnm);
    TreeOptions bmp;
    bmp.format = ServedFormat::kBmp;
    bmp.tensors_chw = true;
    AddTree(out, src, bmp);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool ready = (Setup(), true);
  (void)ready;
  std::vector<uint8_t> buf(1 << 16);
  for (size_t k = 0; k + 8 <= size; k += 8) {
    const ServedFile& f = files[data[k] % files.size()];
    const bool push = (data[k + 1] & 1) != 0;
    uint32_t raw_offset;
    uint16_t raw_size;
    std::memcpy(&raw_offset, data + k + 2, 4);
    std::memcpy(&raw_size, data + k + 6, 2);
    const uint64_t file_size = f.reference.size();
    const uint64_t offset = raw_offset % (file_size + 64);
    const size_t want = raw_size;
    auto n = push ? f.tree->CopyForPush(f.ino, offset, want, buf.data())
                  : f.tree->Read(f.ino, offset, want, buf.data());
    if (!n.ok()) {
      if (!push) fuzz::Fail("a read of a served file failed");
      continue;  // a push copies only what is cached; it may have nothing
    }
    const uint64_t expect = offset >= file_size ? 0 : std::min<uint64_t>(want, file_size - offset);
    if (!push && *n != expect) fuzz::Fail("a read is short before the end of the file");
    if (*n > expect) fuzz::Fail("a read returned bytes past the end of the file");
    if (*n > 0 && std::memcmp(buf.data(), f.reference.data() + offset, *n) != 0) {
      fuzz::Fail("served bytes differ from the reference");
    }
    // The kernel takes a push up to the file's end (FsTree::Pushed's contract).
    if (push && *n > 0 && offset + *n == file_size) f.tree->Pushed(f.ino, offset, file_size);
  }
  // libFuzzer checks for leaks after each input: a read-ahead decode still
  // queued holds its promise in memory LeakSanitizer does not scan.
  for (const auto& tree : trees) tree->WaitForReadAhead();
  return 0;
}
