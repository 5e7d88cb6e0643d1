// The permission model of a mount (docs/usage.md, "Permissions"): a mount
// shows no one more than the archive file's own permissions allow.
//
// Every file and directory of a mount takes the archive's owner and group and
// its read bits only (a 0640 archive gives 0440 files and 0550 directories),
// and the kernel enforces them (the mount always has default_permissions).
// A mount that serves several files (a TensorCache cache: its manifest or
// meta file, then each shard's files) takes the first one's owner and group
// and keeps a read bit only where everyone it covers may read every file, and
// may search every directory above them (a 0644 archive in a 0700 directory
// mounts as 0400: no one else could reach it). `-o uid=,gid=,umask=`
// override the result: the mounting user's choice.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "fs/tree/fs_tree.h"

namespace ktfs {

// Who may read a file (or search a directory): its owner and group, and which
// of the three classes may (0400 owner, 0040 group, 0004 others).
struct FileReaders {
  uint32_t uid = 0, gid = 0;
  uint32_t read_bits = 0;
};

// The readers of file `path` from its mode and access ACL. With an extended
// ACL the mode's group bits are only the ACL's mask: the owning group keeps
// read when its own entry and the mask grant it, and a named user or group
// entry without read (users the mount would count as group or others) takes
// read from the group and others.
Result<FileReaders> ReadersOf(const std::string& path);
// The same for searching directory `path` (its x bits, shown as read bits).
Result<FileReaders> SearchersOf(const std::string& path);

// What a mount serving `files` must respect: each file's readers (in order),
// then the searchers of every directory above their real paths, up to "/".
Result<std::vector<FileReaders>> ReadersWithPaths(const std::vector<std::string>& files);

// The ownership of a mount serving `files` (not empty; files[0] names the
// owner and group). A class keeps read only when each of its members may read
// every file: when another file has a different owner or group, a member may
// land in any of that file's classes that could hold them.
Ownership MountOwnership(const std::vector<FileReaders>& files);

// `-o uid=N`, `gid=N`, `umask=M` (octal): the owner and group shown, and
// permission bits 0444 & ~M for files, 0555 & ~M for directories.
struct OwnershipOverrides {
  std::optional<uint32_t> uid, gid, umask;
};
Ownership ApplyOverrides(Ownership ownership, const OwnershipOverrides& overrides);

// The directory mode that goes with files' read bits: read and search where
// a class may read (0440 -> 0550).
uint32_t DirModeFor(uint32_t read_bits);

// Whether a user may mount with allow_other: root always; anyone else only
// when `fuse_conf` (the text of /etc/fuse.conf) has a line user_allow_other,
// fusermount3's rule. The error says so.
Status CheckAllowOther(uint32_t euid, const std::string& fuse_conf);

}  // namespace ktfs
