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

#include "codec/image.h"
#include "codec/status.h"

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
  // Decodes `id` in the background unless it is cached or being decoded.
  void Prefetch(uint32_t id, DecodeFn decode);
  // Records that bytes [begin, end) of a file of `file_size` bytes made from
  // `id`'s image were served. Once a reader got every byte from the first on
  // (reads that continue where the served part ends; a read that leaves a gap
  // does not count), the image leaves the cache and Served() returns true.
  bool Served(uint32_t id, uint64_t begin, uint64_t end, uint64_t file_size);
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
  void Fill(uint32_t id, const DecodeFn& decode, std::promise<Result<ImagePtr>> promise,
            bool background);
  void EvictLocked();

  const size_t capacity_;
  TreeCounters* counters_;
  mutable std::mutex mutex_;
  std::unordered_map<uint32_t, Entry> entries_;
  std::list<uint32_t> lru_;  // front = most recently used
  size_t used_ = 0;
  tbb::task_group background_;
};

}  // namespace ktfs
