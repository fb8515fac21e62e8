// Snapshots and clones share extents (FICLONE) on a pool that lives on xfs
// or btrfs: a loop-mounted filesystem made for the test (root, loop devices).
// Sharing is read from the filesystem (FIEMAP), not from the pool's own
// report of the copy method it used.
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

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

// Where each written block of a file is on the disk, as the filesystem
// says (FIEMAP, after a sync): logical offset -> physical address, and
// whether the extent holding it is shared with another file.
struct BlockPlace {
  uint64_t physical = 0;
  bool shared = false;
};
constexpr uint64_t kBlock = 64 * 1024;

::testing::AssertionResult MapBlocks(const std::string& path, uint64_t len, std::map<uint64_t, BlockPlace>* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ::testing::AssertionFailure() << "open " << path << ": " << std::strerror(errno);
  constexpr uint32_t kMaxExtents = 1024;
  std::vector<char> buf(sizeof(fiemap) + kMaxExtents * sizeof(fiemap_extent));
  auto* fm = reinterpret_cast<fiemap*>(buf.data());
  fm->fm_start = 0;
  fm->fm_length = len;
  fm->fm_flags = FIEMAP_FLAG_SYNC;
  fm->fm_extent_count = kMaxExtents;
  const int rc = ::ioctl(fd, FS_IOC_FIEMAP, fm);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ::testing::AssertionFailure() << "FIEMAP " << path << ": " << std::strerror(err);
  for (uint32_t i = 0; i < fm->fm_mapped_extents; ++i) {
    const fiemap_extent& e = fm->fm_extents[i];
    for (uint64_t at = e.fe_logical - e.fe_logical % kBlock; at < e.fe_logical + e.fe_length && at < len;
         at += kBlock) {
      if (at < e.fe_logical) continue;
      (*out)[at] = {e.fe_physical + (at - e.fe_logical), (e.fe_flags & FIEMAP_EXTENT_SHARED) != 0};
    }
  }
  return ::testing::AssertionSuccess();
}

// Every block of the first `len` bytes of `copy` is on the disk where the
// same block of `original` is, and both extents say they are shared.
::testing::AssertionResult SharesExtents(const std::string& original, const std::string& copy, uint64_t len) {
  std::map<uint64_t, BlockPlace> a, b;
  if (auto ok = MapBlocks(original, len, &a); !ok) return ok;
  if (auto ok = MapBlocks(copy, len, &b); !ok) return ok;
  for (uint64_t at = 0; at < len; at += kBlock) {
    if (!a.contains(at) || !b.contains(at)) {
      return ::testing::AssertionFailure() << "no extent at " << at << " in " << (a.contains(at) ? copy : original);
    }
    if (a[at].physical != b[at].physical) {
      return ::testing::AssertionFailure() << "block " << at << " of " << copy << " is at " << b[at].physical
                                           << ", not at " << a[at].physical << " with " << original << "'s: copied";
    }
    if (!a[at].shared || !b[at].shared) {
      return ::testing::AssertionFailure() << "block " << at << " is not marked FIEMAP_EXTENT_SHARED";
    }
  }
  return ::testing::AssertionSuccess();
}

void ExpectReflinkSnapshotAndClone(const std::string& pool_dir) {
  auto pool = Pool::Open(pool_dir);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  VolumeRecord v;
  v.id = NewVolumeId();
  v.name = "pvc-reflink";
  v.size_bytes = 64 * kMiB;
  ASSERT_TRUE((*pool)->CreateVolume(v, "").ok());
  // Data to share: an empty (sparse) image has no extents at all.
  constexpr uint64_t kWritten = 4 * kMiB;
  {
    std::string data(kWritten, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>('a' + (i / 4096) % 26);
    int fd = ::open((*pool)->ImagePath(v.id).c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(::pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
    EXPECT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  SnapshotRecord s{NewSnapshotId(), "snap-reflink", v.id, v.size_bytes, 0, true, ""};
  CopyMethod method = CopyMethod::kNone;
  ASSERT_TRUE((*pool)->CreateSnapshot(s, &method).ok());
  EXPECT_EQ(method, CopyMethod::kReflink);
  EXPECT_TRUE(SharesExtents((*pool)->ImagePath(v.id), (*pool)->ImagePath(s.id), kWritten)) << "the snapshot";
  VolumeRecord clone = v;
  clone.id = NewVolumeId();
  clone.name = "pvc-reflink-clone";
  clone.size_bytes = 128 * kMiB;
  method = CopyMethod::kNone;
  ASSERT_TRUE((*pool)->CreateVolume(clone, (*pool)->ImagePath(s.id), &method).ok());
  EXPECT_EQ(method, CopyMethod::kReflink);
  EXPECT_TRUE(SharesExtents((*pool)->ImagePath(s.id), (*pool)->ImagePath(clone.id), kWritten)) << "the clone";
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
