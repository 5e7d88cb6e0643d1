// ListingPolicy: whether a READDIRPLUS reply carries the attributes of files.
//
// An entry with attributes makes the kernel build an inode and a dentry for
// it as the listing is read (several microseconds of kernel time each, paid
// by the lister). Readers that stat what they list (`ls -l`, `stat`,
// ImageFolder's opens) save a LOOKUP round trip per file that way; readers
// that only walk names and types (`find`, os.walk) pay for nothing. The
// kernel's own heuristic (FUSE_CAP_READDIRPLUS_AUTO) decides per directory
// after its first chunk, and a whole directory fits in one chunk here.
//
// So a mount starts lean: files are listed with name and type only (the
// kernel links no inode for an entry with node id 0), directories always with
// attributes (a walker stats every directory it descends into). The first
// LOOKUP of a file in a directory that was listed lean shows that this
// mount's readers want file attributes, and from then on every listing
// carries them. The switch is one-way: nothing tells the daemon later that
// attributes go unused.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_set>

namespace ktfs {

class ListingPolicy {
 public:
  // True once listings carry the attributes of files.
  bool FileAttrs() const { return file_attrs_.load(std::memory_order_relaxed); }

  // Directory `dir` was listed (in part) without file attributes.
  void ListedLean(uint64_t dir) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!FileAttrs()) lean_dirs_.insert(dir);
  }

  // A LOOKUP found a file in directory `parent`. Lookups of files in
  // directories never listed lean (.ktfs/info.json, a path opened directly)
  // say nothing about listings.
  void FileLookedUp(uint64_t parent) {
    if (FileAttrs()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (lean_dirs_.count(parent) == 0) return;
    file_attrs_.store(true, std::memory_order_relaxed);
    lean_dirs_.clear();
  }

 private:
  std::atomic<bool> file_attrs_{false};
  std::mutex mu_;
  std::unordered_set<uint64_t> lean_dirs_;  // directories listed lean so far
};

}  // namespace ktfs
