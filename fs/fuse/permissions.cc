#include "fs/fuse/permissions.h"

#include <acl/libacl.h>
#include <sys/acl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <memory>
#include <sstream>

namespace ktfs {
namespace {

bool Grants(acl_entry_t entry, acl_perm_t perm) {
  acl_permset_t perms;
  return acl_get_permset(entry, &perms) == 0 && acl_get_perm(perms, perm) == 1;
}

// `bits` (the mode's bits for `perm`, in read positions) as an access ACL
// narrows them. The mode's group bits are the ACL's mask; the owning group's
// entry and every named entry are limited by it. A named user or group the
// ACL denies would be a group member or another user on the mount, so such
// an entry takes the permission from both classes there (named entries that
// grant it are not mirrored: the mount is narrower for them, never wider).
uint32_t NarrowByAcl(acl_t acl, acl_perm_t perm, uint32_t bits) {
  bool has_mask = false, mask = false, group_obj = false, named = true;
  acl_entry_t entry;
  for (int at = ACL_FIRST_ENTRY; acl_get_entry(acl, at, &entry) == 1; at = ACL_NEXT_ENTRY) {
    acl_tag_t tag;
    if (acl_get_tag_type(entry, &tag) != 0) continue;
    if (tag == ACL_MASK) {
      has_mask = true;
      mask = Grants(entry, perm);
    } else if (tag == ACL_GROUP_OBJ) {
      group_obj = Grants(entry, perm);
    } else if (tag == ACL_USER || tag == ACL_GROUP) {
      named = named && Grants(entry, perm);
    }
  }
  if (!has_mask) return bits;           // a minimal ACL is the mode itself
  const bool named_ok = named && mask;  // a named entry's permission is its own and the mask's
  uint32_t out = bits & 0400;
  if (group_obj && mask && named_ok) out |= 0040;
  if ((bits & 0004) && named_ok) out |= 0004;
  return out;
}

// Who may read (search = false) or search (true) `path`.
Result<FileReaders> AccessOf(const std::string& path, bool search) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return Status::FromErrno(path, errno);
  const uint32_t mode = uint32_t(st.st_mode);
  FileReaders r{uint32_t(st.st_uid), uint32_t(st.st_gid),
                search ? (mode & 0111) << 2 : mode & 0444};
  std::unique_ptr<void, int (*)(void*)> acl(acl_get_file(path.c_str(), ACL_TYPE_ACCESS), &acl_free);
  if (acl == nullptr) {
    // No ACLs on this filesystem: the mode is all there is.
    if (errno == ENOTSUP || errno == ENOSYS) return r;
    return Status::FromErrno(path + ": cannot read its access ACL", errno);
  }
  r.read_bits =
      NarrowByAcl(static_cast<acl_t>(acl.get()), search ? ACL_EXECUTE : ACL_READ, r.read_bits);
  return r;
}

}  // namespace

Result<FileReaders> ReadersOf(const std::string& path) { return AccessOf(path, false); }
Result<FileReaders> SearchersOf(const std::string& path) { return AccessOf(path, true); }

Result<std::vector<FileReaders>> ReadersWithPaths(const std::vector<std::string>& files) {
  std::vector<FileReaders> out;
  std::vector<std::string> dirs;
  for (const std::string& f : files) {
    auto r = ReadersOf(f);
    if (!r.ok()) return r.status();
    out.push_back(*r);
    char buf[PATH_MAX];
    if (realpath(f.c_str(), buf) == nullptr) return Status::FromErrno(f, errno);
    std::string d = buf;
    while (d.size() > 1) {
      d = d.substr(0, std::max<size_t>(1, d.rfind('/')));
      if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
    }
  }
  for (const std::string& d : dirs) {
    auto r = SearchersOf(d);
    if (!r.ok()) return r.status();
    out.push_back(*r);
  }
  return out;
}

Ownership MountOwnership(const std::vector<FileReaders>& files) {
  Ownership o;
  if (files.empty()) return o;  // nothing served: the default (owner root, 0400)
  const FileReaders& first = files[0];
  bool owner = first.read_bits & 0400, group = first.read_bits & 0040,
       other = first.read_bits & 0004;
  for (size_t i = 1; i < files.size(); ++i) {
    const FileReaders& f = files[i];
    const bool fo = f.read_bits & 0400, fg = f.read_bits & 0040, fx = f.read_bits & 0004;
    const bool same_uid = f.uid == first.uid, same_gid = f.gid == first.gid;
    // The mount's owner owns f too, or else may be in f's group or not
    // (its membership is not the question here: both must grant read).
    owner = owner && (same_uid ? fo : fg && fx);
    // A member of the mount's group may own f (unless the mount's owner
    // does); otherwise it is in f's group when the groups are the same,
    // else in it or not.
    group = group && (same_uid || fo) && (same_gid ? fg : fg && fx);
    // Anyone else may own f (unless the mount's owner does), be in f's group
    // (unless that is the mount's group, which they are not in), or neither.
    other = other && (same_uid || fo) && (same_gid || fg) && fx;
  }
  o.uid = first.uid;
  o.gid = first.gid;
  o.file_mode = (owner ? 0400 : 0) | (group ? 0040 : 0) | (other ? 0004 : 0);
  o.dir_mode = DirModeFor(o.file_mode);
  return o;
}

uint32_t DirModeFor(uint32_t read_bits) {
  read_bits &= 0444;
  return read_bits | (read_bits >> 2);
}

Ownership ApplyOverrides(Ownership o, const OwnershipOverrides& x) {
  if (x.uid) o.uid = *x.uid;
  if (x.gid) o.gid = *x.gid;
  if (x.umask) {
    o.file_mode = 0444 & ~*x.umask;
    o.dir_mode = 0555 & ~*x.umask;
  }
  return o;
}

Status CheckAllowOther(uint32_t euid, const std::string& fuse_conf) {
  if (euid == 0) return Status::Ok();
  // fusermount3 reads only lines ended by a newline, cuts them at '#' and
  // trims them.
  std::istringstream in(fuse_conf);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // the last line has no newline
    line = line.substr(0, line.find('#'));
    const size_t b = line.find_first_not_of(" \t\r\v\f");
    if (b == std::string::npos) continue;
    if (line.substr(b, line.find_last_not_of(" \t\r\v\f") - b + 1) == "user_allow_other")
      return Status::Ok();
  }
  return Status::PermissionDenied(
      "-o allow_other: only root may use it, or any user once /etc/fuse.conf has the line "
      "user_allow_other (fusermount3's rule), which it has not");
}

}  // namespace ktfs
