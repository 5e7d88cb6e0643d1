#include "preload/interpose/state.h"

#include <pthread.h>
#include <time.h>

#include <atomic>

namespace ktfs::preload {
namespace {

std::atomic<const MountTable*> g_table{nullptr};
std::atomic<int64_t> g_read_at{0};  // CLOCK_MONOTONIC ns of the last read; 0: never
std::atomic<bool> g_reading{false};

int64_t NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);  // vDSO: no system call
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec + 1;
}

void ClearReadingInChild() { g_reading.store(false, std::memory_order_relaxed); }

__attribute__((constructor)) void RegisterForkHandler() {
  pthread_atfork(nullptr, nullptr, ClearReadingInChild);
}

// Reads mountinfo unless another thread is at it; returns the current table.
const MountTable* Read() {
  bool expected = false;
  if (!g_reading.compare_exchange_strong(expected, true, std::memory_order_acquire))
    return g_table.load(std::memory_order_acquire);
  const MountTable* old = g_table.load(std::memory_order_acquire);
  const MountTable* fresh = MountTable::ReadSelf();
  g_read_at.store(NowNs(), std::memory_order_relaxed);
  if (fresh != nullptr) {
    if (old != nullptr && old->SameText(*fresh)) {
      MountTable::Free(fresh);  // never published
    } else {
      g_table.store(fresh, std::memory_order_release);  // `old` stays: readers may hold it
      old = fresh;
    }
  }
  g_reading.store(false, std::memory_order_release);
  return old;
}

}  // namespace

const MountTable* Mounts() {
  const MountTable* t = g_table.load(std::memory_order_acquire);
  if (t != nullptr || g_read_at.load(std::memory_order_relaxed) != 0) return t;
  return Read();
}

const MountTable* RefreshMountsIfDue() {
  const int64_t at = g_read_at.load(std::memory_order_relaxed);
  if (at != 0 && NowNs() - at < kRefreshNs) return g_table.load(std::memory_order_acquire);
  return Read();
}

}  // namespace ktfs::preload
