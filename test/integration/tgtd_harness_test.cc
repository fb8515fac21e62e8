// The tgtd harness itself (root, tgt): every other real-target test stands on it.
#include "support/tgtd_harness.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "support/test_util.h"

namespace blockcsi::testing {
namespace {

TEST(TgtdHarnessTest, StartsServesAndLosesConfigOnKill9) {
  std::string error;
  auto tgtd = TgtdHarness::Start(&error);
  BLOCKCSI_REQUIRE_TGTD(tgtd, error);
  int code = -1;
  tgtd->Tgtadm({"--op", "new", "--mode", "target", "--tid", "1", "-T", "iqn.2026-11.io.blockcsi:harness"}, &code);
  ASSERT_EQ(code, 0);
  EXPECT_NE(tgtd->ShowTargets().find("iqn.2026-11.io.blockcsi:harness"), std::string::npos);
  ASSERT_TRUE(tgtd->Restart(&error)) << error;
  EXPECT_EQ(tgtd->ShowTargets().find("iqn.2026-11.io.blockcsi:harness"), std::string::npos)
      << "tgtd is expected to keep its configuration in memory only";
  pid_t pid = tgtd->pid();
  tgtd.reset();
  EXPECT_NE(::kill(pid, 0), 0) << "tgtd still running after the harness stopped it";
}

// Two harnesses on one control number (a random draw that two concurrent
// tests both made): tgtadm would reach the first tgtd for both. The second
// start must fail, not share the first's tgtd, and leave the first alone.
TEST(TgtdHarnessTest, AControlNumberAnotherTgtdHoldsFailsTheStart) {
  std::string error;
  auto first = TgtdHarness::Start(&error);
  BLOCKCSI_REQUIRE_TGTD(first, error);
  int code = -1;
  first->Tgtadm({"--op", "new", "--mode", "target", "--tid", "1", "-T", "iqn.2026-11.io.blockcsi:first"}, &code);
  ASSERT_EQ(code, 0);
  TgtdOptions same;
  same.control_port = first->control_port();
  std::string second_error;
  auto second = TgtdHarness::Start(same, &second_error);
  EXPECT_EQ(second, nullptr) << "a second harness took over the first's tgtd";
  EXPECT_NE(second_error.find("held by pid " + std::to_string(first->pid())), std::string::npos) << second_error;
  EXPECT_NE(first->ShowTargets().find("iqn.2026-11.io.blockcsi:first"), std::string::npos)
      << "the failed start touched the first tgtd";
  EXPECT_EQ(::kill(first->pid(), 0), 0) << "the first tgtd is gone";
}

}  // namespace
}  // namespace blockcsi::testing
