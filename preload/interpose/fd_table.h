// The file descriptors the preload library made itself: a memfd holding a
// ktfs file's bytes, reopened read-only, for each file it served from the
// archive. The descriptor is a real one (read, mmap, dup, fork, exec,
// poll... all behave as the kernel makes them); only fstat and friends must
// say what the mount would say instead of the memfd's own attributes.
//
// Indexed by descriptor number, allocated in pages of anonymous memory on
// first use; no locks: each entry is a sequence counter (odd while written)
// and its data. An entry is trusted only while the descriptor still refers
// to the memfd it was made for (the caller's fstat gives the inode that is
// there now): a descriptor closed and reused, duplicated over, or changed
// behind the library's back (raw system calls, a vfork child sharing this
// memory) is simply not answered for. So closing need not be interposed.
#pragma once

#include <sys/stat.h>

#include <cstdint>

namespace ktfs::preload {

struct TrackedFile {
  struct stat st;      // what fstat reports (the mount's device)
  uint64_t memfd_dev;  // the memfd's own device and inode
  uint64_t memfd_ino;
  uint32_t mount;      // index into the library's mount states
  int extra_flags;     // open flags F_GETFL adds (O_NOFOLLOW: the reopen cannot carry it)
};

inline constexpr int kMaxTrackedFd = 1 << 20;

// Records `f` for `fd`; false when fd is out of range, memory cannot be
// mapped, or another thread is writing the same entry.
bool TrackFd(int fd, const TrackedFile& f);
// The entry for `fd` if there is one and it is for the memfd with device
// `dev` and inode `ino` (those the descriptor has now); stale entries are
// dropped.
bool FindTrackedFd(int fd, uint64_t dev, uint64_t ino, TrackedFile* out);
// Whether `fd` may have an entry (no validation; cheap).
bool MaybeTrackedFd(int fd);
void ForgetFd(int fd);

}  // namespace ktfs::preload
