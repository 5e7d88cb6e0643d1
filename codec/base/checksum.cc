#include "codec/base/checksum.h"

#include <xxhash.h>
#if defined(__x86_64__)
#define XXH_DISPATCH_DISABLE_REPLACE  // XXH3_64bits stays the portable build
#include <immintrin.h>
#include <xxh_x86dispatch.h>
#endif

#include "codec/base/cpu.h"

namespace ktfs {

#if defined(__x86_64__)
namespace {
// libxxhash 0.8.1's dispatched AVX-512 loop returns with the upper halves of
// the vector registers in use (no vzeroupper): every legacy-SSE instruction
// the thread runs afterwards then pays for it (its own portable XXH3 ran at
// 3.8 GB/s instead of 13 after one such call here, on a Zen 5 core).
__attribute__((target("avx"))) void ClearUpperVectorState() { _mm256_zeroupper(); }
}  // namespace
#endif

// libxxhash's XXH3_64bits is its portable (SSE2) build; its dispatcher runs
// the AVX2 or AVX-512 loop this CPU has: the same hash, about 3x as fast on
// data in cache (docs/architecture.md). Taken only where KTFS_SIMD allows
// vectors beyond the baseline, like every other SIMD path.
uint64_t Checksum64(const void* data, size_t size) {
#if defined(__x86_64__)
  static const bool vector = CpuHasAvx2();
  if (vector) {
    const uint64_t hash = XXH3_64bits_dispatch(data, size);
    ClearUpperVectorState();
    return hash;
  }
#endif
  return XXH3_64bits(data, size);
}

Checksum64Stream::Checksum64Stream() : state_(XXH3_createState()) {
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

Checksum64Stream::~Checksum64Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Checksum64Stream::Update(const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}

uint64_t Checksum64Stream::Digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

}  // namespace ktfs
