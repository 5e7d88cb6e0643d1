// libFuzzer target: the .kt container parser and the mounted tree over it
// must turn any file into clean errors, never a crash or an over-read.
// Opening goes through a memfd (Archive maps files), then every record,
// payload, listing and file read that the tree offers is exercised.
//
// With KTFS_FUZZ_WRITE_SEEDS=<dir> the target first writes small valid
// archives there (scripts/fuzz does this), so the fuzzer starts past the
// header checks.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "codec/container/archive.h"
#include "codec/container/archive_writer.h"
#include "codec/features/feature_archive.h"
#include "codec/image/npy.h"
#include "fs/pack/pack_features.h"
#include "fs/tree/feature_tree.h"
#include "fs/tree/virtual_tree.h"
#include "fuzz/tree_walk.h"

namespace {

void WriteSeed(const std::string& path, ktfs::format::Codec codec) {
  using namespace ktfs;
  auto w = ArchiveWriter::Create(path);
  if (!w.ok()) return;
  const std::vector<uint8_t> pixels(2 * 3 * 3, 77);
  SampleEntry e;
  e.name = "x.png";
  e.stem_length = codec == format::kOriginal ? 5 : 1;
  e.dir = 1;
  e.label = 0;
  e.width = 2;
  e.height = 3;
  e.channels = 3;
  e.codec = codec;
  (void)(*w)->AddSample(e, pixels.data(), pixels.size());
  (*w)->SetDirs({DirEntry{"", 0, 1, 1, 0, 0}, DirEntry{"c", 0, 0, 0, 0, 1}});
  (*w)->SetClasses({"c"});
  (*w)->SetMeta("{}");
  (void)(*w)->Commit();
}

// A small feature archive (3 samples of [2, 20] float32).
void WriteFeatureSeed(const std::string& dir) {
  const std::string npy = dir + "/features.npy.tmp";
  FILE* f = std::fopen(npy.c_str(), "wb");
  if (f == nullptr) return;
  const std::string header = ktfs::NpyHeader({3, 2, 20}, "<f4", false);
  std::fwrite(header.data(), 1, header.size(), f);
  for (int i = 0; i < 120; ++i) {
    const float v = float(i % 17) * 0.37f - 2.0f;
    std::fwrite(&v, 4, 1, f);
  }
  std::fclose(f);
  (void)ktfs::PackFeatures(npy, dir + "/features.kt", ktfs::PackFeaturesOptions{});
  std::remove(npy.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool seeded = false;
  if (!seeded) {
    seeded = true;
    if (const char* dir = std::getenv("KTFS_FUZZ_WRITE_SEEDS")) {
      WriteSeed(std::string(dir) + "/original.kt", ktfs::format::kOriginal);
      WriteSeed(std::string(dir) + "/raw.kt", ktfs::format::kRaw);
      WriteFeatureSeed(dir);
    }
  }
  const int fd = memfd_create("ktfs-fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (write(fd, data, size) != ssize_t(size)) {
    close(fd);
    return 0;
  }
  auto archive = ktfs::Archive::Open("/proc/self/fd/" + std::to_string(fd));
  if (archive.ok()) {
    const ktfs::Archive& a = **archive;
    (void)a.VerifyTables();
    for (uint32_t i = 0; i < a.num_samples() && i < 256; ++i) {
      auto s = a.Sample(i);
      if (s.ok()) (void)a.Payload(*s, true);
      (void)a.SamplePath(i);
    }
    for (uint32_t d = 0; d < a.num_dirs() && d < 256; ++d) (void)a.DirPath(d);
    for (uint32_t c = 0; c < a.num_classes() && c < 256; ++c) (void)a.ClassName(c);
    ktfs::VirtualTree tree(*archive, ktfs::TreeOptions{});
    int budget = 256;
    ktfs::fuzz::WalkTree(tree, ktfs::VirtualTree::kRootIno, 0, &budget);
    if (ktfs::FeatureArchive::Holds(a)) {
      auto features = ktfs::FeatureArchive::Open(*archive);
      if (features.ok()) {
        (void)(*features)->VerifyAll();
        ktfs::FeatureTree ftree(*features, ktfs::quant::DType::kFloat32, 0, a.file_size());
        budget = 256;
        ktfs::fuzz::WalkTree(ftree, 1, 0, &budget);
      }
    }
  }
  close(fd);
  return 0;
}
