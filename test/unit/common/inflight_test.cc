#include "common/inflight.h"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <thread>
#include <vector>

namespace blockcsi {
namespace {

TEST(InFlightGuardTest, SecondOperationOnSameVolumeIsAborted) {
  InFlightGuard guard;
  auto first = guard.Acquire("vol-1", "NodeStageVolume");
  ASSERT_TRUE(first.ok());
  auto second = guard.Acquire("vol-1", "NodeUnstageVolume");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kAborted);
  EXPECT_NE(second.status().message().find("vol-1"), std::string::npos);
  auto other = guard.Acquire("vol-2", "NodeStageVolume");
  EXPECT_TRUE(other.ok());
}

TEST(InFlightGuardTest, ReleasedWhenLeaseEnds) {
  InFlightGuard guard;
  {
    auto lease = guard.Acquire("vol-1", "op");
    ASSERT_TRUE(lease.ok());
    EXPECT_TRUE(guard.IsHeld("vol-1"));
  }
  EXPECT_FALSE(guard.IsHeld("vol-1"));
  EXPECT_TRUE(guard.Acquire("vol-1", "op").ok());
}

TEST(InFlightGuardTest, ExactlyOneOfManyConcurrentCallersWins) {
  InFlightGuard guard;
  constexpr int kThreads = 16;
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> winners{0};
    std::atomic<int> aborted{0};
    std::barrier start(kThreads);
    std::barrier done(kThreads);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&] {
        start.arrive_and_wait();
        auto lease = guard.Acquire("vol-race", "op");
        if (lease.ok()) {
          ++winners;
        } else if (lease.status().code() == StatusCode::kAborted) {
          ++aborted;
        }
        // Hold the lease until everyone has tried, so nobody wins late.
        done.arrive_and_wait();
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(winners.load(), 1);
    EXPECT_EQ(aborted.load(), kThreads - 1);
    EXPECT_FALSE(guard.IsHeld("vol-race"));
  }
}

}  // namespace
}  // namespace blockcsi
