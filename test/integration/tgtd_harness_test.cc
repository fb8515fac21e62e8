// The tgtd harness itself (root, tgt): every other real-target test stands on it.
#include "support/tgtd_harness.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>

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

// tgtd's thread count from /proc (main loop, plus the I/O threads of each LUN).
int TgtdThreads(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("Threads:")) return std::stoi(line.substr(8));
  }
  return -1;
}

// The threads tgtd starts for one new LUN.
int ThreadsForOneLun(TgtdHarness& tgtd, const std::string& image) {
  const int before = TgtdThreads(tgtd.pid());
  int code = -1;
  tgtd.Tgtadm({"--op", "new", "--mode", "target", "--tid", "1", "-T", "iqn.2026-11.io.blockcsi:threads"}, &code);
  EXPECT_EQ(code, 0);
  tgtd.Tgtadm({"--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1", "-b", image}, &code);
  EXPECT_EQ(code, 0);
  return TgtdThreads(tgtd.pid()) - before;
}

// The tests' tgtd runs as deploy/target-host ships it: tgtd -t TGT_IO_THREADS
// (what CreateVolume at 1,000 volumes costs depends on it, issue #18), and
// tgtd honours it per LUN, where its own default would start 16.
TEST(TgtdHarnessTest, RunsTheIoThreadsPerLunThatTargetEnvShips) {
  std::string error;
  const int deployed = DeployedTgtdIoThreads(&error);
  ASSERT_GT(deployed, 0) << error;
  TempDir dir;
  const std::string image = dir.Join("lun.img");
  std::ofstream(image).close();
  ASSERT_EQ(::truncate(image.c_str(), 1 << 20), 0);

  auto as_deployed = TgtdHarness::Start(&error);
  BLOCKCSI_REQUIRE_TGTD(as_deployed, error);
  EXPECT_EQ(ThreadsForOneLun(*as_deployed, image), deployed);
  as_deployed.reset();

  TgtdOptions tgt_default;
  tgt_default.io_threads = 0;
  auto untuned = TgtdHarness::Start(tgt_default, &error);
  ASSERT_NE(untuned, nullptr) << error;
  EXPECT_EQ(ThreadsForOneLun(*untuned, image), 16) << "tgt's own default";
}

}  // namespace
}  // namespace blockcsi::testing
