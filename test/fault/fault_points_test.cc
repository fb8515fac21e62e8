// The naming rules of the crash points (common/fault_points.h): pure
// functions and the per-thread scope; nothing is armed in this process (the
// one armed case runs in a child of its own).
#include "common/fault_points.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>

namespace blockcsi {
namespace {

TEST(FaultPointListed, MatchesWholeItemsOnly) {
  EXPECT_TRUE(FaultPointListed("after-attach", "after-attach"));
  EXPECT_TRUE(FaultPointListed("x,agent.create.after-record", "agent.create.after-record"));
  EXPECT_FALSE(FaultPointListed("agent.create.after-record-x", "agent.create.after-record"));
  EXPECT_FALSE(FaultPointListed("", "after-mkfs"));
  EXPECT_FALSE(FaultPointListed(",,", "after-mkfs"));
}

TEST(ScopedFaultPointName, ReplacesTheRoleOfDottedNames) {
  EXPECT_EQ(ScopedFaultPointName("agent", "controller.create.after-record"), "agent.create.after-record");
  EXPECT_EQ(ScopedFaultPointName("", "controller.create.after-record"), "controller.create.after-record");
  // The node's undotted names are never renamed.
  EXPECT_EQ(ScopedFaultPointName("agent", "after-mkfs"), "after-mkfs");
}

// The scope is per thread and nests: an agent call renames only its own
// thread's points, and leaving a scope restores the outer one.
TEST(FaultPointScope, IsPerThreadAndNests) {
  constexpr char kPoint[] = "controller.create.after-record";
  EXPECT_EQ(ArmedFaultPointName(kPoint), kPoint);
  {
    FaultPointScope outer("agent");
    EXPECT_EQ(ArmedFaultPointName(kPoint), "agent.create.after-record");
    {
      FaultPointScope inner("other");
      EXPECT_EQ(ArmedFaultPointName(kPoint), "other.create.after-record");
    }
    EXPECT_EQ(ArmedFaultPointName(kPoint), "agent.create.after-record");
    std::string seen_elsewhere;
    std::thread other([&] { seen_elsewhere = ArmedFaultPointName(kPoint); });
    other.join();
    EXPECT_EQ(seen_elsewhere, kPoint);
    // Unset variable: inert whatever the scope.
    FaultPoint(kPoint);
  }
  EXPECT_EQ(ArmedFaultPointName(kPoint), kPoint);
}

// BLOCKCSI_FAULT_FAIL fails exactly the listed step, with a final code
// (so the caller must roll back) and a message naming it. The variable is
// read once per process: armed in a forked child only.
TEST(FaultStatus, FailsOnlyTheListedStepWithAFinalCode) {
  EXPECT_EXIT(
      {
        ::setenv(kFaultFailEnv, "x,rbd.create_volume.after-create", 1);
        Status armed = FaultStatus("rbd.create_volume.after-create");
        Status other = FaultStatus("rbd.create_volume.after-name");
        bool ok = armed.code() == StatusCode::kInternal && IsFinalFailure(armed) &&
                  armed.message() == "injected failure at rbd.create_volume.after-create" && other.ok();
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace blockcsi
