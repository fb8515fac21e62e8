#include "backend/local/pool.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "backend/volume_id.h"
#include "common/atomic_file.h"
#include "support/recording_image_files.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using testing::TempDir;
constexpr uint64_t kMiB = 1024 * 1024;

VolumeRecord Record(const std::string& name, uint64_t size) {
  VolumeRecord r;
  r.id = NewVolumeId();
  r.name = name;
  r.size_bytes = size;
  r.created_unix_seconds = 1700000000;
  r.target_iqn = "iqn.2026-11.io.blockcsi:" + r.id;
  r.serial = "bcsi" + std::string(IdHex(r.id));
  r.wwn = "60000000b10cc5a1" + std::string(IdHex(r.id));
  return r;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t AllocatedBytes(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

TEST(PoolTest, CreatesSparseImageAndDurableRecord) {
  TempDir dir;
  auto pool = Pool::Open(dir.path());
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  VolumeRecord r = Record("pvc-1", 64 * kMiB);
  r.grants.push_back({"iqn.2026-11.io.blockcsi:node:a", "a", false, "cap", true});
  r.parameters["fsType"] = "ext4";
  ASSERT_TRUE((*pool)->CreateVolume(r, "").ok());
  std::string image = (*pool)->ImagePath(r.id);
  struct stat st {};
  ASSERT_EQ(::stat(image.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 64 * kMiB);
  EXPECT_LT(AllocatedBytes(image), kMiB) << "image should be sparse";
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto text = ReadFileToString(dir.Join("volumes/" + r.id + ".json"));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->find("password"), std::string::npos);
  pool->reset();

  // Reopened: the same record.
  auto again = Pool::Open(dir.path());
  ASSERT_TRUE(again.ok());
  auto got = (*again)->GetVolume(r.id);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->name, "pvc-1");
  EXPECT_EQ(got->size_bytes, 64 * kMiB);
  ASSERT_EQ(got->grants.size(), 1u);
  EXPECT_TRUE(got->grants[0].chap);
  EXPECT_EQ(got->parameters.at("fsType"), "ext4");
  EXPECT_EQ((*again)->FindVolumeByName("pvc-1")->id, r.id);
}

TEST(PoolTest, SecondOpenOfALockedPoolIsRefused) {
  TempDir dir;
  auto first = Pool::Open(dir.path());
  ASSERT_TRUE(first.ok());
  auto second = Pool::Open(dir.path());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
}

TEST(PoolTest, RecoveryRemovesImagesWithoutRecordAndTempFiles) {
  TempDir dir;
  std::string orphan_id = NewVolumeId();
  {
    auto pool = Pool::Open(dir.path());
    ASSERT_TRUE(pool.ok());
  }
  ASSERT_TRUE(WriteFileAtomically(dir.Join("images/" + orphan_id + ".img"), "x").ok());
  ASSERT_TRUE(WriteFileAtomically(dir.Join("tmp/" + orphan_id + ".img"), "x").ok());
  ASSERT_TRUE(WriteFileAtomically(dir.Join("volumes/.vol-x.json.tmp123"), "{").ok());
  auto pool = Pool::Open(dir.path());
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_TRUE(Names(dir.Join("images")).empty());
  EXPECT_TRUE(Names(dir.Join("tmp")).empty());
  EXPECT_TRUE(Names(dir.Join("volumes")).empty());
}

// An error return between steps (a real kill -9 at these steps: test/fault).
TEST(PoolTest, ErrorBetweenStepsLeavesNothingVisibleAfterReopen) {
  for (const char* step : {"controller.create.image-staged", "controller.create.image-placed"}) {
    TempDir dir;
    PoolOptions options;
    options.fault_hook = [step](std::string_view s) {
      return s == step ? Aborted(std::string("fault at ") + step) : OkStatus();
    };
    VolumeRecord r = Record("pvc-crash", 8 * kMiB);
    {
      auto pool = Pool::Open(dir.path(), options);
      ASSERT_TRUE(pool.ok());
      EXPECT_EQ((*pool)->CreateVolume(r, "").code(), StatusCode::kAborted) << step;
    }
    auto pool = Pool::Open(dir.path());
    ASSERT_TRUE(pool.ok());
    EXPECT_FALSE((*pool)->GetVolume(r.id).has_value()) << step;
    EXPECT_TRUE((*pool)->ListVolumes().empty()) << step;
    EXPECT_TRUE(Names(dir.Join("images")).empty()) << step;
    EXPECT_TRUE(Names(dir.Join("tmp")).empty()) << step;
  }
}

TEST(PoolTest, DeleteRemovesRecordThenImageAndSurvivesAnErrorBetween) {
  TempDir dir;
  VolumeRecord r = Record("pvc-del", 8 * kMiB);
  {
    PoolOptions options;
    options.fault_hook = [](std::string_view s) {
      return s == "controller.delete.record-removed" ? Aborted("fault") : OkStatus();
    };
    auto pool = Pool::Open(dir.path(), options);
    ASSERT_TRUE(pool.ok());
    ASSERT_TRUE((*pool)->CreateVolume(r, "").ok());
    EXPECT_EQ((*pool)->DeleteVolume(r.id).code(), StatusCode::kAborted);
  }
  auto pool = Pool::Open(dir.path());
  ASSERT_TRUE(pool.ok());
  EXPECT_FALSE((*pool)->GetVolume(r.id).has_value());
  EXPECT_TRUE(Names(dir.Join("images")).empty());
}

TEST(PoolTest, InterruptedExpandIsRolledForward) {
  TempDir dir;
  VolumeRecord r = Record("pvc-grow", 8 * kMiB);
  {
    auto pool = Pool::Open(dir.path());
    ASSERT_TRUE((*pool)->CreateVolume(r, "").ok());
    ASSERT_TRUE((*pool)->GrowImage(r.id, 16 * kMiB).ok());  // crash before the record update
  }
  auto pool = Pool::Open(dir.path());
  EXPECT_EQ((*pool)->GetVolume(r.id)->size_bytes, 16 * kMiB);
}

// PlaceImage does not fsync a new empty volume's image: a power loss may
// leave it shorter than its record (never before any flush of data). Open
// sizes it back up; an image with content (a clone) is never touched.
TEST(PoolTest, AnEmptyVolumesImageThatACrashLeftShortIsSizedBackUp) {
  TempDir dir;
  VolumeRecord empty = Record("pvc-empty", 8 * kMiB);
  VolumeRecord clone = Record("pvc-clone", 8 * kMiB);
  clone.source = {ContentSource::Kind::kVolume, empty.id};
  {
    auto pool = Pool::Open(dir.path());
    ASSERT_TRUE((*pool)->CreateVolume(empty, "").ok());
    ASSERT_TRUE((*pool)->CreateVolume(clone, (*pool)->ImagePath(empty.id)).ok());
    ASSERT_EQ(::truncate((*pool)->ImagePath(empty.id).c_str(), 0), 0);  // the size the crash lost
    ASSERT_EQ(::truncate((*pool)->ImagePath(clone.id).c_str(), 4 * kMiB), 0);
  }
  auto pool = Pool::Open(dir.path());
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat((*pool)->ImagePath(empty.id).c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 8 * kMiB);
  EXPECT_LT(AllocatedBytes((*pool)->ImagePath(empty.id)), kMiB) << "sized back up sparse";
  ASSERT_EQ(::stat((*pool)->ImagePath(clone.id).c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 4 * kMiB) << "a clone's image is not made up";
  EXPECT_EQ((*pool)->GetVolume(empty.id)->size_bytes, 8 * kMiB);
}

// Pages and names come from the index the pool keeps, in step with every
// create and delete, and rebuilt by Open.
TEST(PoolTest, PagesAreInIdOrderAndNamesAreFoundAfterChanges) {
  TempDir dir;
  std::vector<VolumeRecord> made;
  {
    auto pool = Pool::Open(dir.path());
    for (int i = 0; i < 5; ++i) {
      made.push_back(Record("pvc-" + std::to_string(i), kMiB));
      ASSERT_TRUE((*pool)->CreateVolume(made.back(), "").ok());
    }
    ASSERT_TRUE((*pool)->DeleteVolume(made[2].id).ok());
    EXPECT_FALSE((*pool)->FindVolumeByName("pvc-2").has_value());
  }
  made.erase(made.begin() + 2);
  std::sort(made.begin(), made.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  auto pool = Pool::Open(dir.path());
  std::vector<std::string> listed;
  std::string token;
  do {
    auto page = (*pool)->ListVolumesFrom(token, 3, &token);
    EXPECT_LE(page.size(), 3u);
    for (const auto& r : page) listed.push_back(r.id);
  } while (!token.empty());
  ASSERT_EQ(listed.size(), made.size());
  for (size_t i = 0; i < made.size(); ++i) EXPECT_EQ(listed[i], made[i].id);
  std::string next;
  EXPECT_EQ((*pool)->ListVolumesFrom("", 0, &next).size(), made.size());
  EXPECT_TRUE(next.empty());
  for (const auto& r : made) EXPECT_EQ((*pool)->FindVolumeByName(r.name)->id, r.id);
  EXPECT_FALSE((*pool)->FindVolumeByName("pvc-2").has_value());
}

TEST(PoolTest, SnapshotCopiesDataKeepsHolesAndIsIndependent) {
  TempDir dir;
  auto pool = Pool::Open(dir.path());
  ASSERT_TRUE(pool.ok());
  VolumeRecord r = Record("pvc-src", 64 * kMiB);
  ASSERT_TRUE((*pool)->CreateVolume(r, "").ok());
  {
    int fd = ::open((*pool)->ImagePath(r.id).c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "hello", 5, 32 * kMiB), 5);
    ::close(fd);
  }
  SnapshotRecord s{NewSnapshotId(), "snap-1", r.id, r.size_bytes, 1700000000, true, ""};
  CopyMethod method = CopyMethod::kNone;
  ASSERT_TRUE((*pool)->CreateSnapshot(s, &method).ok());
  EXPECT_NE(method, CopyMethod::kNone);
  std::string snap_image = (*pool)->ImagePath(s.id);
  EXPECT_LT(AllocatedBytes(snap_image), 4 * kMiB) << "holes must stay holes";
  // Overwrite the source: the snapshot keeps the old bytes.
  {
    int fd = ::open((*pool)->ImagePath(r.id).c_str(), O_WRONLY);
    ASSERT_EQ(::pwrite(fd, "HELLO", 5, 32 * kMiB), 5);
    ::close(fd);
  }
  char buf[6] = {};
  int fd = ::open(snap_image.c_str(), O_RDONLY);
  ASSERT_EQ(::pread(fd, buf, 5, 32 * kMiB), 5);
  ::close(fd);
  EXPECT_STREQ(buf, "hello");

  // A clone from the snapshot, larger than it.
  VolumeRecord clone = Record("pvc-clone", 128 * kMiB);
  ASSERT_TRUE((*pool)->CreateVolume(clone, snap_image).ok());
  struct stat st {};
  ASSERT_EQ(::stat((*pool)->ImagePath(clone.id).c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 128 * kMiB);
  fd = ::open((*pool)->ImagePath(clone.id).c_str(), O_RDONLY);
  ASSERT_EQ(::pread(fd, buf, 5, 32 * kMiB), 5);
  ::close(fd);
  EXPECT_STREQ(buf, "hello");

  ASSERT_TRUE((*pool)->DeleteSnapshot(s.id).ok());
  EXPECT_FALSE((*pool)->GetSnapshot(s.id).has_value());
  EXPECT_NE(::access(snap_image.c_str(), F_OK), 0);
}

TEST(PoolTest, RejectsIdsThatAreNotOurs) {
  TempDir dir;
  auto pool = Pool::Open(dir.path());
  VolumeRecord r = Record("pvc-x", kMiB);
  r.id = "../../etc";
  EXPECT_EQ((*pool)->CreateVolume(r, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*pool)->DeleteVolume("../../etc").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*pool)->GrowImage("../x", kMiB).code(), StatusCode::kInvalidArgument);
}

TEST(PoolTest, AvailableBytesIsPositive) {
  TempDir dir;
  auto pool = Pool::Open(dir.path());
  auto free = (*pool)->AvailableBytes();
  ASSERT_TRUE(free.ok());
  EXPECT_GT(*free, 0u);
}

// A pool on a file system of `total` bytes with `available` free: its
// test ImageFiles reports those sizes (the real statvfs path is
// AvailableBytesIsPositive's).
struct SizedPool {
  SizedPool(const TempDir& dir, uint64_t total, uint64_t available, double ratio = 1.0)
      : files(std::make_shared<testing::RecordingImageFiles>(dir.path())) {
    files->SetSpace(total, available);
    PoolOptions options;
    options.files = files;
    options.overcommit_ratio = ratio;
    auto opened = Pool::Open(dir.path(), options);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    if (opened.ok()) pool = std::move(opened).value();
  }
  std::shared_ptr<testing::RecordingImageFiles> files;
  std::unique_ptr<Pool> pool;
};

constexpr uint64_t kGiB = 1024 * kMiB;

// Issue #21: 2^44 bytes gave INTERNAL "File too large" and left a 0-byte
// tmp/vol-*.img behind until a restart.
TEST(PoolTest, SizesThePoolCanNeverHoldAreOutOfRangeAndLeaveNothing) {
  TempDir dir;
  SizedPool sized(dir, 10 * kGiB, 5 * kGiB);
  ASSERT_NE(sized.pool, nullptr);
  Pool& pool = *sized.pool;
  for (uint64_t size : {uint64_t{1} << 44, uint64_t{1} << 50, 10 * kGiB + kMiB, uint64_t{1} << 63}) {
    SCOPED_TRACE(size);
    VolumeRecord r = Record("pvc-huge", size);
    Status st = pool.CreateVolume(r, "");
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.ToString();
    EXPECT_NE(st.message().find(r.id), std::string::npos) << st.message();
    EXPECT_TRUE(Names(dir.Join("tmp")).empty());
    EXPECT_TRUE(Names(dir.Join("images")).empty());
    EXPECT_TRUE(Names(dir.Join("volumes")).empty());
    EXPECT_FALSE(pool.GetVolume(r.id).has_value());
  }
  EXPECT_TRUE(sized.files->TakeSteps().empty()) << "refused before touching a file";
  // A grow to such a size is refused the same way, and the image keeps its size.
  VolumeRecord small = Record("pvc-small", 4 * kMiB);
  ASSERT_TRUE(pool.CreateVolume(small, "").ok());
  EXPECT_EQ(pool.GrowImage(small.id, uint64_t{1} << 50).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(*pool.ImageSize(small.id), 4 * kMiB);
}

TEST(PoolTest, OvercommitRatioBoundsEachNewVolumeAndEachGrow) {
  TempDir dir;
  // A 4 GiB file system with 1 GiB free: a quarter of the free space is
  // 256 MiB, a quarter of the whole 1 GiB; 288 MiB lies between.
  const uint64_t size = 288 * kMiB;
  {
    SizedPool sized(dir, 4 * kGiB, kGiB, 0.25);
    ASSERT_NE(sized.pool, nullptr);
    Pool& pool = *sized.pool;
    EXPECT_EQ(*pool.AvailableBytes(), 256 * kMiB) << "GetCapacity reports what the policy allows";
    VolumeRecord r = Record("pvc-over", size);
    Status st = pool.CreateVolume(r, "");
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
    EXPECT_NE(st.message().find("overcommit ratio 0.25"), std::string::npos) << st.message();
    EXPECT_TRUE(Names(dir.Join("tmp")).empty());
    EXPECT_TRUE(Names(dir.Join("images")).empty());
    // A grow past the policy is refused the same way, and the image keeps its size.
    VolumeRecord small = Record("pvc-small", 8 * kMiB);
    ASSERT_TRUE(pool.CreateVolume(small, "").ok());
    EXPECT_EQ(pool.GrowImage(small.id, 8 * kMiB + size).code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(*pool.ImageSize(small.id), 8 * kMiB);
  }
  {
    SizedPool sized(dir, 4 * kGiB, kGiB, 4.5);  // the same size fits a ratio of more than 4
    ASSERT_NE(sized.pool, nullptr);
    VolumeRecord r = Record("pvc-thin", size);
    ASSERT_TRUE(sized.pool->CreateVolume(r, "").ok());
    EXPECT_LT(AllocatedBytes(sized.pool->ImagePath(r.id)), kMiB) << "thin volumes stay sparse";
    ASSERT_TRUE(sized.pool->DeleteVolume(r.id).ok());
  }
}

// Thin images leave the free space where it was, so a ratio checked against
// each request alone let any number of volumes through: the policy is on the
// total provisioned (volumes and snapshots), and GetCapacity says what is left.
TEST(PoolTest, OvercommitRatioBoundsWhatIsProvisionedInTotal) {
  TempDir dir;
  // 1 GiB file system, all free, ratio 2: 2 GiB may be provisioned in all.
  SizedPool sized(dir, kGiB, kGiB, 2.0);
  ASSERT_NE(sized.pool, nullptr);
  Pool& pool = *sized.pool;
  std::vector<VolumeRecord> volumes;
  for (int i = 0; i < 3; ++i) {
    volumes.push_back(Record("pvc-" + std::to_string(i), 600 * kMiB));
    ASSERT_TRUE(pool.CreateVolume(volumes.back(), "").ok()) << i;
  }
  EXPECT_EQ(pool.ProvisionedBytes(), 1800 * kMiB);
  EXPECT_EQ(*pool.AvailableBytes(), 248 * kMiB) << "GetCapacity: what the ratio leaves beyond what is provisioned";
  Status st = pool.CreateVolume(Record("pvc-one-too-many", 600 * kMiB), "");
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("provision"), std::string::npos) << st.message();
  EXPECT_TRUE(Names(dir.Join("tmp")).empty());
  // A grow counts the same way; so does a snapshot, which is a copy.
  const std::string first = volumes.front().id;
  EXPECT_EQ(pool.GrowImage(first, 900 * kMiB).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(*pool.ImageSize(first), 600 * kMiB);
  SnapshotRecord snap{NewSnapshotId(), "snap-over", first, 600 * kMiB, 1700000000, true, ""};
  EXPECT_EQ(pool.CreateSnapshot(snap).code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(pool.GetSnapshot(snap.id).has_value());
  // What fits still fits, and a delete gives its share back.
  ASSERT_TRUE(pool.CreateVolume(Record("pvc-fits", 200 * kMiB), "").ok());
  ASSERT_TRUE(pool.DeleteVolume(first).ok());
  EXPECT_TRUE(pool.CreateVolume(Record("pvc-after-delete", 600 * kMiB), "").ok());
}

// GetCapacity under overcommit counts what the volumes have really written
// (pool.h, AvailableBytes): free space times the ratio, less what the ratio
// still expects each volume to write. The test's file system sizes follow
// the image's real allocation, as a pool alone on its file system's would.
TEST(PoolTest, CapacityUnderOvercommitCountsWhatVolumesReallyAllocated) {
  TempDir dir;
  // A file system may take a block or two beyond the data (ext4's extent
  // tree): the figures are checked to 64 KiB of allocation.
  constexpr double kSlack = 64 * 1024;
  // 1 GiB file system, 256 MiB of it free before any volume (something
  // else holds the rest), ratio 4.
  SizedPool sized(dir, kGiB, 256 * kMiB, 4.0);
  ASSERT_NE(sized.pool, nullptr);
  Pool& pool = *sized.pool;
  VolumeRecord v = Record("pvc-thin", 512 * kMiB);
  ASSERT_TRUE(pool.CreateVolume(v, "").ok());
  auto write = [&](uint64_t offset, uint64_t bytes) {
    int fd = ::open(pool.ImagePath(v.id).c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    std::vector<char> chunk(kMiB, 'x');
    for (uint64_t at = offset; at < offset + bytes; at += kMiB) {
      ASSERT_EQ(::pwrite(fd, chunk.data(), chunk.size(), static_cast<off_t>(at)), static_cast<ssize_t>(kMiB));
    }
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  };
  auto free_after = [&] {
    uint64_t allocated = *pool.ImageAllocatedBytes(v.id);
    sized.files->SetSpace(kGiB, 256 * kMiB - std::min<uint64_t>(allocated, 256 * kMiB));
    return allocated;
  };
  // Empty: 4 * 256 MiB free, less the 512 MiB the new volume may still write
  // (the old formula, 4 * free, said 1 GiB: a volume the disk could not back
  // once the first one fills as the ratio expects).
  free_after();
  EXPECT_NEAR(*pool.AvailableBytes(), 512 * kMiB, 4 * kSlack);
  // 64 MiB written, a quarter of what the ratio expects of it: no change.
  write(0, 64 * kMiB);
  EXPECT_NEAR(free_after(), 64 * kMiB, kSlack);
  EXPECT_NEAR(*pool.AvailableBytes(), 512 * kMiB, 4 * kSlack);
  EXPECT_NEAR(pool.AllocatedBytes(), 64 * kMiB, kSlack);
  // 192 MiB: fuller than the ratio expects (128 MiB); the pool can back
  // only 4 * the 64 MiB left, and says so to CreateVolume as to GetCapacity.
  write(64 * kMiB, 128 * kMiB);
  EXPECT_NEAR(free_after(), 192 * kMiB, kSlack);
  EXPECT_NEAR(*pool.AvailableBytes(), 256 * kMiB, 4 * kSlack);
  Status st = pool.CreateVolume(Record("pvc-more", 300 * kMiB), "");
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("free space backs"), std::string::npos) << st.message();
  // A trim punches 128 MiB of holes in the image: that room counts again.
  int fd = ::open(pool.ImagePath(v.id).c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 128 * kMiB), 0);
  ::close(fd);
  EXPECT_NEAR(free_after(), 64 * kMiB, kSlack);
  EXPECT_NEAR(*pool.AvailableBytes(), 512 * kMiB, 4 * kSlack);
  EXPECT_TRUE(pool.CreateVolume(Record("pvc-more", 300 * kMiB), "").ok());
}

TEST(PoolTest, MaxVolumesCapsTheVolumeCountWithResourceExhausted) {
  TempDir dir;
  auto files = std::make_shared<testing::RecordingImageFiles>(dir.path());
  files->SetSpace(kGiB, kGiB);
  PoolOptions options;
  options.files = files;
  options.max_volumes = 2;
  auto opened = Pool::Open(dir.path(), options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Pool& pool = **opened;
  VolumeRecord a = Record("pvc-a", kMiB), b = Record("pvc-b", kMiB);
  ASSERT_TRUE(pool.CreateVolume(a, "").ok());
  ASSERT_TRUE(pool.CreateVolume(b, "").ok());
  VolumeRecord third = Record("pvc-c", kMiB);
  Status st = pool.CreateVolume(third, "");
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("--max-volumes 2"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(third.id), std::string::npos) << st.message();
  EXPECT_TRUE(Names(dir.Join("tmp")).empty());
  EXPECT_FALSE(pool.GetVolume(third.id).has_value());
  // A grow makes no new volume.
  EXPECT_TRUE(pool.GrowImage(a.id, 2 * kMiB).ok());
  ASSERT_TRUE(pool.DeleteVolume(b.id).ok());
  EXPECT_TRUE(pool.CreateVolume(third, "").ok()) << "a deleted volume frees its place";
}

// The order of the durable steps is what makes every crash point
// recoverable (pool.h): an image's name durable before its record, a
// record's removal durable before its image goes.
TEST(PoolTest, DurableStepsComeInTheOrderTheCrashPointsNeed) {
  TempDir dir;
  SizedPool sized(dir, 10 * kGiB, 5 * kGiB);
  ASSERT_NE(sized.pool, nullptr);
  Pool& pool = *sized.pool;
  VolumeRecord r = Record("pvc-order", 4 * kMiB);
  const std::string img = r.id + ".img";
  ASSERT_TRUE(pool.CreateVolume(r, "").ok());
  EXPECT_EQ(sized.files->TakeSteps(),
            (std::vector<std::string>{"create tmp/" + img, "rename tmp/" + img + " images/" + img, "sync-dir images",
                                      "write-record volumes/" + r.id + ".json"}));
  r.grants.push_back({"iqn.2026-11.io.blockcsi:node:a", "a", false, "cap", false});
  ASSERT_TRUE(pool.UpdateVolume(r).ok());
  EXPECT_EQ(sized.files->TakeSteps(), (std::vector<std::string>{"write-record volumes/" + r.id + ".json"}));
  ASSERT_TRUE(pool.GrowImage(r.id, 8 * kMiB).ok());
  EXPECT_EQ(sized.files->TakeSteps(), (std::vector<std::string>{"resize images/" + img}));
  SnapshotRecord snap{NewSnapshotId(), "snap-order", r.id, 8 * kMiB, 0, true, ""};
  const std::string snap_img = snap.id + ".img";
  ASSERT_TRUE(pool.CreateSnapshot(snap).ok());
  EXPECT_EQ(sized.files->TakeSteps(),
            (std::vector<std::string>{"remove tmp/" + snap_img, "clone tmp/" + snap_img,
                                      "rename tmp/" + snap_img + " images/" + snap_img, "sync-dir images",
                                      "write-record snapshots/" + snap.id + ".json"}));
  ASSERT_TRUE(pool.DeleteVolume(r.id).ok());
  EXPECT_EQ(sized.files->TakeSteps(),
            (std::vector<std::string>{"remove-durably volumes/" + r.id + ".json", "remove images/" + img}));
  ASSERT_TRUE(pool.DeleteSnapshot(snap.id).ok());
  EXPECT_EQ(sized.files->TakeSteps(),
            (std::vector<std::string>{"remove-durably snapshots/" + snap.id + ".json", "remove images/" + snap_img}));
}

// A create whose record cannot be written takes its image back.
TEST(PoolTest, ACreateWhoseRecordFailsLeavesNoImage) {
  TempDir dir;
  SizedPool sized(dir, 10 * kGiB, 5 * kGiB);
  ASSERT_NE(sized.pool, nullptr);
  sized.files->FailNext("write-record");
  VolumeRecord r = Record("pvc-fail", 4 * kMiB);
  EXPECT_EQ(sized.pool->CreateVolume(r, "").code(), StatusCode::kInternal);
  EXPECT_TRUE(Names(dir.Join("tmp")).empty());
  EXPECT_TRUE(Names(dir.Join("images")).empty());
  EXPECT_TRUE(Names(dir.Join("volumes")).empty());
  EXPECT_FALSE(sized.pool->GetVolume(r.id).has_value());
  // A failed empty image leaves nothing in tmp/ either.
  sized.files->FailNext("create");
  EXPECT_EQ(sized.pool->CreateVolume(r, "").code(), StatusCode::kInternal);
  EXPECT_TRUE(Names(dir.Join("tmp")).empty());
}

TEST(PoolTest, OvercommitRatioFlagParses) {
  EXPECT_EQ(*ParseOvercommitRatio("1"), 1.0);
  EXPECT_EQ(*ParseOvercommitRatio("2.5"), 2.5);
  for (const char* bad : {"", "0", "-1", "nan", "inf", "1e9", "1x", " 1"}) {
    EXPECT_EQ(ParseOvercommitRatio(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace blockcsi
