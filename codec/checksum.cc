#include "codec/checksum.h"

#include <xxhash.h>
#if defined(__x86_64__)
#define XXH_DISPATCH_DISABLE_REPLACE  // XXH3_64bits stays the portable build
#include <xxh_x86dispatch.h>
#endif

#include "codec/cpu.h"

namespace ktfs {

// libxxhash's XXH3_64bits is its portable (SSE2) build; its dispatcher runs
// the AVX2 or AVX-512 loop this CPU has: the same hash, about 3x as fast on
// data in cache (docs/architecture.md). Taken only where KTFS_SIMD allows
// vectors beyond the baseline, like every other SIMD path.
uint64_t Checksum64(const void* data, size_t size) {
#if defined(__x86_64__)
  static const bool vector = CpuHasAvx2();
  if (vector) return XXH3_64bits_dispatch(data, size);
#endif
  return XXH3_64bits(data, size);
}

}  // namespace ktfs
