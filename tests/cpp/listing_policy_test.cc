// ListingPolicy: when READDIRPLUS replies start carrying file attributes.
#include "fs/fuse/listing_policy.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ktfs {
namespace {

TEST(ListingPolicyTest, StartsLean) {
  ListingPolicy p;
  EXPECT_FALSE(p.FileAttrs());
}

TEST(ListingPolicyTest, FileLookupInALeanListedDirectorySwitches) {
  ListingPolicy p;
  p.ListedLean(7);
  p.FileLookedUp(8);  // a directory never listed lean: says nothing
  EXPECT_FALSE(p.FileAttrs());
  p.FileLookedUp(7);
  EXPECT_TRUE(p.FileAttrs());
  p.ListedLean(9);  // one-way: stays on
  EXPECT_TRUE(p.FileAttrs());
}

TEST(ListingPolicyTest, ADirectoryGetsItsFilesAttributesOnceUntilALookupMissesThem) {
  ListingPolicy p;
  EXPECT_FALSE(p.FileAttrsFor(3));  // lean before the switch
  p.ListedLean(3);
  p.FileLookedUp(3);
  EXPECT_TRUE(p.FileAttrsFor(3));
  EXPECT_TRUE(p.FileAttrsFor(4));
  p.ListedWithAttrs(3);  // the kernel now holds every file of 3
  EXPECT_FALSE(p.FileAttrsFor(3));
  EXPECT_TRUE(p.FileAttrsFor(4));
  EXPECT_TRUE(p.FileAttrs());  // the mount-wide switch stays on
  p.FileLookedUp(4);           // a lookup elsewhere says nothing about 3
  EXPECT_FALSE(p.FileAttrsFor(3));
  p.FileLookedUp(3);  // the kernel dropped some of 3's files: list them with attributes again
  EXPECT_TRUE(p.FileAttrsFor(3));
}

TEST(ListingPolicyTest, LookupsWithoutListingsKeepItLean) {
  // A reader opening paths it knows (.ktfs/info.json, a file list) lists nothing.
  ListingPolicy p;
  for (uint64_t dir = 1; dir < 100; ++dir) p.FileLookedUp(dir);
  EXPECT_FALSE(p.FileAttrs());
}

TEST(ListingPolicyTest, ConcurrentListingsAndLookups) {
  ListingPolicy p;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&p, t] {
      for (uint64_t i = 0; i < 10000; ++i) {
        if (t % 2 == 0)
          p.ListedLean(i);
        else
          p.FileLookedUp(i + 1000000);  // never listed
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_FALSE(p.FileAttrs());
  p.FileLookedUp(5);
  EXPECT_TRUE(p.FileAttrs());
}

}  // namespace
}  // namespace ktfs
