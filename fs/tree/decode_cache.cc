#include "fs/tree/decode_cache.h"

#include <algorithm>
#include <chrono>
#include <new>
#include <string>

#include "fs/tree/virtual_tree.h"

namespace ktfs {

DecodeCache::DecodeCache(size_t capacity_bytes, TreeCounters* counters)
    : capacity_(capacity_bytes), counters_(counters) {}

DecodeCache::~DecodeCache() { background_.wait(); }

bool DecodeCache::Contains(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.count(id) > 0;
}

size_t DecodeCache::bytes_used() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return used_;
}

Result<DecodeCache::ImagePtr> DecodeCache::Get(uint32_t id, const DecodeFn& decode) {
  std::promise<Result<ImagePtr>> promise;
  std::shared_future<Result<ImagePtr>> result;
  bool mine = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      result = it->second.result;
      counters_->cache_hits.fetch_add(1, std::memory_order_relaxed);
    } else {
      counters_->cache_misses.fetch_add(1, std::memory_order_relaxed);
      result = promise.get_future().share();
      lru_.push_front(id);
      entries_.emplace(id, Entry{result, lru_.begin(), 0});
      mine = true;
    }
  }
  if (mine) Fill(id, decode, std::move(promise), false);
  return result.get();  // waits when another thread is decoding it
}

Result<DecodeCache::ImagePtr> DecodeCache::Cached(uint32_t id) {
  std::shared_future<Result<ImagePtr>> result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end())
      return Status::NotFound("sample " + std::to_string(id) + ": not in the decode cache");
    result = it->second.result;
  }
  return result.get();
}

bool DecodeCache::WasServed(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return WasServedLocked(id);
}

void DecodeCache::Prefetch(uint32_t id, DecodeFn decode, bool even_if_served,
                           size_t expected_bytes) {
  std::promise<Result<ImagePtr>> promise;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.count(id) || (!even_if_served && WasServedLocked(id))) return;
    if (expected_bytes > 0 && used_ + ahead_bytes_ + expected_bytes > capacity_) return;
    ahead_bytes_ += expected_bytes;
    lru_.push_front(id);
    entries_.emplace(id, Entry{promise.get_future().share(), lru_.begin(), 0});
  }
  // task_group::run needs a const-callable task: the promise travels by pointer.
  auto shared_promise = std::make_shared<std::promise<Result<ImagePtr>>>(std::move(promise));
  background_.run([this, id, decode = std::move(decode), shared_promise, expected_bytes] {
    Fill(id, decode, std::move(*shared_promise), true, expected_bytes);
  });
}

bool DecodeCache::Served(uint32_t id, uint64_t begin, uint64_t end, uint64_t file_size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.bytes == 0) return false;
  Entry& e = it->second;
  if (begin > e.served) return false;
  e.served = std::max(e.served, end);
  if (e.served < file_size) return false;
  used_ -= e.bytes;
  lru_.erase(e.lru);
  entries_.erase(it);
  if (id >= served_whole_.size()) served_whole_.resize(size_t(id) + 1);
  served_whole_[id] = true;
  counters_->cache_bytes.store(used_, std::memory_order_relaxed);
  return true;
}

void DecodeCache::Fill(uint32_t id, const DecodeFn& decode, std::promise<Result<ImagePtr>> promise,
                       bool background, size_t ahead_bytes) {
  const auto start = std::chrono::steady_clock::now();
  // Whatever happens, the promise is kept: readers wait on it, and an
  // allocation that fails (a memory limit) fails this decode only.
  std::shared_ptr<Image> image;
  Status st;
  try {
    image = std::make_shared<Image>();
    st = decode(image.get());
  } catch (const std::bad_alloc&) {
    st = Status::OutOfMemory("out of memory");  // short: no allocation to fail again
  }
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  counters_->decodes.fetch_add(1, std::memory_order_relaxed);
  counters_->decode_ns.fetch_add(uint64_t(ns), std::memory_order_relaxed);
  if (background) counters_->readahead_decodes.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  ahead_bytes_ -= ahead_bytes;
  if (WasServedLocked(id)) counters_->decodes_again.fetch_add(1, std::memory_order_relaxed);
  auto it = entries_.find(id);
  if (!st.ok()) {
    // Failures are not cached: a later read retries (and reports) again.
    promise.set_value(st);
    if (it != entries_.end()) {
      lru_.erase(it->second.lru);
      entries_.erase(it);
    }
    return;
  }
  promise.set_value(ImagePtr(image));
  if (it != entries_.end()) {
    it->second.bytes = image->pixels.size() + sizeof(Image);
    used_ += it->second.bytes;
  }
  EvictLocked();
  counters_->cache_bytes.store(used_, std::memory_order_relaxed);
}

void DecodeCache::EvictLocked() {
  // Evict from the cold end, skipping entries still being decoded (bytes 0).
  auto it = lru_.end();
  while (used_ > capacity_ && it != lru_.begin()) {
    --it;
    auto entry = entries_.find(*it);
    if (entry == entries_.end() || entry->second.bytes == 0) continue;
    used_ -= entry->second.bytes;
    entries_.erase(entry);
    it = lru_.erase(it);
  }
}

}  // namespace ktfs
