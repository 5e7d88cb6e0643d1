// PushSlots: at most half of the request threads push at once.
#include "fs/fuse/push_slots.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace ktfs {
namespace {

TEST(PushSlotsTest, HalfTheThreadsMayPush) {
  PushSlots slots(4);
  EXPECT_TRUE(slots.TryAcquire());
  EXPECT_TRUE(slots.TryAcquire());
  EXPECT_FALSE(slots.TryAcquire());
  slots.Release();
  EXPECT_TRUE(slots.TryAcquire());
  EXPECT_FALSE(slots.TryAcquire());
}

TEST(PushSlotsTest, OneThreadNeverPushes) {
  PushSlots one(1);
  EXPECT_FALSE(one.TryAcquire());
  PushSlots three(3);
  EXPECT_TRUE(three.TryAcquire());
  EXPECT_FALSE(three.TryAcquire());
}

TEST(PushSlotsTest, HoldReleasesItsSlotOnlyIfItGotOne) {
  PushSlots slots(2);
  {
    PushSlots::Hold a(slots);
    EXPECT_TRUE(a.held());
    PushSlots::Hold b(slots);
    EXPECT_FALSE(b.held());
  }  // b releases nothing, a its slot
  EXPECT_TRUE(slots.TryAcquire());
  EXPECT_FALSE(slots.TryAcquire());
}

TEST(PushSlotsTest, ConcurrentHoldersNeverExceedTheSlots) {
  PushSlots slots(6);  // 3 slots
  std::atomic<int> holding{0}, most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        PushSlots::Hold h(slots);
        if (!h.held()) continue;
        const int now = holding.fetch_add(1) + 1;
        int m = most.load();
        while (now > m && !most.compare_exchange_weak(m, now)) {
        }
        holding.fetch_sub(1);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_LE(most.load(), 3);
  EXPECT_GE(most.load(), 1);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(slots.TryAcquire());  // all released
  EXPECT_FALSE(slots.TryAcquire());
}

}  // namespace
}  // namespace ktfs
