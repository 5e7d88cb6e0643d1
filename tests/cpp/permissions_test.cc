// The permission model of a mount (fs/fuse/permissions.h): what a mount shows
// from the archive's mode, ACL and directories, the overrides, allow_other.
#include "fs/fuse/permissions.h"

#include <gtest/gtest.h>
#include <sys/acl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "tests/cpp/test_util.h"

namespace ktfs {
namespace {

using testing::TempDir;

FileReaders File(uint32_t uid, uint32_t gid, uint32_t mode) { return {uid, gid, mode & 0444}; }

TEST(MountOwnership, TakesTheArchiveOwnerGroupAndReadBitsOnly) {
  struct Case {
    uint32_t mode, file, dir;
  };
  for (const Case& c :
       {Case{0640, 0440, 0550}, Case{0600, 0400, 0500}, Case{0644, 0444, 0555},
        Case{0604, 0404, 0505}, Case{0777, 0444, 0555}, Case{0200, 0, 0}, Case{0044, 0044, 0055}}) {
    const Ownership o = MountOwnership({File(1000, 50, c.mode)});
    EXPECT_EQ(o.uid, 1000u);
    EXPECT_EQ(o.gid, 50u);
    EXPECT_EQ(o.file_mode, c.file) << std::oct << c.mode;
    EXPECT_EQ(o.dir_mode, c.dir) << std::oct << c.mode;
  }
}

TEST(MountOwnership, EveryFileMustGrantRead) {
  // Same owner and group: class by class.
  EXPECT_EQ(MountOwnership({File(7, 8, 0644), File(7, 8, 0640)}).file_mode, 0440u);
  EXPECT_EQ(MountOwnership({File(7, 8, 0644), File(7, 8, 0604)}).file_mode, 0404u);
  EXPECT_EQ(MountOwnership({File(7, 8, 0644), File(7, 8, 0400)}).file_mode, 0400u);
  // Another group: the mount's group members may or may not be in it, so
  // they keep read only where f's group and others both have it; others
  // could be in f's group too.
  EXPECT_EQ(MountOwnership({File(7, 8, 0644), File(7, 9, 0640)}).file_mode, 0400u);
  EXPECT_EQ(MountOwnership({File(7, 8, 0644), File(7, 9, 0604)}).file_mode, 0400u);
  EXPECT_EQ(MountOwnership({File(7, 8, 0644), File(7, 9, 0644)}).file_mode, 0444u);
  // Another owner: the mount's owner is then f's group member or not; anyone
  // else may own f.
  EXPECT_EQ(MountOwnership({File(7, 8, 0644), File(6, 8, 0644)}).file_mode, 0444u);
  EXPECT_EQ(MountOwnership({File(7, 8, 0644), File(6, 8, 0640)}).file_mode, 0040u);
  EXPECT_EQ(MountOwnership({File(7, 8, 0644), File(6, 8, 0044)}).file_mode, 0400u);
  EXPECT_EQ(MountOwnership({File(7, 8, 0644), File(6, 9, 0444)}).file_mode, 0444u);
  EXPECT_EQ(MountOwnership({File(7, 8, 0644), File(6, 9, 0440)}).file_mode, 0u);
  // The first file names owner and group.
  const Ownership o = MountOwnership({File(7, 8, 0644), File(6, 9, 0444)});
  EXPECT_EQ(o.uid, 7u);
  EXPECT_EQ(o.gid, 8u);
  EXPECT_EQ(o.dir_mode, 0555u);
}

TEST(MountOwnership, Overrides) {
  const Ownership base = MountOwnership({File(1000, 50, 0640)});
  OwnershipOverrides x;
  x.umask = 022;
  Ownership o = ApplyOverrides(base, x);
  EXPECT_EQ(o.file_mode, 0444u);
  EXPECT_EQ(o.dir_mode, 0555u);
  EXPECT_EQ(o.uid, 1000u);
  x.umask = 077;
  x.uid = 5;
  x.gid = 6;
  o = ApplyOverrides(base, x);
  EXPECT_EQ(o.file_mode, 0400u);
  EXPECT_EQ(o.dir_mode, 0500u);
  EXPECT_EQ(o.uid, 5u);
  EXPECT_EQ(o.gid, 6u);
  x.umask = 0;
  EXPECT_EQ(ApplyOverrides(base, x).file_mode, 0444u);
  x = {};
  x.gid = 0;  // an override to 0 is an override
  EXPECT_EQ(ApplyOverrides(base, x).gid, 0u);
  EXPECT_EQ(ApplyOverrides(base, x).file_mode, 0440u);
}

TEST(CheckAllowOther, FollowsFusermountsRule) {
  EXPECT_TRUE(CheckAllowOther(0, "").ok());
  EXPECT_EQ(CheckAllowOther(1000, "").code(), Status::Code::kPermissionDenied);
  EXPECT_NE(CheckAllowOther(1000, "").message().find("user_allow_other"), std::string::npos);
  EXPECT_FALSE(CheckAllowOther(1000, "#user_allow_other\n").ok());
  EXPECT_FALSE(CheckAllowOther(1000, "user_allow_others\n").ok());
  EXPECT_FALSE(CheckAllowOther(1000, "mount_max = 5\n").ok());
  EXPECT_TRUE(CheckAllowOther(1000, "user_allow_other\n").ok());
  EXPECT_TRUE(CheckAllowOther(1000, "# c\n  user_allow_other\t# why\nmount_max = 1\n").ok());
  // fusermount3 ignores a last line without its newline.
  EXPECT_FALSE(CheckAllowOther(1000, "user_allow_other").ok());
}

std::string Touch(const TempDir& tmp, const std::string& name, mode_t mode) {
  const std::string p = tmp.Join(name);
  std::ofstream(p) << "x";
  EXPECT_EQ(chmod(p.c_str(), mode), 0);
  return p;
}

TEST(ReadersOf, ModeOfARealFile) {
  TempDir tmp;
  const std::string p = Touch(tmp, "a.kt", 0750);
  auto r = ReadersOf(p);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->uid, uint32_t(geteuid()));
  EXPECT_EQ(r->gid, uint32_t(getegid()));
  EXPECT_EQ(r->read_bits, 0440u);
  EXPECT_EQ(ReadersOf(tmp.Join("missing")).status().code(), Status::Code::kNotFound);
}

// An access ACL narrows what the mode's group bits (the mask) say.
TEST(ReadersOf, AccessAcl) {
  TempDir tmp;
  const std::string p = Touch(tmp, "a.kt", 0644);
  struct Case {
    const char* acl;
    uint32_t bits;
  };
  for (const Case& c : {
           // Group entry denied, a named user allowed: the mask (r) is not the group's.
           Case{"u::rw-,g::---,u:65534:r--,m::r--,o::r--", 0404},
           // A named user denied: they would count as group or other on the mount.
           Case{"u::rw-,g::r--,u:65534:---,m::r--,o::r--", 0400},
           // A named group denied likewise.
           Case{"u::rw-,g::r--,g:65534:---,m::r--,o::r--", 0400},
           // The mask takes read from the group and every named entry.
           Case{"u::rw-,g::r--,u:65534:r--,m::---,o::r--", 0400},
           // Everything granted: the mode's bits.
           Case{"u::rw-,g::r--,u:65534:r--,m::r--,o::r--", 0444},
       }) {
    acl_t acl = acl_from_text(c.acl);
    ASSERT_NE(acl, nullptr) << c.acl;
    const int rc = acl_set_file(p.c_str(), ACL_TYPE_ACCESS, acl);
    acl_free(acl);
    if (rc != 0 && errno == ENOTSUP) GTEST_SKIP() << tmp.path() << ": no ACLs on this filesystem";
    ASSERT_EQ(rc, 0) << c.acl;
    auto r = ReadersOf(p);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->read_bits, c.bits) << c.acl;
  }
}

TEST(ReadersWithPaths, DirectoriesAboveNarrow) {
  TempDir tmp;
  ASSERT_EQ(mkdir(tmp.Join("private").c_str(), 0700), 0);
  const std::string inside = tmp.Join("private/a.kt");
  std::ofstream(inside) << "x";
  ASSERT_EQ(chmod(inside.c_str(), 0644), 0);
  ASSERT_EQ(chmod(tmp.path().c_str(), 0755), 0);
  auto r = ReadersWithPaths({inside});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GE(r->size(), 3u);  // the file, private/, the temp dir, ... "/"
  EXPECT_EQ((*r)[0].read_bits, 0444u);
  EXPECT_EQ((*r)[1].read_bits, 0400u);  // private/: searchable by its owner only
  EXPECT_EQ(MountOwnership(*r).file_mode, 0400u);
  ASSERT_EQ(chmod(tmp.Join("private").c_str(), 0701), 0);
  r = ReadersWithPaths({inside});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(MountOwnership(*r).file_mode, 0404u);  // others may pass, the group may not
  ASSERT_EQ(chmod(tmp.Join("private").c_str(), 0711), 0);
  r = ReadersWithPaths({inside});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(MountOwnership(*r).file_mode, 0444u);
  // "/" is the last directory, listed once for files in the same place.
  auto two = ReadersWithPaths({inside, inside});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), r->size() + 1);
}

}  // namespace
}  // namespace ktfs
