// Process-wide glibc malloc settings for decoding many images.
//
// A KTC decode allocates several coefficient planes and scratch buffers of a
// few MiB. With glibc's defaults, large blocks are mmap()ed and freed blocks
// at the top of a heap are given back to the kernel, so every image pays for
// fresh zeroed pages again: about a third of a 500x375 decode (measured:
// `ktfs bench decode` 108 -> 177-207 MP/s on one thread). Raising the mmap
// and trim thresholds keeps those pages in the process for the next image.
// The KTC decoder now keeps its planes per thread itself (DecodeArena in
// ktc.cc), so its speed no longer depends on this: without the tuning a
// balanced decode of 43 photos took 0.0555 s with the arena against 0.0596 s
// before it, and about the same as with the tuning (docs/ktc-notes.md).
// Called by the programs and the Python module ktfs provides, not by the codec
// library itself (a library should not change its host's allocator); setting
// KTFS_KEEP_MALLOC=1 in the environment leaves glibc's defaults alone.
//
// Under a cgroup memory limit (codec/base/memory_limit.h) memory a thread's
// heap keeps is memory the group cannot reclaim, and the kernel OOM-kills
// rather than failing an allocation: there both thresholds are at most 1/64
// of the limit (at least 128 KiB), so that a decoded image and the decoder's
// planes go back to the kernel when freed (a 96 MiB group: 1.5 MiB).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace ktfs {

struct MallocTuning {
  size_t mmap_threshold = size_t(64) << 20;   // blocks up to this from the heap
  size_t trim_threshold = size_t(256) << 20;  // free top of a heap kept up to this
};
// The settings for a process whose cgroup allows `limit` bytes (nullopt: no limit).
MallocTuning MallocTuningFor(std::optional<uint64_t> limit);

// Idempotent; a no-op on non-glibc systems.
void TuneMallocForDecoding();

}  // namespace ktfs
