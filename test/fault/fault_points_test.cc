// The naming rules of the crash points (common/fault_points.h): pure
// functions and the per-thread scope; nothing here is ever armed.
#include "common/fault_points.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace blockcsi
