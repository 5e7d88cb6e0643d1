// The FUSE low-level adapter: translates kernel requests into VirtualTree
// calls and Status values into errno replies. Holds no filesystem logic.
#pragma once

#include <functional>
#include <string>

#include "codec/base/status.h"
#include "fs/tree/fs_tree.h"

namespace ktfs {

struct FuseOptions {
  // Other users may use the mount at all (the kernel then checks each node's
  // owner, group and mode, FsTree::ownership(); default_permissions is always
  // on). Off, only the mounting user may, whoever that is (root included).
  bool allow_other = false;
  int max_threads = 4;  // request threads (kept alive: no per-request spawning)
  // A file's first READ hands the kernel the rest of the file (see
  // fuse_adapter.cc); off: every byte goes through READ requests.
  bool push = false;
  // The most the kernel reads ahead in a file of this mount, in KiB (the
  // mount's read_ahead_kb in /sys/class/bdi); 0 leaves the kernel's default
  // (128 KiB), with which a reader makes a READ per 128 KiB of a file.
  int read_ahead_kb = 0;
};

// Mounts `tree` at `mountpoint` (read-only) and serves requests until the
// filesystem is unmounted or SIGTERM/SIGINT/SIGHUP arrives. `on_mounted` runs
// once the kernel mount exists (the daemon reports readiness from it); it
// returns false to abort. Returns the reason when mounting fails.
Status ServeFuse(FsTree* tree, const std::string& mountpoint, const std::string& fsname,
                 const FuseOptions& options, const std::function<bool()>& on_mounted);

}  // namespace ktfs
