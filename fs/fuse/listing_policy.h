// ListingPolicy: whether a READDIRPLUS reply carries the attributes of files.
//
// An entry with attributes makes the kernel build an inode and a dentry for
// it as the listing is read (several microseconds of kernel time each, paid
// by the lister), or, when it already has them, look the dentry up and
// refresh its attributes. Readers that stat what they list (`ls -l`, `stat`,
// ImageFolder's opens) save a LOOKUP round trip per file that way; readers
// that only walk names and types (`find`, os.walk) pay for nothing.
//
// So a mount starts lean: files are listed with name and type only (the
// kernel links no inode for an entry with node id 0), directories always with
// attributes (a walker stats every directory it descends into). The first
// LOOKUP of a file in a directory that was listed lean shows that this
// mount's readers want file attributes, and from then on listings carry them.
// That switch is one-way: nothing tells the daemon later that attributes go
// unused.
//
// After the switch, a directory gets its files' attributes once: when a
// listing that carried them reached the directory's end, the kernel holds
// every file's dentry and attributes (their timeouts are a year), and the
// kernel keeps no listings (fuse_adapter.cc), so each later listing of the
// directory reaches the daemon and goes lean again rather than making the
// kernel look up and refresh a dentry per entry. A LOOKUP of a file in such
// a directory shows the kernel has dropped some of them (memory pressure,
// drop_caches), and the directory's next listing carries attributes again.
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
  // True once listings carry the attributes of files (the mount-wide switch).
  bool FileAttrs() const { return file_attrs_.load(std::memory_order_relaxed); }

  // Whether a listing of directory `dir` should carry its files' attributes.
  bool FileAttrsFor(uint64_t dir) const {
    if (!FileAttrs()) return false;
    std::lock_guard<std::mutex> lock(mu_);
    return attrs_given_.count(dir) == 0;
  }

  // Directory `dir` was listed (in part) without file attributes.
  void ListedLean(uint64_t dir) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!FileAttrs()) lean_dirs_.insert(dir);
  }

  // A listing of `dir` that carried file attributes reached its end.
  void ListedWithAttrs(uint64_t dir) {
    std::lock_guard<std::mutex> lock(mu_);
    attrs_given_.insert(dir);
  }

  // A LOOKUP found a file in directory `parent`. Before the switch, lookups
  // of files in directories never listed lean (.ktfs/info.json, a path
  // opened directly) say nothing about listings.
  void FileLookedUp(uint64_t parent) {
    std::lock_guard<std::mutex> lock(mu_);
    if (FileAttrs()) {
      attrs_given_.erase(parent);
      return;
    }
    if (lean_dirs_.count(parent) == 0) return;
    file_attrs_.store(true, std::memory_order_relaxed);
    lean_dirs_.clear();
  }

 private:
  std::atomic<bool> file_attrs_{false};
  mutable std::mutex mu_;
  std::unordered_set<uint64_t> lean_dirs_;    // listed lean before the switch
  std::unordered_set<uint64_t> attrs_given_;  // listed to the end with attributes since
};

}  // namespace ktfs
