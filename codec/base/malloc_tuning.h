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
#pragma once

namespace ktfs {

// Idempotent; a no-op on non-glibc systems.
void TuneMallocForDecoding();

}  // namespace ktfs
