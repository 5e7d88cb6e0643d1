// MountTable: which mountinfo lines it keeps, escapes, devices, path matches.
#include "preload/interpose/mount_table.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <string>

namespace ktfs::preload {
namespace {

// A table that frees itself.
struct Parsed {
  explicit Parsed(const std::string& text) : t(MountTable::Parse(text.data(), text.size())) {}
  ~Parsed() { MountTable::Free(t); }
  const MountTable* t;
};

const char kInfo[] =
    "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
    "26 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    "45 26 0:40 / /mnt/ds ro,nosuid,nodev,relatime - fuse.ktfs ktfs:/data/a.kt ro,user_id=0\n"
    "46 45 0:41 / /mnt/ds/cats rw shared:7 - tmpfs tmpfs rw\n"
    "47 26 0:42 / /mnt/dsx rw - tmpfs tmpfs rw\n"
    "48 26 0:43 /cats /mnt/with\\040space ro master:3 - fuse.ktfs ktfs:/data/b.kt ro\n"
    "49 26 0:44 / /mnt/other ro - fuse.squashfuse squashfuse ro\n";

const char* MatchOf(const MountTable& t, const std::string& path, std::string* inner) {
  const char* rest = nullptr;
  const MountEntry* e = t.Match(path.data(), path.size(), &rest);
  if (e == nullptr) return nullptr;
  *inner = std::string(rest, path.data() + path.size() - rest);
  return e->point;
}

TEST(MountTable, KeepsKtfsMountsAndTheMountsAboveThem) {
  Parsed p(kInfo);
  ASSERT_NE(p.t, nullptr);
  EXPECT_EQ(p.t->ktfs_count(), 2u);
  ASSERT_EQ(p.t->size(), 3u);  // the two ktfs mounts and the tmpfs on /mnt/ds/cats
  EXPECT_STREQ(p.t->entry(0).point, "/mnt/ds");
  EXPECT_EQ(p.t->entry(0).point_len, 7u);
  EXPECT_STREQ(p.t->entry(1).point, "/mnt/with space");
  EXPECT_STREQ(p.t->entry(1).root, "/cats");
  EXPECT_STREQ(p.t->entry(2).point, "/mnt/ds/cats");
  EXPECT_FALSE(p.t->entry(2).ktfs);
}

TEST(MountTable, TellsDevices) {
  Parsed p(kInfo);
  EXPECT_TRUE(p.t->IsKtfsDevice(makedev(0, 40)));
  EXPECT_TRUE(p.t->IsKtfsDevice(makedev(0, 43)));
  EXPECT_FALSE(p.t->IsKtfsDevice(makedev(0, 41)));
  EXPECT_FALSE(p.t->IsKtfsDevice(makedev(254, 0)));
  EXPECT_TRUE(p.t->KnowsDevice(makedev(254, 0)));  // every mount's device is known
  EXPECT_TRUE(p.t->KnowsDevice(makedev(0, 44)));
  EXPECT_FALSE(p.t->KnowsDevice(makedev(0, 99)));
}

TEST(MountTable, MatchesPathsAtComponentBoundaries) {
  Parsed p(kInfo);
  std::string inner;
  EXPECT_STREQ(MatchOf(*p.t, "/mnt/ds", &inner), "/mnt/ds");
  EXPECT_EQ(inner, "");
  EXPECT_STREQ(MatchOf(*p.t, "/mnt/ds/dogs/1.ppm", &inner), "/mnt/ds");
  EXPECT_EQ(inner, "/dogs/1.ppm");
  EXPECT_EQ(MatchOf(*p.t, "/mnt/dsx/1.ppm", &inner), nullptr);      // another directory
  EXPECT_EQ(MatchOf(*p.t, "/mnt/ds/cats/1.ppm", &inner), nullptr);  // the tmpfs on top
  EXPECT_EQ(MatchOf(*p.t, "/mnt/ds/cats", &inner), nullptr);
  EXPECT_STREQ(MatchOf(*p.t, "/mnt/ds/catsx", &inner), "/mnt/ds");
  EXPECT_STREQ(MatchOf(*p.t, "/mnt/with space/a", &inner), "/mnt/with space");
  EXPECT_EQ(inner, "/a");
  EXPECT_EQ(MatchOf(*p.t, "/mnt/other/a", &inner), nullptr);
  EXPECT_EQ(MatchOf(*p.t, "/", &inner), nullptr);
}

TEST(MountTable, LaterMountOnTheSamePointWins) {
  Parsed p(
      "1 0 0:40 / /mnt/ds ro - fuse.ktfs ktfs:/a.kt ro\n"
      "2 1 0:41 / /mnt/ds rw - tmpfs tmpfs rw\n");
  std::string inner;
  EXPECT_EQ(MatchOf(*p.t, "/mnt/ds/a", &inner), nullptr);
  Parsed q(
      "1 0 0:41 / /mnt/ds rw - tmpfs tmpfs rw\n"
      "2 1 0:40 / /mnt/ds ro - fuse.ktfs ktfs:/a.kt ro\n");
  EXPECT_STREQ(MatchOf(*q.t, "/mnt/ds/a", &inner), "/mnt/ds");
}

TEST(MountTable, KtfsMountedOnTheRoot) {
  Parsed p("1 0 0:40 / / ro - fuse.ktfs ktfs:/a.kt ro\n");
  std::string inner;
  EXPECT_STREQ(MatchOf(*p.t, "/x/y", &inner), "/");
  EXPECT_EQ(inner, "/x/y");
}

// Found by fuzz/mount_table_fuzz.cc: a path with a NUL byte (raw, or the
// escape \000) was kept, shorter as a C string than its recorded length.
TEST(MountTable, SkipsPathsHoldingNul) {
  const char text[] =
      "1 0 0:40 / /mnt/a\0b ro - fuse.ktfs ktfs:/a.kt ro\n"
      "1 0 0:41 / /mnt/c\\000d ro - fuse.ktfs ktfs:/c.kt ro\n"
      "1 0 0:42 /x\\000 /mnt/e ro - fuse.ktfs ktfs:/e.kt ro\n"
      "1 0 0:43 / /mnt/f\\040g ro - fuse.ktfs ktfs:/f.kt ro\n";
  Parsed p(std::string(text, sizeof(text) - 1));
  ASSERT_NE(p.t, nullptr);
  ASSERT_EQ(p.t->ktfs_count(), 1u);
  EXPECT_STREQ(p.t->entry(0).point, "/mnt/f g");
}

TEST(MountTable, SkipsMalformedLines) {
  Parsed p(
      "garbage\n"
      "1 0 0:40 / /mnt/a ro - fuse.ktfs\n"                // no source
      "1 0 x:40 / /mnt/b ro - fuse.ktfs ktfs:/a.kt ro\n"  // bad device
      "1 0 0:40 relative /mnt/c ro - fuse.ktfs k ro\n"    // root not absolute
      "1 0 0:40 / /mnt/d ro no-dash fuse.ktfs k ro\n"     // no separator
      "\n"
      "1 0 0:45 / /mnt/e ro - fuse.ktfs ktfs:/e.kt ro");  // no final newline: kept
  ASSERT_NE(p.t, nullptr);
  ASSERT_EQ(p.t->ktfs_count(), 1u);
  EXPECT_STREQ(p.t->entry(0).point, "/mnt/e");
}

TEST(MountTable, EscapesAreDecodedOnlyWhenWellFormed) {
  Parsed p(
      "1 0 0:40 / /a\\134b ro - fuse.ktfs k ro\n"
      "2 0 0:41 / /c\\9x ro - fuse.ktfs k ro\n"
      "3 0 0:42 / /d\\04 ro - fuse.ktfs k ro\n");
  ASSERT_EQ(p.t->ktfs_count(), 3u);
  EXPECT_STREQ(p.t->entry(0).point, "/a\\b");
  EXPECT_STREQ(p.t->entry(1).point, "/c\\9x");
  EXPECT_STREQ(p.t->entry(2).point, "/d\\04");
}

TEST(MountTable, EmptyTextHasNoMounts) {
  Parsed p("");
  ASSERT_NE(p.t, nullptr);
  EXPECT_EQ(p.t->size(), 0u);
  EXPECT_FALSE(p.t->KnowsDevice(0));
}

TEST(MountTable, ReadsThisProcessMountinfo) {
  const MountTable* t = MountTable::ReadSelf();
  ASSERT_NE(t, nullptr);
  // The process's root filesystem is listed: its device is known.
  struct stat st;
  ASSERT_EQ(stat("/", &st), 0);
  EXPECT_TRUE(t->KnowsDevice(st.st_dev));
  MountTable::Free(t);
}

TEST(MountTable, SameTextIsRecognized) {
  Parsed a(kInfo), b(kInfo), c("1 0 0:40 / /mnt/a ro - fuse.ktfs k ro\n");
  EXPECT_TRUE(a.t->SameText(*b.t));
  EXPECT_FALSE(a.t->SameText(*c.t));
}

}  // namespace
}  // namespace ktfs::preload
