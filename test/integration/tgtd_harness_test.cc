// The tgtd harness itself (root, tgt): every other real-target test stands on it.
#include "support/tgtd_harness.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace blockcsi::testing
