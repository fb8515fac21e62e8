// The naming rules of the crash points (common/fault_points.h): pure
// functions and the per-thread scope; nothing is armed in this process (the
// one armed case runs in a child of its own).
#include "common/fault_points.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

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
  // A name without a dot is never renamed.
  EXPECT_EQ(ScopedFaultPointName("agent", "after-mkfs"), "after-mkfs");
  // The node's own points keep their component.
  EXPECT_EQ(ScopedFaultPointName("", "node.stage.after-mkfs"), "node.stage.after-mkfs");
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
    EXPECT_TRUE(FaultPoint(kPoint).ok());
  }
  EXPECT_EQ(ArmedFaultPointName(kPoint), kPoint);
}

// The in-process side of the one seam: a unit test's hook sees the point
// under its scoped name and decides the step's outcome.
TEST(FaultPoint, TheHookSeesTheScopedNameAndItsStatusIsReturned) {
  std::vector<std::string> seen;
  FaultHook hook = [&](std::string_view point) {
    seen.emplace_back(point);
    return point == "agent.create.after-record" ? Aborted("injected") : OkStatus();
  };
  EXPECT_TRUE(FaultPoint("controller.create.after-record", hook).ok());
  {
    FaultPointScope scope("agent");
    Status st = FaultPoint("controller.create.after-record", hook);
    EXPECT_EQ(st.code(), StatusCode::kAborted);
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"controller.create.after-record", "agent.create.after-record"}));
  EXPECT_TRUE(FaultPoint("controller.create.after-record").ok());  // no hook, nothing armed
}

// BLOCKCSI_FAULT_FAIL fails exactly the listed step, with a final code
// (so the caller must roll back) and a message naming it. The variable is
// read once per process: armed in a child that re-executes this test alone
// ("threadsafe"), since earlier tests here have read the variables already.
TEST(FaultPoint, FaultFailEnvFailsOnlyTheListedStepWithAFinalCode) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        ::setenv(kFaultFailEnv, "x,rbd.create_volume.after-create", 1);
        Status armed = FaultPoint("rbd.create_volume.after-create");
        Status other = FaultPoint("rbd.create_volume.after-name");
        bool ok = armed.code() == StatusCode::kInternal && IsFinalFailure(armed) &&
                  armed.message() == "injected failure at rbd.create_volume.after-create" && other.ok();
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace blockcsi
