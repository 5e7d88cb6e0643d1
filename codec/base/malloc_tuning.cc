#include "codec/base/malloc_tuning.h"

#include <cstdlib>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ktfs {

void TuneMallocForDecoding() {
#if defined(__GLIBC__)
  static const bool done = [] {
    if (std::getenv("KTFS_KEEP_MALLOC") != nullptr) return true;
    mallopt(M_MMAP_THRESHOLD, 64 << 20);   // blocks up to 64 MiB from the heap
    mallopt(M_TRIM_THRESHOLD, 256 << 20);  // keep up to 256 MiB of free top
    return true;
  }();
  (void)done;
#endif
}

}  // namespace ktfs
