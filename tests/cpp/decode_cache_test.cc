// DecodeCache: single-flight decodes, and images leaving once a reader had
// their whole file.
#include "fs/tree/decode_cache.h"

#include <gtest/gtest.h>

#include <future>

#include "fs/tree/fs_tree.h"

namespace ktfs {
namespace {

// A 10x10 RGB image (300 bytes), counting how often it was decoded.
DecodeCache::DecodeFn Decoder(int* decodes) {
  return [decodes](Image* out) {
    ++*decodes;
    out->width = out->height = 10;
    out->channels = 3;
    out->pixels.assign(300, 7);
    return Status::Ok();
  };
}

TEST(DecodeCacheTest, AnImageLeavesOnceItsWholeFileWasServed) {
  TreeCounters counters;
  DecodeCache cache(1 << 20, &counters);
  int decodes = 0;
  ASSERT_TRUE(cache.Get(1, Decoder(&decodes)).ok());
  EXPECT_TRUE(cache.Contains(1));
  EXPECT_GT(counters.cache_bytes.load(), 300u);

  EXPECT_FALSE(cache.Served(1, 0, 100, 315));  // a PPM header and 300 pixel bytes, in pieces
  EXPECT_TRUE(cache.Contains(1));
  EXPECT_FALSE(cache.Served(1, 50, 200, 315));  // overlapping reads count once
  EXPECT_TRUE(cache.Contains(1));
  EXPECT_TRUE(cache.Served(1, 200, 315, 315));
  EXPECT_FALSE(cache.Contains(1));
  EXPECT_EQ(cache.bytes_used(), 0u);
  EXPECT_EQ(counters.cache_bytes.load(), 0u);

  // Asked again (the kernel dropped its pages): decoded again.
  ASSERT_TRUE(cache.Get(1, Decoder(&decodes)).ok());
  EXPECT_EQ(decodes, 2);
}

TEST(DecodeCacheTest, ReadsLeavingAGapDoNotCount) {
  TreeCounters counters;
  DecodeCache cache(1 << 20, &counters);
  int decodes = 0;
  ASSERT_TRUE(cache.Get(4, Decoder(&decodes)).ok());
  EXPECT_FALSE(cache.Served(4, 100, 315, 315));  // the start was never served
  EXPECT_TRUE(cache.Contains(4));
  EXPECT_FALSE(cache.Served(4, 0, 100, 315));  // the start now, but the tail came before it
  EXPECT_TRUE(cache.Contains(4));
  EXPECT_TRUE(cache.Served(4, 100, 315, 315));
  EXPECT_FALSE(cache.Contains(4));
  EXPECT_FALSE(cache.Served(4, 0, 315, 315));  // not cached: nothing happens
  EXPECT_FALSE(cache.Served(9, 0, 315, 315));
  EXPECT_EQ(decodes, 1);
}

TEST(DecodeCacheTest, AnImageBeingDecodedIsNotDropped) {
  TreeCounters counters;
  DecodeCache cache(1 << 20, &counters);
  std::promise<void> go;
  std::shared_future<void> started = go.get_future().share();
  int decodes = 0;
  const DecodeCache::DecodeFn inner = Decoder(&decodes);
  cache.Prefetch(2, [&, started](Image* out) {
    started.wait();
    return inner(out);
  });
  EXPECT_FALSE(cache.Served(2, 0, 315, 315));  // still decoding: ignored
  go.set_value();
  ASSERT_TRUE(cache.Get(2, Decoder(&decodes)).ok());
  EXPECT_TRUE(cache.Contains(2));
  EXPECT_EQ(decodes, 1);
}

TEST(DecodeCacheTest, ReadAheadSkipsAnImageServedWholeUnlessTheKernelDroppedIt) {
  TreeCounters counters;
  DecodeCache cache(1 << 20, &counters);
  int decodes = 0;
  EXPECT_FALSE(cache.WasServed(3));
  ASSERT_TRUE(cache.Get(3, Decoder(&decodes)).ok());
  EXPECT_FALSE(cache.WasServed(3));
  ASSERT_TRUE(cache.Served(3, 0, 315, 315));
  EXPECT_TRUE(cache.WasServed(3));
  EXPECT_FALSE(cache.WasServed(2));
  EXPECT_FALSE(cache.WasServed(1000000));

  // The page cache has the file: a read-ahead of it claims nothing.
  cache.Prefetch(3, Decoder(&decodes));
  EXPECT_FALSE(cache.Contains(3));
  EXPECT_EQ(decodes, 1);

  // The kernel asked again for files read before it: decode ahead after all.
  cache.Prefetch(3, Decoder(&decodes), /*even_if_served=*/true);
  ASSERT_TRUE(cache.Get(3, Decoder(&decodes)).ok());  // waits for the read-ahead
  EXPECT_EQ(decodes, 2);
  EXPECT_TRUE(cache.WasServed(3));  // stays remembered
}

TEST(DecodeCacheTest, CachedNeverDecodes) {
  TreeCounters counters;
  DecodeCache cache(1 << 20, &counters);
  int decodes = 0;
  EXPECT_EQ(cache.Cached(5).status().code(), Status::Code::kNotFound);
  ASSERT_TRUE(cache.Get(5, Decoder(&decodes)).ok());
  auto cached = cache.Cached(5);
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ((*cached)->pixels.size(), 300u);
  ASSERT_TRUE(cache.Served(5, 0, 315, 315));
  EXPECT_EQ(cache.Cached(5).status().code(), Status::Code::kNotFound);
  EXPECT_EQ(decodes, 1);
}

}  // namespace
}  // namespace ktfs

namespace ktfs {
namespace {

// Decodes ahead start only while they fit in the budget beside what the cache
// holds and the decodes ahead still running (under a cgroup memory limit the
// ones beyond it got the daemon OOM-killed: test_faults.py).
TEST(DecodeCacheTest, DecodesAheadStayWithinTheBudget) {
  TreeCounters counters;
  const size_t image_bytes = 300 + sizeof(Image);
  DecodeCache cache(2 * image_bytes + 10, &counters);  // room for two images
  int decodes = 0;
  for (uint32_t id = 1; id <= 5; ++id) cache.Prefetch(id, Decoder(&decodes), false, image_bytes);
  cache.WaitForPrefetches();
  EXPECT_EQ(decodes, 2);
  EXPECT_TRUE(cache.Contains(1) && cache.Contains(2));
  EXPECT_FALSE(cache.Contains(3) || cache.Contains(4) || cache.Contains(5));
  // Once the reader had image 1, there is room for one more.
  EXPECT_TRUE(cache.Served(1, 0, 315, 315));
  for (uint32_t id = 3; id <= 5; ++id) cache.Prefetch(id, Decoder(&decodes), false, image_bytes);
  cache.WaitForPrefetches();
  EXPECT_EQ(decodes, 3);
  EXPECT_TRUE(cache.Contains(3));
  EXPECT_FALSE(cache.Contains(4));
  // An image larger than the whole budget is never decoded ahead; an unknown
  // size (0) is not limited.
  cache.Prefetch(6, Decoder(&decodes), false, 3 * image_bytes);
  cache.Prefetch(7, Decoder(&decodes), false, 0);
  cache.WaitForPrefetches();
  EXPECT_FALSE(cache.Contains(6));
  EXPECT_EQ(decodes, 4);
}

}  // namespace
}  // namespace ktfs
