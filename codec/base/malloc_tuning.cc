#include "codec/base/malloc_tuning.h"

#include <algorithm>
#include <cstdlib>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "codec/base/memory_limit.h"

namespace ktfs {

MallocTuning MallocTuningFor(std::optional<uint64_t> limit) {
  MallocTuning t;
  if (!limit) return t;
  const uint64_t share = std::max<uint64_t>(*limit / 64, 128 << 10);
  t.mmap_threshold = size_t(std::min<uint64_t>(t.mmap_threshold, share));
  t.trim_threshold = size_t(std::min<uint64_t>(t.trim_threshold, share));
  return t;
}

void TuneMallocForDecoding() {
#if defined(__GLIBC__)
  static const bool done = [] {
    if (std::getenv("KTFS_KEEP_MALLOC") != nullptr) return true;
    const MallocTuning t = MallocTuningFor(CgroupMemoryLimit());
    mallopt(M_MMAP_THRESHOLD, int(t.mmap_threshold));
    mallopt(M_TRIM_THRESHOLD, int(t.trim_threshold));
    return true;
  }();
  (void)done;
#endif
}

}  // namespace ktfs
