// The one waiting per-key lock (common/keyed_lock.h): one holder per key,
// other keys free, waiters let in when the holder lets go, no entry left.
// No timing: the order is forced with latches and checked by who ran.
#include "common/keyed_lock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

namespace blockcsi {
namespace {

TEST(KeyedLockTest, OtherKeysAreNotBlockedByAHeldOne) {
  KeyedLock locks;
  auto a = locks.Lock("vol-a");
  auto b = locks.Lock("vol-b");  // would deadlock if keys shared one lock
  EXPECT_TRUE(a.holds());
  EXPECT_TRUE(b.holds());
  EXPECT_EQ(locks.KeysInUse(), 2u);
}

TEST(KeyedLockTest, ASecondCallerOfTheSameKeyWaitsForTheFirst) {
  KeyedLock locks;
  std::atomic<bool> first_done{false};
  std::atomic<bool> second_saw_first_done{false};
  auto first = locks.Lock("vol-1");
  std::latch started(1);
  std::thread second([&] {
    started.count_down();
    auto g = locks.Lock("vol-1");
    second_saw_first_done = first_done.load();
  });
  started.wait();
  // Whether or not the thread has reached Lock yet, it cannot get past it
  // before the release below, so it must see first_done set.
  first_done = true;
  first = KeyedLock::Guard();  // releases by move-assignment
  second.join();
  EXPECT_TRUE(second_saw_first_done);
  EXPECT_EQ(locks.KeysInUse(), 0u);
}

TEST(KeyedLockTest, ManyThreadsOnOneKeyNeverOverlapAndLeaveNoEntry) {
  KeyedLock locks;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  int counter = 0;  // guarded by the key "k" only
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto g = locks.Lock("k");
        if (inside.fetch_add(1) != 0) overlaps++;
        ++counter;
        inside.fetch_sub(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter, 8 * 200);
  EXPECT_EQ(locks.KeysInUse(), 0u);
}

TEST(KeyedLockTest, AMovedGuardReleasesOnceAndAnEmptyOneNever) {
  KeyedLock locks;
  KeyedLock::Guard empty;
  EXPECT_FALSE(empty.holds());
  {
    auto g = locks.Lock("x");
    KeyedLock::Guard moved(std::move(g));
    EXPECT_FALSE(g.holds());  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
    EXPECT_TRUE(moved.holds());
    EXPECT_EQ(locks.KeysInUse(), 1u);
  }
  EXPECT_EQ(locks.KeysInUse(), 0u);
  auto again = locks.Lock("x");  // free again: would hang if released twice or never
  EXPECT_TRUE(again.holds());
}

}  // namespace
}  // namespace blockcsi
