// bridge_cgroup: the process start time that, with the pid, names one
// process for good (parsed from a fabricated /proc), and the refusals of a
// --bridge-cgroup that cannot work, before any bridge depends on it.
#include "bridge/bridge_cgroup.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/test_util.h"

namespace blockcsi {
namespace {

class BridgeCgroupTest : public ::testing::Test {
 protected:
  void Put(const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(root_.path() + path).parent_path());
    std::ofstream(root_.path() + path) << text;
  }
  testing::TempDir root_;
  std::unique_ptr<Host> fs_ = HostRootedAt(root_.path());
};

TEST_F(BridgeCgroupTest, StartTimeCountsFieldsFromTheLastParenthesis) {
  // A command name may hold spaces and ") ": field 22 is still found.
  Put("/proc/42/stat", "42 (blockcsi) S 1) S 1 42 42 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 9 0 987654 1000 200\n");
  auto start = ProcessStartTime(*fs_, 42);
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  EXPECT_EQ(*start, 987654u);
  EXPECT_TRUE(ProcessIsAlive(*fs_, 42, 987654));
  // The same pid with another start time is another process (pid reuse).
  EXPECT_FALSE(ProcessIsAlive(*fs_, 42, 987655));
  EXPECT_FALSE(ProcessIsAlive(*fs_, 0, 987654));
}

TEST_F(BridgeCgroupTest, StartTimeOfAMissingOrMalformedProcess) {
  EXPECT_EQ(ProcessStartTime(*fs_, 7).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(ProcessIsAlive(*fs_, 7, 1));
  Put("/proc/8/stat", "8 (short) S 1 2\n");
  EXPECT_EQ(ProcessStartTime(*fs_, 8).status().code(), StatusCode::kInternal);
}

TEST_F(BridgeCgroupTest, MembershipIsReadFromCgroupProcs) {
  Put("/cg/bridges/cgroup.procs", "12\n345\n");
  EXPECT_TRUE(InCgroup(*fs_, "/cg/bridges", 345));
  EXPECT_FALSE(InCgroup(*fs_, "/cg/bridges", 34));
  EXPECT_FALSE(InCgroup(*fs_, "/cg/other", 12));
}

TEST_F(BridgeCgroupTest, RefusesARelativePathOrANonCgroupParent) {
  EXPECT_EQ(PrepareBridgeCgroup(*fs_, "blockcsi-bridges").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareBridgeCgroup(*fs_, "/cg/bridges/").code(), StatusCode::kInvalidArgument);
  // A plain directory (the temp tree) is no cgroup v2 hierarchy: refused
  // with the path named, and nothing is created there.
  Status st = PrepareBridgeCgroup(*fs_, "/sys/fs/cgroup/blockcsi-bridges");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("/sys/fs/cgroup/blockcsi-bridges"), std::string::npos) << st.message();
  EXPECT_FALSE(std::filesystem::exists(root_.path() + "/sys/fs/cgroup/blockcsi-bridges"));
}

}  // namespace
}  // namespace blockcsi
