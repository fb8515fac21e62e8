// Snapshots and clones share extents (FICLONE) on a pool that lives on xfs
// or btrfs: a loop-mounted filesystem made for the test (root, loop devices).
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "backend/local/pool.h"
#include "backend/volume_id.h"
#include "common/executor.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using testing::TempDir;
constexpr uint64_t kMiB = 1024 * 1024;

// A filesystem image on a loop device, mounted under a temp dir; unmounted
// and detached on destruction, also when the test fails.
class LoopFilesystem {
 public:
  LoopFilesystem(const TempDir& dir, const std::string& mkfs, std::string* error) : mount_(dir.Join("mnt")) {
    auto exec = MakeProcessExecutor();
    std::string image = dir.Join("fs.img");
    auto run = [&](Command c) {
      auto r = exec->Run(c.Timeout(std::chrono::seconds(60)));
      if (!r.ok() || r->exit_code != 0) {
        *error = c.Redacted() + ": " + (r.ok() ? r->stderr_text : r.status().ToString());
        return std::string();
      }
      return r->stdout_text.empty() ? std::string("ok") : r->stdout_text;
    };
    if (run(Command("truncate").Args({"-s", "512M", image})).empty()) return;
    if (run(Command(mkfs).Args({"-q", image})).empty()) return;
    std::string dev = run(Command("losetup").Args({"-f", "--show", image}));
    if (dev.empty()) return;
    device_ = dev.substr(0, dev.find('\n'));
    ::mkdir(mount_.c_str(), 0700);
    if (::mount(device_.c_str(), mount_.c_str(), mkfs == "mkfs.xfs" ? "xfs" : "btrfs", 0, nullptr) != 0) {
      *error = "mount " + device_ + " failed";
      return;
    }
    mounted_ = true;
  }
  ~LoopFilesystem() {
    if (mounted_) ::umount2(mount_.c_str(), 0);
    if (!device_.empty()) {
      auto exec = MakeProcessExecutor();
      (void)exec->Run(Command("losetup").Args({"-d", device_}));
    }
  }
  bool ok() const { return mounted_; }
  const std::string& path() const { return mount_; }

 private:
  std::string mount_;
  std::string device_;
  bool mounted_ = false;
};

void ExpectReflinkSnapshotAndClone(const std::string& pool_dir) {
  auto pool = Pool::Open(pool_dir);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  VolumeRecord v;
  v.id = NewVolumeId();
  v.name = "pvc-reflink";
  v.size_bytes = 64 * kMiB;
  ASSERT_TRUE((*pool)->CreateVolume(v, "").ok());
  SnapshotRecord s{NewSnapshotId(), "snap-reflink", v.id, v.size_bytes, 0, true};
  CopyMethod method = CopyMethod::kNone;
  ASSERT_TRUE((*pool)->CreateSnapshot(s, &method).ok());
  EXPECT_EQ(method, CopyMethod::kReflink);
  VolumeRecord clone = v;
  clone.id = NewVolumeId();
  clone.name = "pvc-reflink-clone";
  clone.size_bytes = 128 * kMiB;
  method = CopyMethod::kNone;
  ASSERT_TRUE((*pool)->CreateVolume(clone, (*pool)->ImagePath(s.id), &method).ok());
  EXPECT_EQ(method, CopyMethod::kReflink);
  struct stat st {};
  ASSERT_EQ(::stat((*pool)->ImagePath(clone.id).c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 128 * kMiB);
}

TEST(ReflinkPoolTest, XfsSnapshotsAndClonesUseReflink) {
  if (!testing::IsRoot()) GTEST_SKIP() << "requires root (loop device, mount)";
  TempDir dir;
  std::string error;
  if (!testing::HaveProgram("mkfs.xfs")) GTEST_SKIP() << "requires mkfs.xfs";
  LoopFilesystem fs(dir, "mkfs.xfs", &error);
  ASSERT_TRUE(fs.ok()) << "cannot make xfs on a loop device: " << error;
  ExpectReflinkSnapshotAndClone(fs.path() + "/pool");
}

TEST(ReflinkPoolTest, BtrfsSnapshotsAndClonesUseReflink) {
  if (!testing::IsRoot()) GTEST_SKIP() << "requires root (loop device, mount)";
  TempDir dir;
  std::string error;
  if (!testing::HaveProgram("mkfs.btrfs")) GTEST_SKIP() << "requires mkfs.btrfs";
  LoopFilesystem fs(dir, "mkfs.btrfs", &error);
  ASSERT_TRUE(fs.ok()) << "cannot make btrfs on a loop device: " << error;
  ExpectReflinkSnapshotAndClone(fs.path() + "/pool");
}

}  // namespace
}  // namespace blockcsi
