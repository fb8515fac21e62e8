#include <gtest/gtest.h>

#include "common/mounter.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

// Captured on a development machine: a loop device staged, then bind
// published read-only into a directory whose name has a space.
TEST(MountInfoTest, ParsesCapturedStagedAndPublishedVolume) {
  auto entries = ParseMountInfo(testing::ReadFileOrEmpty(testing::TestDataPath("mountinfo/staged_and_published.txt")));
  ASSERT_EQ(entries.size(), 8u);
  const MountEntry* stage = FindMountAt(entries, "/tmp/mi/stage");
  ASSERT_NE(stage, nullptr);
  EXPECT_EQ(stage->source, "/dev/loop0");
  EXPECT_EQ(stage->fs_type, "ext4");
  EXPECT_EQ(stage->major_minor, "7:0");
  EXPECT_FALSE(stage->read_only());
  const MountEntry* pod = FindMountAt(entries, "/tmp/mi/pod dir");
  ASSERT_NE(pod, nullptr) << "octal escape \\040 not decoded";
  EXPECT_TRUE(pod->read_only());
  EXPECT_EQ(pod->major_minor, stage->major_minor);
}

TEST(MountInfoTest, OptionalFieldsAndGarbage) {
  std::string text =
      "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 shared:7 - ext3 /dev/root rw,errors=continue\n"
      "this is not a mountinfo line\n"
      "1 2 3\n"
      "x 35 98:0 / /a rw - ext4 /dev/x rw\n";
  auto entries = ParseMountInfo(text);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].root, "/mnt1");
  EXPECT_EQ(entries[0].target, "/mnt2");
  EXPECT_EQ(entries[0].fs_type, "ext3");
  EXPECT_EQ(entries[0].source, "/dev/root");
}

TEST(MountInfoTest, LastMountAtATargetWins) {
  std::string text =
      "40 27 7:1 / /stage rw - ext4 /dev/loop1 rw\n"
      "41 40 7:2 / /stage rw - xfs /dev/loop2 rw\n";
  auto entries = ParseMountInfo(text);
  const MountEntry* top = FindMountAt(entries, "/stage");
  ASSERT_NE(top, nullptr);
  EXPECT_EQ(top->source, "/dev/loop2");
}

}  // namespace
}  // namespace blockcsi
