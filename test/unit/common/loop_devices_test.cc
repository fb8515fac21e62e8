#include "common/loop_devices.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/test_util.h"

namespace blockcsi {
namespace {

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(LoopDevicesTest, FindsLoopsByBackingFileIncludingDeletedOnes) {
  testing::TempDir root;
  Write(root.Join("sys/block/loop0/loop/backing_file"), "/var/lib/blockcsi/bridges/vol-a/fuse/lun\n");
  Write(root.Join("sys/block/loop1/loop/backing_file"), "/images/other.img\n");
  Write(root.Join("sys/block/loop7/loop/backing_file"), "/var/lib/blockcsi/bridges/vol-a/fuse/lun (deleted)\n");
  std::filesystem::create_directories(root.Join("sys/block/loop2"));  // unused loop: no loop/ dir
  Write(root.Join("sys/block/sda/size"), "100\n");
  auto fs = HostRootedAt(root.path());
  EXPECT_EQ(FindLoopDevicesBackedBy(*fs, "/var/lib/blockcsi/bridges/vol-a/fuse/lun"),
            (std::vector<std::string>{"/dev/loop0", "/dev/loop7"}));
  EXPECT_TRUE(FindLoopDevicesBackedBy(*fs, "/nothing").empty());
}

TEST(LoopDevicesTest, MountPointsMatchByMajorMinor) {
  testing::TempDir root;
  Write(root.Join("sys/block/loop3/dev"), "7:3\n");
  auto fs = HostRootedAt(root.path());
  std::string mountinfo =
      "36 25 7:3 / /var/lib/kubelet/plugins/blockcsi/staging/vol-a rw,relatime shared:1 - ext4 /dev/loop3 rw\n"
      "37 25 7:30 / /mnt/other rw,relatime shared:2 - ext4 /dev/loop30 rw\n"
      "38 25 7:3 / /var/lib/kubelet/pods/p/volumes/v rw,relatime shared:1 - ext4 /dev/loop3 rw\n";
  EXPECT_EQ(MountPointsOfDevice(*fs, "/dev/loop3", mountinfo),
            (std::vector<std::string>{"/var/lib/kubelet/plugins/blockcsi/staging/vol-a",
                                      "/var/lib/kubelet/pods/p/volumes/v"}));
  EXPECT_TRUE(MountPointsOfDevice(*fs, "/dev/loop4", mountinfo).empty());
}

}  // namespace
}  // namespace blockcsi
