// `blockctl trim` for real: a sparse image behind a real loop device, a
// real ext4 or xfs on it (made without discard, mounted without it, as the
// node stages), an attach record saying it is staged; 256 MiB written and
// deleted, then the blockctl binary trims it: the image's allocated blocks
// (st_blocks) must drop by at least 90 % of what was written, and blockctl
// must print the bytes the kernel reported. Needs root and loop devices;
// every mount and loop device is removed in TearDown, also after a failure.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "attach/attach_record_store.h"
#include "backend/local/pool.h"
#include "backend/volume_id.h"
#include "common/executor.h"
#include "node/staged_facts.h"
#include "support/leak_check.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kWritten = 256ULL << 20;

uint64_t AllocatedBytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

// A volume attached as the node stages one, on real loop devices; and,
// for the space test, a pool on a file system of its own. Everything it
// made is removed in TearDown, then the leak check runs.
class TrimFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::IsRoot()) GTEST_SKIP() << "needs root: loop devices, mkfs and mount";
    if (!std::filesystem::exists("/dev/loop-control")) GTEST_SKIP() << "no loop devices on this machine";
    scope_.dir = dir_.path();
    baseline_ = testing::TakeLeakSnapshot(scope_);
  }

  void TearDown() override {
    if (!testing::IsRoot()) return;
    if (mounted_) Run(Command("umount").Arg(staging_));
    if (!device_.empty()) {
      Run(Command("losetup").Arg("-d").Arg(device_));
      // A loop device still open (its filesystem's last reference going)
      // lets go of its backing file a moment after `losetup -d`; the pool's
      // file system, which holds that file, cannot be unmounted before.
      const std::string backing = "/sys/block/" + device_.substr(5) + "/loop/backing_file";
      for (int i = 0; i < 100 && std::filesystem::exists(backing); ++i) std::this_thread::sleep_for(50ms);
    }
    pool_.reset();
    if (pool_mounted_) Run(Command("umount").Arg(pool_dir_));
    if (!pool_device_.empty()) Run(Command("losetup").Arg("-d").Arg(pool_device_));
    EXPECT_TRUE(testing::NothingLeftSince(baseline_, scope_, "the trim test's cleanup"));
  }

  // A new sparse file of `bytes` at `path`, as the pool makes images.
  static void MakeSparseFile(const std::string& path, off_t bytes) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ::close(fd);
    ASSERT_EQ(::truncate(path.c_str(), bytes), 0);
  }

  // A loop device on `file`; "" (and a test failure) when losetup fails.
  std::string LoopOn(const std::string& file) {
    std::string device = Run(Command("losetup").Arg("--find").Arg("--show").Arg(file));
    EXPECT_EQ(device.rfind("/dev/loop", 0), 0u) << device;
    return device.rfind("/dev/loop", 0) == 0 ? device : "";
  }

  // Attaches `image` as the node stages a volume: a loop device, a
  // filesystem made without discard, mounted without it, a record.
  void Attach(const std::string& image, const std::string& fs) {
    image_ = image;
    staging_ = dir_.Join("staging/vol-trim");
    std::filesystem::create_directories(staging_);
    device_ = LoopOn(image_);
    ASSERT_FALSE(device_.empty());
    Command mkfs = fs == "xfs" ? Command("mkfs.xfs").Arg("-q").Arg("-K").Arg(device_)
                               : Command("mkfs.ext4").Arg("-q").Arg("-E").Arg("nodiscard").Arg(device_);
    Run(mkfs);
    Run(Command("mount").Arg("-t").Arg(fs).Arg(device_).Arg(staging_));
    mounted_ = true;
    AttachRecord r;
    r.volume_id = "vol-trim";
    r.connector = "userspace";
    r.transport = "iscsi";
    r.state = "attached";
    r.device_path = device_;
    r.annotations[kStagedAnnotation] =
        StagedFacts{.access_type = "mount", .fs_type = fs, .staging_path = staging_}.Encode();
    AttachRecordStore store(dir_.Join("state"), MachineHost());
    ASSERT_TRUE(store.Init().ok());
    ASSERT_TRUE(store.Put(r).ok());
  }

  std::string Run(const Command& cmd) {
    auto r = executor_->Run(Command(cmd).Timeout(120s));
    EXPECT_TRUE(r.ok() && r->ok()) << DescribeFailure(cmd, r.ok() ? *r : CommandResult{});
    if (!r.ok()) return "";
    std::string out = r->stdout_text;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  // blockctl trim with `args`, against this test's state dir.
  StatusOr<CommandResult> Blockctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"--state-dir", dir_.Join("state")});
    return executor_->Run(Command(testing::BinDir() + "/blockctl").Args(args).Timeout(120s));
  }

  // 256 MiB of non-zero data in one file, on disk.
  void WriteFile(const std::string& path) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    std::vector<char> block(1 << 20);
    for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 131 + 7);
    for (uint64_t done = 0; done < kWritten; done += block.size()) {
      block[0] = static_cast<char>(done >> 20);
      ASSERT_EQ(::write(fd, block.data(), block.size()), static_cast<ssize_t>(block.size()));
    }
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  }

  testing::TempDir dir_;
  testing::LeakScope scope_;
  testing::LeakSnapshot baseline_;
  std::unique_ptr<Executor> executor_ = MakeProcessExecutor();
  std::string image_, staging_, device_;
  bool mounted_ = false;
  std::string pool_device_, pool_dir_;
  bool pool_mounted_ = false;
  std::unique_ptr<Pool> pool_;
};

class TrimRealTest : public TrimFixture, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    TrimFixture::SetUp();
    if (IsSkipped()) return;
    MakeSparseFile(dir_.Join("vol-trim.img"), 1LL << 30);
    Attach(dir_.Join("vol-trim.img"), GetParam());
  }
};

TEST_P(TrimRealTest, WriteDeleteTrimGivesTheImagesBlocksBack) {
  const uint64_t before_write = AllocatedBytes(image_);
  WriteFile(staging_ + "/data");
  Run(Command("sync").Arg("-f").Arg(staging_));
  const uint64_t written = AllocatedBytes(image_);
  ASSERT_GE(written - before_write, kWritten * 9 / 10) << "the write did not reach the image";
  std::filesystem::remove(staging_ + "/data");
  Run(Command("sync").Arg("-f").Arg(staging_));
  const uint64_t deleted = AllocatedBytes(image_);
  // Without discard, deleting gives nothing back: that is what trim is for.
  EXPECT_GE(deleted, written - kWritten / 10) << "deleting alone freed the image's blocks (mounted with discard?)";

  auto r = Blockctl({"-o", "json", "trim", "vol-trim"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->exit_code, 0) << r->stdout_text << r->stderr_text;
  auto j = nlohmann::json::parse(r->stdout_text);
  ASSERT_EQ(j.size(), 1u) << r->stdout_text;
  EXPECT_EQ(j[0]["result"], "trimmed");
  const uint64_t reported = std::stoull(j[0]["trimmed_bytes"].get<std::string>());
  const uint64_t trimmed = AllocatedBytes(image_);
  std::cout << GetParam() << ": image allocated " << before_write << " B fresh, " << written << " B after writing "
            << kWritten << " B, " << deleted << " B after deleting, " << trimmed << " B after blockctl trim; kernel "
            << "reported " << reported << " B trimmed\n";
  EXPECT_GE(reported, kWritten * 9 / 10);
  ASSERT_LE(trimmed, deleted);
  EXPECT_GE(deleted - trimmed, kWritten * 9 / 10) << "the trim gave back less than 90 % of what was deleted";
}

INSTANTIATE_TEST_SUITE_P(Filesystems, TrimRealTest, ::testing::Values("ext4", "xfs"));

// The pool's space figures after a real trim: the pool on a file system of
// its own (a 1 GiB ext4 on a loop device, so its free space is the pool's
// alone), a 512 MiB volume in it attached as the node would (loop device,
// ext4, mount, record), 256 MiB written and deleted, blockctl trim. The
// image's allocated bytes must drop, and under overcommit ratio 4 GetCapacity
// (Pool::AvailableBytes) must rise: the volume held more than the ratio
// expects, and the trim gave it back.
class PoolSpaceRealTest : public TrimFixture {
 protected:
  void SetUp() override {
    TrimFixture::SetUp();
    if (IsSkipped()) return;
    MakeSparseFile(dir_.Join("poolfs.img"), 1LL << 30);
    pool_device_ = LoopOn(dir_.Join("poolfs.img"));
    ASSERT_FALSE(pool_device_.empty());
    Run(Command("mkfs.ext4").Arg("-q").Arg(pool_device_));
    pool_dir_ = dir_.Join("pool");
    std::filesystem::create_directories(pool_dir_);
    Run(Command("mount").Arg(pool_device_).Arg(pool_dir_));
    pool_mounted_ = true;
    PoolOptions options;
    options.overcommit_ratio = 4.0;
    auto pool = Pool::Open(pool_dir_, options);
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(pool).value();
    VolumeRecord v;
    v.id = NewVolumeId();
    v.name = "pvc-space";
    v.size_bytes = 512ULL << 20;
    ASSERT_TRUE(pool_->CreateVolume(v, "").ok());
    volume_id_ = v.id;
    Attach(pool_->ImagePath(v.id), "ext4");
  }

  std::string volume_id_;
};

TEST_F(PoolSpaceRealTest, ATrimLowersTheImagesAllocationAndRaisesCapacityUnderOvercommit) {
  WriteFile(staging_ + "/data");
  std::filesystem::remove(staging_ + "/data");
  Run(Command("sync").Arg("-f").Arg(staging_));
  const uint64_t allocated_before = *pool_->ImageAllocatedBytes(volume_id_);
  const uint64_t capacity_before = *pool_->AvailableBytes();
  const uint64_t free_before = pool_->FileSystemSpace()->available_bytes;
  ASSERT_GE(allocated_before, kWritten) << "the deleted data is still allocated before the trim";
  auto r = Blockctl({"trim", "--all"});
  ASSERT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->stdout_text + r->stderr_text : r.status().ToString());
  const uint64_t allocated_after = *pool_->ImageAllocatedBytes(volume_id_);
  const uint64_t capacity_after = *pool_->AvailableBytes();
  const uint64_t free_after = pool_->FileSystemSpace()->available_bytes;
  std::cout << "pool (ratio 4, 512 MiB volume): allocated " << allocated_before << " -> " << allocated_after
            << " B, pool free " << free_before << " -> " << free_after << " B, GetCapacity " << capacity_before
            << " -> " << capacity_after << " B, pool allocated " << pool_->AllocatedBytes() << " B, provisioned "
            << pool_->ProvisionedBytes() << " B\n";
  EXPECT_GE(allocated_before - allocated_after, kWritten * 9 / 10);
  EXPECT_GE(free_after - free_before, kWritten * 9 / 10) << "the pool's file system got the space back";
  EXPECT_GT(capacity_after, capacity_before + kWritten) << "GetCapacity counts the space the trim gave back";
}

}  // namespace
}  // namespace blockcsi
