// The allow-lists for mount flags and mkfs options, and the mkfs argv.
#include "common/mkfs_mount_options.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "common/fault_points.h"

namespace blockcsi {
namespace {

TEST(MkfsMountOptionsTest, SupportedFsTypes) {
  EXPECT_TRUE(IsStageableFsType("ext4"));
  EXPECT_TRUE(IsStageableFsType("xfs"));
  EXPECT_TRUE(IsStageableFsType("btrfs"));
  EXPECT_FALSE(IsStageableFsType("ext3"));
  EXPECT_FALSE(IsStageableFsType(""));
}

TEST(MkfsMountOptionsTest, MountFlagsAllowTuningOnly) {
  EXPECT_TRUE(ValidateMountFlags("v", "ext4", {"noatime", "data=ordered", "commit=30", "nodev,nosuid"}).ok());
  EXPECT_TRUE(ValidateMountFlags("v", "xfs", {"nouuid", "logbufs=8"}).ok());
  EXPECT_TRUE(ValidateMountFlags("v", "btrfs", {"compress=zstd", "ssd"}).ok());
  for (const char* bad : {"suid", "dev", "exec", "bind", "rbind", "remount", "nobarrier", "errors=panic", "commit=1,2",
                          "commit=", "data=journal;rm", "nouuid", "logbufs=../x", ""}) {
    Status st = ValidateMountFlags("vol9", "ext4", {bad});
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("vol9"), std::string::npos) << st.message();
  }
  EXPECT_FALSE(ValidateMountFlags("v", "ext4", {"noatime,"}).ok());
  EXPECT_FALSE(ValidateMountFlags("v", "", {"noatime"}).ok());
}

TEST(MkfsMountOptionsTest, MkfsOptionsAreAllowListed) {
  auto ok = ParseMkfsOptions("v", "ext4", "  -m 0   -O ^has_journal -L data ");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, (std::vector<std::string>{"-m", "0", "-O", "^has_journal", "-L", "data"}));
  for (const char* bad : {"-F", "-f", "-m", "-L /dev/sda", "-d file=/x", "; rm -rf /", "-E -F", "-p proto"}) {
    auto r = ParseMkfsOptions("vol7", bad[1] == 'd' || bad[1] == 'p' ? "xfs" : "ext4", bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(ParseMkfsOptions("v", "ntfs", "").ok());
  auto xfs = ParseMkfsOptions("v", "xfs", "-m reflink=1,crc=1 -i size=512");
  ASSERT_TRUE(xfs.ok()) << xfs.status().ToString();
}

TEST(MkfsMountOptionsTest, MkfsArgvHasFastSafeDefaultsAndNoForce) {
  EXPECT_EQ(MkfsArgv("ext4", "/dev/loop3", {}),
            (std::vector<std::string>{"mkfs.ext4", "-q", "-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1",
                                      "/dev/loop3"}));
  EXPECT_EQ(MkfsArgv("xfs", "/dev/loop3", {"-L", "x"}),
            (std::vector<std::string>{"mkfs.xfs", "-q", "-K", "-L", "x", "/dev/loop3"}));
  EXPECT_EQ(MkfsArgv("btrfs", "/dev/loop3", {}),
            (std::vector<std::string>{"mkfs.btrfs", "-q", "--nodiscard", "/dev/loop3"}));
}

TEST(FaultPointsTest, ListedMatchesWholeNames) {
  EXPECT_TRUE(FaultPointListed("after-attach", "after-attach"));
  EXPECT_TRUE(FaultPointListed("x,after-mkfs", "after-mkfs"));
  EXPECT_FALSE(FaultPointListed("after-mkfs-x", "after-mkfs"));
  EXPECT_FALSE(FaultPointListed("", "after-mkfs"));
}

TEST(FaultPointsDeathTest, KillsWithSigkillWhenEnvNamesThePoint) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        setenv(kFaultPointEnv, "node.stage.after-mkfs", 1);
        (void)FaultPoint("node.stage.after-attach");  // not listed: returns
        (void)FaultPoint("node.stage.after-mkfs");
      },
      ::testing::KilledBySignal(SIGKILL), "");
}

// In a child, so that a fault point that fires anyway shows as this test's
// failure (killed instead of a clean exit) rather than as a dead test binary.
TEST(FaultPointsDeathTest, InertWithoutEnv) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        unsetenv(kFaultPointEnv);
        (void)FaultPoint("node.stage.after-mkfs");
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace blockcsi
