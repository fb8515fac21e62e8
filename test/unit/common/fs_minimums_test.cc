#include "common/fs_minimums.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/atomic_file.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

std::string Captured(const std::string& name) {
  return testing::ReadFileOrEmpty(testing::TestDataPath("program-errors/" + name));
}

TEST(FsMinimumsTest, ParsesWhatTheMkfsProgramsSay) {
  EXPECT_EQ(ParseXfsMinimum(Captured("mkfs.xfs-too-small.stderr")), uint64_t{300} << 20);
  EXPECT_EQ(ParseBtrfsMinimum(Captured("mkfs.btrfs-too-small.stderr")), 114294784u);
  EXPECT_EQ(ParseXfsMinimum("meta-data=probe.img isize=512 agcount=4\n"), 0u);
  EXPECT_EQ(ParseBtrfsMinimum(Captured("mkfs.btrfs-too-small.stdout")), 0u);
  EXPECT_EQ(ParseBtrfsMinimum("minimum size for each btrfs device is \n"), 0u);
}

TEST(FsMinimumsTest, ProgramMissingFallsBackToDebianFigures) {
  // A host without the mkfs programs: nothing can run.
  class NothingInstalled final : public Executor {
   public:
    StatusOr<CommandResult> Run(const Command& command) override {
      ++runs;
      return NotFound(command.args()[0].value + ": no such program");
    }
    int runs = 0;
  };
  auto exec = std::make_shared<NothingInstalled>();
  testing::TempDir scratch;
  FilesystemMinimums minimums(exec, MachineHost(), scratch.path());
  EXPECT_EQ(minimums.MinimumBytes("ext4"), 0u);
  EXPECT_EQ(minimums.MinimumBytes("xfs"), kXfsMinimumBytesFallback);
  EXPECT_EQ(minimums.MinimumBytes("xfs"), kXfsMinimumBytesFallback);
  EXPECT_EQ(minimums.MinimumBytes("btrfs"), kBtrfsMinimumBytesFallback);
  EXPECT_EQ(exec->runs, 2) << "each program is asked once, then remembered";
}

// The real programs of this host, when installed: the figures the issue
// names for Debian 12, and nothing left in the scratch directory.
TEST(FsMinimumsTest, AskedOfThisHostsMkfs) {
  testing::TempDir scratch;
  FilesystemMinimums minimums(std::shared_ptr<Executor>(MakeProcessExecutor()), MachineHost(), scratch.path());
  if (::access("/usr/sbin/mkfs.xfs", X_OK) == 0) {
    EXPECT_EQ(minimums.MinimumBytes("xfs"), uint64_t{300} << 20);
  }
  if (::access("/usr/sbin/mkfs.btrfs", X_OK) == 0 || ::access("/usr/bin/mkfs.btrfs", X_OK) == 0) {
    EXPECT_EQ(minimums.MinimumBytes("btrfs"), 114294784u);
  }
  EXPECT_TRUE(std::filesystem::is_empty(scratch.path())) << "the probe left files behind";
}

// The scratch directory and the btrfs probe's image go through the host:
// under a rooted host, mkfs is handed the real path of a 1 MiB image in a
// private directory, and nothing is left once it answered.
TEST(FsMinimumsTest, TheProbeWorksThroughTheHostAndLeavesNothing) {
  class RecordingMkfs final : public Executor {
   public:
    StatusOr<CommandResult> Run(const Command& command) override {
      image = command.args().back().value;
      std::error_code ec;
      image_bytes = std::filesystem::file_size(image, ec);
      CommandResult r;
      r.exit_code = 1;
      r.stderr_text = "ERROR: minimum size for each btrfs device is 114294784\n";
      return r;
    }
    std::string image;
    uintmax_t image_bytes = 0;
  };
  testing::TempDir root;
  ASSERT_TRUE(MakeDirectories(root.Join("scratch")).ok());
  auto mkfs = std::make_shared<RecordingMkfs>();
  FilesystemMinimums minimums(mkfs, HostRootedAt(root.path()), "/scratch");
  EXPECT_EQ(minimums.MinimumBytes("btrfs"), 114294784u);
  EXPECT_TRUE(mkfs->image.starts_with(root.Join("scratch/blockcsi-fsmin-"))) << mkfs->image;
  EXPECT_EQ(mkfs->image_bytes, uintmax_t{1} << 20);
  EXPECT_TRUE(std::filesystem::is_empty(root.Join("scratch"))) << "the probe left files behind";
}

}  // namespace
}  // namespace blockcsi
