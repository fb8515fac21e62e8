// The node's trim (NodeService::Trim, TrimStagedVolumes, NodeTrimLoop)
// against the in-memory fakes: which volumes are trimmed and which are not
// (raw block, read-only, unmounted, no discard), one at a time, a volume
// busy being staged skipped at once rather than waited for, and the
// metrics and logs of each outcome. No privileges needed; the real FITRIM
// runs in test/integration/cli/trim_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "common/metrics.h"
#include "contract/publish_context.h"
#include "node/node_service.h"
#include "node/trim_loop.h"
#include "support/csi_capabilities.h"
#include "support/fake_attacher.h"

namespace blockcsi {
namespace {

using testing::FakeAttacher;
using testing::FakeHost;
using testing::FakeMounter;
using testing::FakeProbe;
using testing::FakeWorld;
using testing::FakeWorldExecutor;

class NodeTrimTest : public ::testing::Test {
 protected:
  NodeTrimTest() {
    SetLogCaptureForTest(&log_lines_);
    NodeServiceOptions o;
    o.node_id = "node-a";
    o.attacher = attacher_;
    o.mounter = mounter_;
    o.probe = std::make_shared<FakeProbe>(world_);
    o.executor = std::make_shared<FakeWorldExecutor>(world_);
    o.host = std::make_shared<FakeHost>(world_);
    // A stage of the volume `hold_stage_of_` stops after its attach until
    // `release_` is set: the volume is busy for as long as a test wants.
    o.fault_hook = [this](std::string_view step) {
      if (step == "node.stage.after-attach" && holding_) {
        holding_ = false;
        held_.set_value();
        release_.get_future().wait();
      }
      return OkStatus();
    };
    node_ = std::make_shared<NodeService>(std::move(o));
  }
  ~NodeTrimTest() override { SetLogCaptureForTest(nullptr); }

  static std::string Staging(const std::string& volume) { return "/stage/" + volume; }

  // Stages `volume` (a filesystem, or "block") on device /dev/<volume>,
  // whose filesystem has freed `freed` bytes since its last trim.
  Status Stage(const std::string& volume, const std::string& fs = "ext4", uint64_t freed = 0) {
    testing::FakeDevice device;
    device.freed_bytes = freed;
    attacher_->SetDeviceFor(volume, world_->AddDevice("/dev/" + volume, device));
    world_->dirs.insert(Staging(volume));
    csi::v1::NodeStageVolumeRequest r;
    r.set_volume_id(volume);
    r.set_staging_target_path(Staging(volume));
    *r.mutable_volume_capability() = testing::CapabilityFor(fs);
    (*r.mutable_publish_context())[publish_context::kPortals] = "127.0.0.1:3260";
    (*r.mutable_publish_context())[publish_context::kTargetIqn] = "iqn.2026-11.io.blockcsi:" + volume;
    (*r.mutable_publish_context())[publish_context::kLun] = "1";
    (*r.mutable_publish_context())[publish_context::kSerial] = "beaf1" + volume;
    return node_->Stage(r);
  }

  void SetFreed(const std::string& volume, uint64_t bytes) {
    std::lock_guard lock(world_->mu);
    world_->devices["/dev/" + volume].freed_bytes = bytes;
  }

  static double Counter(const std::string& series) {
    std::string text = Metrics().Render();
    size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return 0;
    return std::stod(text.substr(at + series.size() + 2));
  }

  std::shared_ptr<FakeWorld> world_ = std::make_shared<FakeWorld>();
  std::shared_ptr<FakeAttacher> attacher_ = std::make_shared<FakeAttacher>(world_);
  std::shared_ptr<FakeMounter> mounter_ = std::make_shared<FakeMounter>(world_);
  std::shared_ptr<NodeService> node_;
  std::string log_lines_;
  std::atomic<bool> holding_{false};
  std::promise<void> held_, release_;
};

TEST_F(NodeTrimTest, TrimAnswersWhatTheKernelReportsForTheStagingMount) {
  ASSERT_TRUE(Stage("vol1", "ext4", 300 << 20).ok());
  auto trimmed = node_->Trim("vol1");
  ASSERT_TRUE(trimmed.ok()) << trimmed.status().ToString();
  EXPECT_EQ(*trimmed, uint64_t{300} << 20);
  EXPECT_EQ(world_->Count("fitrim /stage/vol1"), 1);
}

TEST_F(NodeTrimTest, RawBlockReadOnlyAndUnknownVolumesAreNotTrimmed) {
  ASSERT_TRUE(Stage("blk", "block", 1 << 20).ok());
  auto block = node_->Trim("blk");
  EXPECT_EQ(block.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(block.status().message().find("raw block"), std::string::npos) << block.status().ToString();
  EXPECT_EQ(node_->Trim("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(world_->Count("fitrim"), 0);
}

TEST_F(NodeTrimTest, AStagingMountGoneBehindThePluginsBackIsAFailureNotATrimOfTheFilesystemBelow) {
  ASSERT_TRUE(Stage("vol1", "ext4", 1 << 20).ok());
  ASSERT_TRUE(mounter_->Unmount(Staging("vol1")).ok());
  auto trimmed = node_->Trim("vol1");
  EXPECT_EQ(trimmed.status().code(), StatusCode::kFailedPrecondition) << trimmed.status().ToString();
  EXPECT_EQ(world_->Count("fitrim"), 0);
}

TEST_F(NodeTrimTest, ADeviceWithoutDiscardIsUnimplemented) {
  ASSERT_TRUE(Stage("vol1").ok());
  {
    std::lock_guard lock(world_->mu);
    world_->devices["/dev/vol1"].discards = false;
  }
  EXPECT_EQ(node_->Trim("vol1").status().code(), StatusCode::kUnimplemented);
}

TEST_F(NodeTrimTest, ARoundTrimsEachFilesystemVolumeOnceSkipsRawBlockAndCounts) {
  ASSERT_TRUE(Stage("vol1", "ext4", 1 << 20).ok());
  ASSERT_TRUE(Stage("vol2", "xfs", 2 << 20).ok());
  ASSERT_TRUE(Stage("vol3", "ext4").ok());
  ASSERT_TRUE(Stage("blk", "block", 4 << 20).ok());
  ASSERT_TRUE(mounter_->Unmount(Staging("vol3")).ok());
  const double trimmed_before = Counter("blockcsi_node_fstrim_total{result=\"trimmed\"}");
  const double failed_before = Counter("blockcsi_node_fstrim_total{result=\"failed\"}");
  const double bytes_before = Counter("blockcsi_node_fstrim_bytes_total");
  NodeService::TrimRound round = node_->TrimStagedVolumes();
  EXPECT_EQ(round.trimmed, 2u);
  EXPECT_EQ(round.failed, 1u);  // vol3: its staging mount is gone
  EXPECT_EQ(round.busy, 0u);
  EXPECT_EQ(round.bytes, uint64_t{3} << 20);
  EXPECT_EQ(world_->Count("fitrim"), 2);
  EXPECT_EQ(Counter("blockcsi_node_fstrim_total{result=\"trimmed\"}") - trimmed_before, 2);
  EXPECT_EQ(Counter("blockcsi_node_fstrim_total{result=\"failed\"}") - failed_before, 1);
  EXPECT_EQ(Counter("blockcsi_node_fstrim_bytes_total") - bytes_before, 3 << 20);
  EXPECT_NE(log_lines_.find("periodic trim: volume not trimmed"), std::string::npos) << log_lines_;
  EXPECT_NE(log_lines_.find("vol3"), std::string::npos) << log_lines_;
}

TEST_F(NodeTrimTest, AVolumeBeingStagedIsSkippedAtOnceAndTrimmedNextRound) {
  ASSERT_TRUE(Stage("vol1", "ext4", 1 << 20).ok());
  // vol2's stage is in flight: attached and recorded, held before its mount.
  holding_ = true;
  auto stage = std::async(std::launch::async, [&] { return Stage("vol2", "ext4", 2 << 20); });
  held_.get_future().wait();
  const double busy_before = Counter("blockcsi_node_fstrim_total{result=\"busy\"}");
  const auto start = std::chrono::steady_clock::now();
  NodeService::TrimRound round = node_->TrimStagedVolumes();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2)) << "the round waited for the stage";
  EXPECT_EQ(round.busy, 1u);
  EXPECT_EQ(round.trimmed, 1u);
  EXPECT_EQ(round.failed, 0u);
  EXPECT_EQ(world_->Count("fitrim /stage/vol2"), 0);
  EXPECT_EQ(Counter("blockcsi_node_fstrim_total{result=\"busy\"}") - busy_before, 1);
  EXPECT_NE(log_lines_.find("periodic trim: volume busy, left for the next round"), std::string::npos);
  release_.set_value();
  ASSERT_TRUE(stage.get().ok());
  round = node_->TrimStagedVolumes();
  EXPECT_EQ(round.trimmed, 2u);
  EXPECT_EQ(round.bytes, uint64_t{2} << 20);  // vol1 gave its freed bytes back in the first round
  EXPECT_EQ(world_->Count("fitrim /stage/vol2"), 1);
}

TEST_F(NodeTrimTest, TheLoopRunsRoundsEveryIntervalAndStops) {
  ASSERT_TRUE(Stage("vol1", "ext4", 1 << 20).ok());
  NodeTrimLoop loop(node_, std::chrono::milliseconds(20));
  loop.Start();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (loop.Rounds() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  loop.Stop();
  EXPECT_GE(loop.Rounds(), 2u);
  EXPECT_GE(world_->Count("fitrim /stage/vol1"), 2);
  EXPECT_NE(log_lines_.find("periodic trim: round done"), std::string::npos);
}

TEST_F(NodeTrimTest, TheFirstRoundWaitsOneInterval) {
  ASSERT_TRUE(Stage("vol1", "ext4", 1 << 20).ok());
  NodeTrimLoop loop(node_, std::chrono::hours(1));
  loop.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  loop.Stop();
  EXPECT_EQ(loop.Rounds(), 0u);
  EXPECT_EQ(world_->Count("fitrim"), 0);
}

}  // namespace
}  // namespace blockcsi
