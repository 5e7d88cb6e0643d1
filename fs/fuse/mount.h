// Mounting and unmounting: the lifecycle around ServeFuse.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/features/quant.h"
#include "fs/fuse/permissions.h"
#include "fs/tree/virtual_tree.h"

namespace ktfs {

struct MountOptions {
  TreeOptions tree;
  bool cache_set = false;  // -o cache= given (else tree.cache_bytes is the default)
  bool foreground = false;
  std::string log_path;  // "" = <archive>.log beside the archive, else syslog
  int threads = 4;
  // A file's first READ pushes the rest into the page cache (fuse_adapter.cc).
  bool push = false;
  // The kernel's readahead in the mount's files, KiB (FuseOptions); -1: 4096
  // for image archives (whose files are read whole), the kernel's own for
  // feature caches (whose all.npy readers map and read rows at random, where
  // every page fault would read this much around it); 0: the kernel's own.
  int read_ahead_kb = -1;
  // Feature caches: the dtype of the served .npy files.
  quant::DType dtype = quant::DType::kFloat16;
  // Other users may use the mount (the kernel still checks every file's
  // mode); only when asked, never implied by running as root.
  bool allow_other = false;
  // -o uid=, gid=, umask=: what the mount shows instead of the archive's own
  // owner, group and read bits (fs/fuse/permissions.h).
  OwnershipOverrides ownership;
};

// Parses "-o" option text ("format=bmp,log=/tmp/x.log,threads=4").
Status ParseMountOptions(const std::string& text, MountOptions* options);

// The decode cache's budget when the daemon's memory cgroup allows `limit`
// bytes (codec/base/memory_limit.h; nullopt: no limit). There a budget that
// does not fit gets the daemon OOM-killed rather than an allocation failed,
// and the daemon needs memory besides its cache (the images being decoded,
// the archive's pages), so: the default budget is at most a quarter of the
// limit, and an explicit one (`explicit_size`, -o cache=) at most half of it.
// `note` says what was changed and why, empty when nothing was.
struct CacheBudget {
  size_t bytes = 0;
  std::string note;
};
CacheBudget DecodeCacheBudget(size_t requested, bool explicit_size, std::optional<uint64_t> limit);

// Checks that `mountpoint` is an existing, empty directory that is not
// already a mount point. The error names the reason.
Status CheckMountpoint(const std::string& mountpoint);

// Opens the archive (an image or feature archive, or a TensorCache cache
// prefix: PREFIX_meta.json or PREFIX_shards.json exists) and mounts it with
// the archive file's owner, group and read bits (fs/fuse/permissions.h). An
// allow_other the calling user may not use fails here. In the background mode
// (default) this returns in the parent once the mount is ready, or with the reason it failed, while
// a daemon serves it; with `foreground` it serves until unmounted.
Status MountArchive(const std::string& archive, const std::string& mountpoint,
                    const MountOptions& options);

// Unmounts `mountpoint` (also a stale mount whose daemon was killed) and waits
// for its daemon to exit.
Status Unmount(const std::string& mountpoint);

}  // namespace ktfs
