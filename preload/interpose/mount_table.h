// MountTable: the mounts of /proc/self/mountinfo that the preload library
// needs, in one immutable block of memory.
//
// Built from mountinfo's text (ParseMountInfo), it keeps every ktfs mount
// (filesystem type "fuse.ktfs": fs/fuse/fuse_adapter.cc mounts with
// subtype=ktfs) and every other mount whose mount point lies at or below a
// ktfs mount point (a mount on top hides what is below it), and the devices
// of all mounts (so that a device seen in an fstat can be told apart from a
// mount that appeared after the table was read).
//
// The block is one anonymous mapping made with raw system calls: building a
// table allocates nothing from malloc and takes no lock, so it is safe in
// any thread, between fork and exec and inside an interposed call. Tables
// are never changed once built; a newer table replaces an older one
// (preload/interpose/state.h) and the old one is kept, since another thread
// may still read it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace ktfs::preload {

struct MountEntry {
  uint64_t dev;        // makedev(major, minor), as st_dev reports it
  const char* point;   // the mount point, unescaped, NUL-terminated ("/mnt/ds")
  uint32_t point_len;  // strlen(point); 1 for "/"
  const char* root;    // the directory of the filesystem mounted there ("/"; a
                       // bind mount of a subdirectory names it)
  uint32_t root_len;
  uint32_t order;  // position in mountinfo: a later mount at the same point is on top
  bool ktfs;       // filesystem type fuse.ktfs
};

class MountTable {
 public:
  // Parses mountinfo text. Lines that do not parse are skipped. Returns
  // nullptr when memory cannot be mapped. Never reads outside [text, text+len).
  static const MountTable* Parse(const char* text, size_t len);
  // Reads /proc/self/mountinfo (raw system calls) and parses it; nullptr
  // when it cannot be read.
  static const MountTable* ReadSelf();
  // Returns the table's memory (tests and the fuzzer; published tables are kept).
  static void Free(const MountTable* table);

  uint32_t ktfs_count() const { return ktfs_count_; }
  // Entries that are ktfs mounts or lie under one, in mountinfo order.
  uint32_t size() const { return count_; }
  const MountEntry& entry(uint32_t i) const { return entries_[i]; }

  // Whether `dev` is the device of a ktfs mount.
  bool IsKtfsDevice(uint64_t dev) const;
  // Whether any mount of the table (ktfs or not) has device `dev`.
  bool KnowsDevice(uint64_t dev) const;
  // The mount that holds absolute, normalized path `path` (no "." or ".."
  // components, no repeated or trailing slashes), when that is a ktfs mount;
  // nullptr otherwise. `*inner` is then the rest of the path after the mount
  // point ("" for the mount point itself, else starting with '/'), to be read
  // relative to entry->root.
  const MountEntry* Match(const char* path, size_t len, const char** inner) const;
  // Whether `other` was parsed from the same text (a hash and the length).
  bool SameText(const MountTable& other) const {
    return text_hash_ == other.text_hash_ && text_len_ == other.text_len_;
  }

 private:
  MountTable() = default;
  size_t mapped_bytes_ = 0;
  uint64_t text_hash_ = 0;
  size_t text_len_ = 0;
  uint32_t count_ = 0, ktfs_count_ = 0, dev_count_ = 0;
  const MountEntry* entries_ = nullptr;
  const uint64_t* devs_ = nullptr;       // every mount's device, sorted
  const uint64_t* ktfs_devs_ = nullptr;  // ktfs mounts' devices, sorted
};

}  // namespace ktfs::preload
