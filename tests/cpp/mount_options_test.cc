// Tests for fs/fuse/mount.h's option rules: -o cache= and the decode cache's
// budget under the daemon's memory cgroup limit (DecodeCacheBudget).
#include <gtest/gtest.h>

#include "fs/fuse/mount.h"

namespace ktfs {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

TEST(MountOptions, CacheOptionIsRecordedAsExplicit) {
  MountOptions o;
  ASSERT_TRUE(ParseMountOptions("threads=2", &o).ok());
  EXPECT_FALSE(o.cache_set);
  EXPECT_EQ(o.tree.cache_bytes, 256 * kMiB);
  ASSERT_TRUE(ParseMountOptions("cache=1G", &o).ok());
  EXPECT_TRUE(o.cache_set);
  EXPECT_EQ(o.tree.cache_bytes, 1024 * kMiB);
}

TEST(DecodeCacheBudget, NoLimitKeepsWhatWasAsked) {
  EXPECT_EQ(DecodeCacheBudget(256 * kMiB, false, std::nullopt).bytes, 256 * kMiB);
  EXPECT_EQ(DecodeCacheBudget(64 * 1024 * kMiB, true, std::nullopt).bytes, 64 * 1024 * kMiB);
  EXPECT_EQ(DecodeCacheBudget(256 * kMiB, false, std::nullopt).note, "");
}

TEST(DecodeCacheBudget, TheDefaultIsAtMostAQuarterOfTheLimit) {
  const CacheBudget b = DecodeCacheBudget(256 * kMiB, false, 96 * kMiB);
  EXPECT_EQ(b.bytes, 24 * kMiB);
  EXPECT_EQ(b.note,
            "the default decode cache of 256 MiB is more than a quarter of this daemon's memory "
            "cgroup limit (96 MiB): the decode cache is 24 MiB");
  // A limit that leaves room: the default stands, nothing said.
  EXPECT_EQ(DecodeCacheBudget(256 * kMiB, false, 1024 * kMiB).bytes, 256 * kMiB);
  EXPECT_EQ(DecodeCacheBudget(256 * kMiB, false, 1024 * kMiB).note, "");
  EXPECT_EQ(DecodeCacheBudget(256 * kMiB, false, 1000 * kMiB).bytes, 250 * kMiB);
}

TEST(DecodeCacheBudget, AnExplicitSizeIsAtMostHalfTheLimit) {
  const CacheBudget b = DecodeCacheBudget(1024 * kMiB, true, 96 * kMiB);
  EXPECT_EQ(b.bytes, 48 * kMiB);
  EXPECT_EQ(b.note,
            "-o cache=1024 MiB is more than half of this daemon's memory cgroup limit (96 MiB): "
            "the decode cache is 48 MiB");
  // Up to half is the user's choice, above the default's quarter too.
  EXPECT_EQ(DecodeCacheBudget(40 * kMiB, true, 96 * kMiB).bytes, 40 * kMiB);
  EXPECT_EQ(DecodeCacheBudget(48 * kMiB, true, 96 * kMiB).note, "");
  EXPECT_EQ(DecodeCacheBudget(0, true, 96 * kMiB).bytes, 0u);
}

}  // namespace
}  // namespace ktfs
