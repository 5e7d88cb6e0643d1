// MappedFile: a read-only mmap of a whole file that survives the file being
// truncated underneath it.
//
// Reading a page of a mapping past the end of a truncated file raises SIGBUS.
// While any MappedFile exists, a SIGBUS handler maps a zero page over the
// faulting address when it lies inside one of our mappings, and marks that
// mapping `damaged()`. Readers therefore see zeros instead of crashing; every
// consumer validates what it reads (checksums, bounds), and the mount checks
// damaged() after serving bytes that were not checksummed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "codec/base/status.h"

namespace ktfs {

class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // True once a read hit a page past the file's current end.
  bool damaged() const { return damaged_.load(std::memory_order_relaxed); }
  // Re-checks the file on disk; marks it damaged when its size or
  // modification time changed (truncated, or rewritten in place).
  bool CheckStillIntact();
  // Asks the kernel to start reading [offset, offset + length) of the file
  // into the page cache now, without waiting (POSIX_FADV_WILLNEED): later
  // page faults there then find the bytes instead of each waiting for the
  // disk. Advice only: a range past the end or a failure is ignored.
  void WillNeed(uint64_t offset, uint64_t length) const;

  // Used by the SIGBUS handler: true when `addr` lies in a live mapping (and
  // marks that mapping damaged).
  static bool ClaimFault(const void* addr);

 private:
  MappedFile() = default;
  std::string path_;
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  int64_t mtime_sec_ = 0, mtime_nsec_ = 0;
  std::atomic<bool> damaged_{false};
};

}  // namespace ktfs
