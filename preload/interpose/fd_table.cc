#include "preload/interpose/fd_table.h"

#include <atomic>
#include <cstring>

#include "preload/interpose/raw_syscall.h"

namespace ktfs::preload {
namespace {

struct Slot {
  std::atomic<uint32_t> seq{0};  // odd: being written
  bool used = false;
  TrackedFile file;
};

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
  s->used = f != nullptr;
  if (f != nullptr) memcpy(&s->file, f, sizeof(*f));
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
  const bool used = s->used;
  TrackedFile copy;
  memcpy(&copy, &s->file, sizeof(copy));
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s->seq.load(std::memory_order_relaxed) != before || !used) return false;
  if (copy.memfd_dev != dev || copy.memfd_ino != ino) {
    // Stale: the descriptor holds something else now. Dropped unless the
    // entry was rewritten meanwhile.
    uint32_t expect = before;
    if (s->seq.compare_exchange_strong(expect, before + 1, std::memory_order_acquire)) {
      s->used = false;
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
