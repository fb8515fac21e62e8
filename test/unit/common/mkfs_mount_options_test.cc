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

// mkfs.xfs opens and writes what -d file=/name=, -l logdev= and -r rtdev=
// name (a relative name lands in the plugin's working directory), and
// mke2fs's -E list is read the same way: every sub-option that can name a
// path is refused, however it is spelled, and the sub-options that only tune
// the format still pass.
TEST(MkfsMountOptionsTest, NoMkfsOptionNamesAPath) {
  const std::vector<std::pair<const char*, const char*>> refused = {
      {"xfs", "-r rtdev=NAME"},
      {"xfs", "-l logdev=NAME"},
      {"xfs", "-d name=NAME"},
      {"xfs", "-d file=1,name=NAME"},
      {"xfs", "-d agcount=4,file=1"},
      {"xfs", "-l internal=0,logdev=x"},
      {"xfs", "-r extsize=64k,rtdev=x"},
      {"xfs", "-l file=1,name=x"},
      {"xfs", "-p proto"},
      {"xfs", "-m crc=1=2"},
      {"xfs", "-d agcount="},
      {"xfs", "-d ,"},
      {"ext4", "-E offset=4096"},
      {"ext4", "-E stride=16,root=x"},
      {"ext4", "-J device=x"},
      {"ext4", "-d dir"},
      {"ext4", "-l badblocks"},
      {"ext4", "-z undo"},
      {"btrfs", "-r dir"},
      {"btrfs", "--rootdir dir"},
  };
  for (const auto& [fs, options] : refused) {
    auto parsed = ParseMkfsOptions("vol7", fs, options);
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << fs << " " << options;
    EXPECT_NE(parsed.status().message().find("vol7"), std::string::npos) << parsed.status().message();
  }
  const std::vector<std::pair<const char*, const char*>> allowed = {
      {"xfs", "-d agcount=4,su=64k,sw=2 -l size=64m,lazy-count=1 -n ftype=1 -r extsize=64k -d noalign"},
      {"xfs", "-m reflink=1,crc=1,bigtime=1 -i size=512,sparse=1 -b size=4096 -s size=4096"},
      {"ext4", "-E stride=16,stripe_width=32,root_owner=0:0,lazy_itable_init=1 -O ^has_journal -T news"},
      {"btrfs", "-m single -d single -O no-holes --csum xxhash"},
  };
  for (const auto& [fs, options] : allowed) {
    auto parsed = ParseMkfsOptions("v", fs, options);
    EXPECT_TRUE(parsed.ok()) << fs << " " << options << ": " << parsed.status().ToString();
  }
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
