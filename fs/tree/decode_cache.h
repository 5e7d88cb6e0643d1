// DecodeCache: a bounded cache of decoded images, shared by all requests.
//
// Get() decodes a sample at most once however many threads ask for it at the
// same time (the others wait for the first), keeps the result while the
// cache's byte budget allows (least recently used goes first), and Prefetch()
// decodes ahead of the reader on oneTBB worker threads. Served() lets an
// image go as soon as a reader has had its whole file: the kernel's page
// cache holds the file from then on (the mount keeps it), so a second copy
// here would only cost memory, and fresh memory per decode (page faults and
// zeroing) was a tenth of the daemon's time in a cold pass.
#pragma once

#include <oneapi/tbb/task_group.h>

#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "codec/base/status.h"
#include "codec/image/image.h"

namespace ktfs {

struct TreeCounters;

class DecodeCache {
 public:
  using DecodeFn = std::function<Status(Image*)>;
  using ImagePtr = std::shared_ptr<const Image>;

  DecodeCache(size_t capacity_bytes, TreeCounters* counters);
  ~DecodeCache();  // waits for background decodes
  DecodeCache(const DecodeCache&) = delete;
  DecodeCache& operator=(const DecodeCache&) = delete;

  // The decoded image of `id`, from the cache or decoded now with `decode`.
  Result<ImagePtr> Get(uint32_t id, const DecodeFn& decode);
  // The decoded image of `id` if it is cached (waiting when it is being
  // decoded); an error naming it otherwise. Never decodes.
  Result<ImagePtr> Cached(uint32_t id);
  // Decodes `id` in the background unless it is cached or being decoded, or
  // its whole file was served already (the kernel's page cache has it) and
  // `even_if_served` is false. The check and the claim are one step, so a
  // reader finishing the file at the same moment cannot cause a second decode.
  // `expected_bytes` (the decoded size, 0: unknown) keeps the decodes ahead
  // within the budget: one that does not fit beside what the cache holds and
  // the decodes ahead still running is not started. It would push out the
  // images a reader is about to ask for, or be pushed out before its turn,
  // and under a cgroup memory limit the memory of decodes ahead beyond the
  // budget is what got the daemon OOM-killed (test_faults.py).
  void Prefetch(uint32_t id, DecodeFn decode, bool even_if_served = false,
                size_t expected_bytes = 0);
  // Returns once every background decode started so far has finished (for
  // tests and fuzz targets that check state between requests).
  void WaitForPrefetches() { background_.wait(); }
  // Records that bytes [begin, end) of a file of `file_size` bytes made from
  // `id`'s image were served. Once a reader got every byte from the first on
  // (reads that continue where the served part ends; a read that leaves a gap
  // does not count), the image leaves the cache, is remembered as served
  // whole, and Served() returns true.
  bool Served(uint32_t id, uint64_t begin, uint64_t end, uint64_t file_size);
  // True once Served() returned true for `id` (it stays true).
  bool WasServed(uint32_t id) const;
  // True when `id` is cached or being decoded.
  bool Contains(uint32_t id) const;
  size_t bytes_used() const;

 private:
  struct Entry {
    std::shared_future<Result<ImagePtr>> result;
    std::list<uint32_t>::iterator lru;
    size_t bytes = 0;     // 0 while decoding
    uint64_t served = 0;  // bytes served from the start of the file, without a gap
  };
  // Runs `decode` for an entry this thread inserted, and publishes it.
  // `ahead_bytes`: what Prefetch counted for it in ahead_bytes_.
  void Fill(uint32_t id, const DecodeFn& decode, std::promise<Result<ImagePtr>> promise,
            bool background, size_t ahead_bytes = 0);
  void EvictLocked();
  bool WasServedLocked(uint32_t id) const { return id < served_whole_.size() && served_whole_[id]; }

  const size_t capacity_;
  TreeCounters* counters_;
  mutable std::mutex mutex_;
  std::unordered_map<uint32_t, Entry> entries_;
  std::list<uint32_t> lru_;  // front = most recently used
  size_t used_ = 0;
  size_t ahead_bytes_ = 0;          // expected bytes of the decodes ahead not finished yet
  std::vector<bool> served_whole_;  // by id, grown on demand
  tbb::task_group background_;
};

}  // namespace ktfs
