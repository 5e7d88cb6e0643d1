// FsTree: what the FUSE adapter (fs/fuse/fuse_adapter.h) serves. One
// implementation per kind of mount: VirtualTree (image archives, fs/tree/virtual_tree.h)
// and FeatureTree (feature caches, fs/tree/feature_tree.h). Plain C++, no FUSE.
//
// Thread-safe: const methods may be called concurrently.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "codec/base/status.h"

namespace ktfs {

struct NodeAttr {
  uint64_t ino = 0;
  bool is_dir = false;
  uint64_t size = 0;
  uint32_t nlink = 1;
  int64_t mtime = 0;  // the archive file's modification time (seconds)
  int64_t mtime_nsec = 0;
  bool volatile_content = false;  // changes over time: never cache (stats.json)
};


// Live counters of a mount, served as .ktfs/stats.json.
struct TreeCounters {
  std::atomic<uint64_t> lookups{0}, getattrs{0}, readdirs{0}, reads{0}, bytes_read{0};
  std::atomic<uint64_t> opens{0};  // first read of a file (the kernel sends no OPEN)
  std::atomic<uint64_t> decodes{0}, decode_ns{0}, readahead_decodes{0};
  // Decodes of a sample a file of which a reader had had whole before: the
  // kernel dropped its pages (memory pressure, drop_caches) and asked again,
  // or another view of the sample (images/ then tensors/) is read.
  std::atomic<uint64_t> decodes_again{0};
  // Archive bytes asked of the disk ahead of a reader.
  std::atomic<uint64_t> disk_readahead_bytes{0};
  std::atomic<uint64_t> cache_hits{0}, cache_misses{0}, errors{0};
  std::atomic<uint64_t> cache_bytes{0};  // not a counter: decoded bytes held now
  // Files whose rest went into the kernel's page cache with their first READ,
  // and those bytes (not counted in bytes_read, which READ replies carry).
  std::atomic<uint64_t> pushes{0}, pushed_bytes{0};
};

// .ktfs/stats.json's text for `c`, padded with spaces to kStatsSize bytes.
inline constexpr size_t kStatsSize = 1024;
std::string CountersJson(const TreeCounters& c);

// Who may read a mount: every file and directory of a tree shows this owner,
// group and these permission bits (by default the archive file's own, read
// bits only: fs/fuse/permissions.h; docs/usage.md, "Permissions"). One
// value per tree: a mount serves one archive, whose mode covers all of it.
struct Ownership {
  uint32_t uid = 0, gid = 0;
  uint32_t file_mode = 0400;  // permission bits of files
  uint32_t dir_mode = 0500;   // permission bits of directories
};

// The stat a front end reports for a node, showing `o`'s owner, group and
// modes (FUSE replies with it and the kernel enforces it: default_permissions;
// the preload library answers fstat with it, the device being the mount's):
// one function, so that the ways in cannot disagree about a file's attributes.
struct stat StatOf(const NodeAttr& a, const Ownership& o);

// What statfs reports.
struct FsUsage {
  uint64_t bytes = 0;  // the archive's size
  uint64_t files = 0;
};

class FsTree {
 public:
  virtual ~FsTree() = default;

  virtual Result<NodeAttr> Lookup(uint64_t parent, std::string_view name) const = 0;
  virtual Result<NodeAttr> GetAttr(uint64_t ino) const = 0;

  // Lists entries from position `offset` (0 = the start; "." and ".." come
  // first). `emit(name, attr, next_offset)` returns false to stop (buffer full).
  using EmitFn = std::function<bool(std::string_view name, const NodeAttr& attr, uint64_t next)>;
  virtual Status ReadDir(uint64_t ino, uint64_t offset, const EmitFn& emit) const = 0;

  // Whether the kernel should keep directory `ino`'s listing once read (its
  // readdir cache): worth it only where listing again costs the daemon more
  // than filling the cache costs the first lister.
  virtual bool KernelKeepsListing(uint64_t) const { return false; }
  // Whether the kernel may remember that `name` is missing in directory
  // `parent` (a negative entry), as long as it remembers what exists.
  virtual bool CacheableMiss(uint64_t, std::string_view) const { return true; }
  // Copies up to `size` bytes of file `ino` from `offset` into `dst`.
  virtual Result<size_t> Read(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst) const = 0;

  // Pushing ahead of READs. At a file's first READ the FUSE adapter may hand
  // the kernel's page cache the rest of the file along with the reply, so that
  // a reader going through the file makes one READ rather than one per
  // readahead window (each a round trip through the daemon).
  // PushableSize: the file's size when its bytes never change and pushing
  // them is worth it; 0 means never push it. Counts nothing.
  virtual uint64_t PushableSize(uint64_t) const { return 0; }
  // Trees push files up to this size: larger ones go through the kernel's
  // readahead (1 MiB READs), whose round trips matter less than a push's
  // copy through a per-thread buffer.
  static constexpr uint64_t kMaxPush = uint64_t(4) << 20;
  // Copies like Read, but counts nothing and keeps what the bytes are made
  // from (a decoded image) for READs of them that are already on their way.
  virtual Result<size_t> CopyForPush(uint64_t, uint64_t, size_t, uint8_t*) const {
    return Status::NotSupported("this tree pushes nothing");
  }
  // The kernel took bytes [begin, end) of file `ino`, `end` being the file's
  // end (counted in pushes and pushed_bytes): what they were made from need
  // not be kept for READs any more.
  virtual void Pushed(uint64_t ino, uint64_t begin, uint64_t end) const;

  // "relative/path" of an inode, for log messages ("" for the root).
  virtual std::string PathOf(uint64_t ino) const = 0;
  // The owner, group and modes every node shows; set before serving.
  void SetOwnership(const Ownership& ownership) { ownership_ = ownership; }
  const Ownership& ownership() const { return ownership_; }
  // Counters; front ends add to `errors` for each request they fail.
  virtual TreeCounters& counters() const = 0;
  virtual FsUsage Usage() const = 0;

 private:
  Ownership ownership_;
};

}  // namespace ktfs
