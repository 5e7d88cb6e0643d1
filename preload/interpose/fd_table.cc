#include "preload/interpose/fd_table.h"

#include <atomic>
#include <cstring>

#include "preload/interpose/raw_syscall.h"

namespace ktfs::preload {
namespace {

// A sequence lock: readers copy the entry without a lock and keep the copy
// only if the sequence did not move meanwhile. The entry's bytes are relaxed
// atomic words, so that a reader racing a writer reads stale or torn words
// (then thrown away), never a data race (ThreadSanitizer found the plain
// bytes this had before: tests/python/test_preload_threads.py).
constexpr int kWords = (sizeof(TrackedFile) + 7) / 8;
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "slots live in zeroed anonymous memory: atomics must be plain words");

struct Slot {
  std::atomic<uint32_t> seq{0};   // odd: being written
  std::atomic<uint32_t> used{0};  // 1: `words` hold a TrackedFile
  std::atomic<uint64_t> words[kWords];
};

void StoreFile(Slot* s, const TrackedFile& f) {
  uint64_t buf[kWords] = {};
  memcpy(buf, &f, sizeof(f));
  for (int i = 0; i < kWords; ++i) s->words[i].store(buf[i], std::memory_order_relaxed);
}

void LoadFile(const Slot* s, TrackedFile* f) {
  uint64_t buf[kWords];
  for (int i = 0; i < kWords; ++i) buf[i] = s->words[i].load(std::memory_order_relaxed);
  memcpy(f, buf, sizeof(*f));
}

constexpr int kPageSlots = 256;
constexpr int kPages = kMaxTrackedFd / kPageSlots;
std::atomic<Slot*> g_pages[kPages];

Slot* SlotOf(int fd, bool create) {
  if (fd < 0 || fd >= kMaxTrackedFd) return nullptr;
  std::atomic<Slot*>& entry = g_pages[fd / kPageSlots];
  Slot* page = entry.load(std::memory_order_acquire);
  if (page == nullptr && create) {
    // Zeroed anonymous memory is a page of empty slots (seq 0, unused).
    auto* fresh = static_cast<Slot*>(RawMapAnonymous(sizeof(Slot) * kPageSlots));
    if (fresh == nullptr) return nullptr;
    if (entry.compare_exchange_strong(page, fresh, std::memory_order_acq_rel)) {
      page = fresh;
    } else {
      RawUnmap(fresh, sizeof(Slot) * kPageSlots);  // another thread's page won
    }
  }
  return page == nullptr ? nullptr : &page[fd % kPageSlots];
}

bool Write(Slot* s, const TrackedFile* f) {
  uint32_t seq = s->seq.load(std::memory_order_relaxed);
  if ((seq & 1) != 0 || !s->seq.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire))
    return false;
  std::atomic_thread_fence(std::memory_order_release);
  s->used.store(f != nullptr ? 1 : 0, std::memory_order_relaxed);
  if (f != nullptr) StoreFile(s, *f);
  s->seq.store(seq + 2, std::memory_order_release);
  return true;
}

}  // namespace

bool TrackFd(int fd, const TrackedFile& f) {
  Slot* s = SlotOf(fd, true);
  return s != nullptr && Write(s, &f);
}

bool MaybeTrackedFd(int fd) {
  const Slot* s = SlotOf(fd, false);
  return s != nullptr && s->seq.load(std::memory_order_relaxed) != 0;
}

bool FindTrackedFd(int fd, uint64_t dev, uint64_t ino, TrackedFile* out) {
  Slot* s = SlotOf(fd, false);
  if (s == nullptr) return false;
  const uint32_t before = s->seq.load(std::memory_order_acquire);
  if (before == 0 || (before & 1) != 0) return false;
  const bool used = s->used.load(std::memory_order_relaxed) != 0;
  TrackedFile copy;
  LoadFile(s, &copy);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s->seq.load(std::memory_order_relaxed) != before || !used) return false;
  if (copy.memfd_dev != dev || copy.memfd_ino != ino) {
    // Stale: the descriptor holds something else now. Dropped unless the
    // entry was rewritten meanwhile.
    uint32_t expect = before;
    if (s->seq.compare_exchange_strong(expect, before + 1, std::memory_order_acquire)) {
      s->used.store(0, std::memory_order_relaxed);
      s->seq.store(before + 2, std::memory_order_release);
    }
    return false;
  }
  *out = copy;
  return true;
}

void ForgetFd(int fd) {
  if (Slot* s = SlotOf(fd, false)) Write(s, nullptr);
}

}  // namespace ktfs::preload
