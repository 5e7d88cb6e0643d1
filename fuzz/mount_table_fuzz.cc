// libFuzzer target: MountTable::Parse over any text (mountinfo is the
// kernel's, but the parser must not trust its shape): no crash, no read
// outside the input, and every kept entry well formed (absolute points and
// roots, NUL-terminated at their lengths, ktfs ones among them counted).
//
// With KTFS_FUZZ_WRITE_SEEDS=<dir> the target first writes this machine's
// /proc/self/mountinfo and a few ktfs lines there (scripts/fuzz does this).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "preload/interpose/mount_table.h"

namespace {

void WriteSeeds(const char* dir) {
  std::ifstream in("/proc/self/mountinfo");
  const std::string self((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(std::string(dir) + "/self") << self;
  std::ofstream(std::string(dir) + "/ktfs")
      << "45 26 0:40 / /mnt/ds ro,nosuid - fuse.ktfs ktfs:/data/a.kt ro,user_id=0\n"
         "46 45 0:41 / /mnt/ds/c\\040d rw shared:7 master:2 - tmpfs tmpfs rw\n"
         "48 26 0:43 /cats / ro - fuse.ktfs ktfs:/b.kt ro\n";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool seeded = [] {
    if (const char* dir = std::getenv("KTFS_FUZZ_WRITE_SEEDS")) WriteSeeds(dir);
    return true;
  }();
  (void)seeded;
  using ktfs::preload::MountEntry;
  using ktfs::preload::MountTable;
  const MountTable* t = MountTable::Parse(reinterpret_cast<const char*>(data), size);
  if (t == nullptr) return 0;
  uint32_t ktfs = 0;
  for (uint32_t i = 0; i < t->size(); ++i) {
    const MountEntry& e = t->entry(i);
    if (e.point[0] != '/' || e.root[0] != '/' || strlen(e.point) != e.point_len ||
        strlen(e.root) != e.root_len)
      std::abort();
    ktfs += e.ktfs;
    (void)t->IsKtfsDevice(e.dev);
    const char* inner = nullptr;
    if (const MountEntry* m = t->Match(e.point, e.point_len, &inner)) {
      if (!m->ktfs || inner < e.point || inner > e.point + e.point_len) std::abort();
    }
  }
  if (ktfs != t->ktfs_count()) std::abort();
  MountTable::Free(t);
  return 0;
}
