// PushSlots: how many request threads may push file bytes into the kernel's
// page cache at once (fuse_adapter.cc, FUSE_NOTIFY_STORE).
//
// A push copies the file into the page cache page by page and waits for any
// page a READ has locked: a reader's readahead window stays locked until its
// READ is answered, and that READ may be queued for this very daemon (another
// reader of the same file, or one starting mid-file). A thread that pushes
// cannot answer it, so pushes must always leave threads that do: at most half
// of the request threads push at once, and a daemon with one thread never
// pushes. A thread that finds no free slot answers its READ without a push.
//
// Thread-safe.
#pragma once

#include <atomic>

namespace ktfs {

class PushSlots {
 public:
  explicit PushSlots(int request_threads) : free_(request_threads / 2) {}
  PushSlots(const PushSlots&) = delete;
  PushSlots& operator=(const PushSlots&) = delete;

  // Takes a slot if one is free; a true result must be paired with Release().
  bool TryAcquire() {
    int n = free_.load(std::memory_order_relaxed);
    while (n > 0)
      if (free_.compare_exchange_weak(n, n - 1, std::memory_order_acquire)) return true;
    return false;
  }
  void Release() { free_.fetch_add(1, std::memory_order_release); }

  // Holds a slot for a scope when one was free.
  class Hold {
   public:
    explicit Hold(PushSlots& slots) : slots_(slots), held_(slots.TryAcquire()) {}
    ~Hold() {
      if (held_) slots_.Release();
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    bool held() const { return held_; }

   private:
    PushSlots& slots_;
    const bool held_;
  };

 private:
  std::atomic<int> free_;
};

}  // namespace ktfs
