// NodeStageVolume reads the volume's attach record once: the node's checks
// and the attacher's decision (new, resumed or reused attachment) share
// that one read. The real attacher and record store run on a temp state dir
// behind a host that counts reads of record files; the connector and the
// rest of the node are the in-memory fakes.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "attach/attach_record_store.h"
#include "attach/connector.h"
#include "attach/volume_attacher_impl.h"
#include "contract/publish_context.h"
#include "node/node_service.h"
#include "node/staged_facts.h"
#include "support/csi_capabilities.h"
#include "support/fake_attacher.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using testing::FakeHost;
using testing::FakeMounter;
using testing::FakeProbe;
using testing::FakeWorld;
using testing::FakeWorldExecutor;

constexpr char kStaging[] = "/var/lib/kubelet/plugins/kubernetes.io/csi/blockcsi.io/abc/globalmount";
constexpr char kVolume[] = "vol-reads";

// The machine's files, counting the reads of attach records.
class RecordReadCountingHost final : public RootedHost {
 public:
  RecordReadCountingHost() : RootedHost("") {}
  StatusOr<std::string> ReadFile(const std::string& path) const override {
    if (path.find("/attachments/") != std::string::npos) ++record_reads;
    return RootedHost::ReadFile(path);
  }
  mutable std::atomic<int> record_reads{0};
};

// Attaches a volume as a device of the fake world whose identity is the
// published one, as a healthy LUN would.
class WorldConnector final : public Connector {
 public:
  explicit WorldConnector(std::shared_ptr<FakeWorld> world) : world_(std::move(world)) {}
  std::string family() const override { return "world"; }
  void Prepare(const AttachSpec&, AttachRecord*) override {}
  StatusOr<ConnectResult> Connect(const AttachSpec& spec, AttachRecord*) override {
    testing::FakeDevice device;
    device.major_minor = "8:16";
    ConnectResult result;
    result.device_path = world_->AddDevice("/dev/world-" + spec.volume_id, device);
    result.size_bytes = uint64_t{1} << 30;
    result.identity.serial = spec.expected_serial;
    return result;
  }
  Status Disconnect(const AttachRecord&) override { return OkStatus(); }
  StatusOr<LunIdentity> ReadIdentity(const AttachRecord& record) override {
    LunIdentity identity;
    identity.serial = record.expected_serial;
    return identity;
  }
  StatusOr<uint64_t> Rescan(AttachRecord*) override { return uint64_t{1} << 30; }
  AttachHealth Check(const AttachRecord&) override { return {}; }
  Status Reconcile(std::vector<AttachRecord>*) override { return OkStatus(); }

 private:
  std::shared_ptr<FakeWorld> world_;
};

class NodeStageRecordReadsTest : public ::testing::Test {
 protected:
  NodeStageRecordReadsTest() {
    auto attacher =
        std::make_shared<VolumeAttacherImpl>(state_.path(), files_, std::make_unique<WorldConnector>(world_));
    EXPECT_TRUE(attacher->Start().ok());
    attacher_ = attacher;
    NodeServiceOptions o;
    o.node_id = "node-a";
    o.attacher = attacher_;
    o.mounter = std::make_shared<FakeMounter>(world_);
    o.probe = std::make_shared<FakeProbe>(world_);
    o.executor = std::make_shared<FakeWorldExecutor>(world_);
    o.host = std::make_shared<FakeHost>(world_);
    node_ = std::make_unique<NodeService>(std::move(o));
    world_->dirs.insert(kStaging);
  }

  static csi::v1::NodeStageVolumeRequest StageRequest() {
    csi::v1::NodeStageVolumeRequest r;
    r.set_volume_id(kVolume);
    r.set_staging_target_path(kStaging);
    *r.mutable_volume_capability() = testing::CapabilityFor("ext4");
    auto& context = *r.mutable_publish_context();
    context[publish_context::kPortals] = "127.0.0.1:3260";
    context[publish_context::kTargetIqn] = "iqn.2026-11.io.blockcsi:vol-reads";
    context[publish_context::kLun] = "1";
    context[publish_context::kSerial] = "beaf1reads";
    return r;
  }

  // Record reads of one NodeStageVolume.
  int ReadsOfOneStage() {
    int before = files_->record_reads.load();
    Status staged = node_->Stage(StageRequest());
    EXPECT_TRUE(staged.ok()) << staged.ToString();
    return files_->record_reads.load() - before;
  }

  testing::TempDir state_;
  std::shared_ptr<RecordReadCountingHost> files_ = std::make_shared<RecordReadCountingHost>();
  std::shared_ptr<FakeWorld> world_ = std::make_shared<FakeWorld>();
  std::shared_ptr<VolumeAttacher> attacher_;
  std::unique_ptr<NodeService> node_;
};

TEST_F(NodeStageRecordReadsTest, AFirstStageReadsTheRecordOnce) {
  EXPECT_EQ(ReadsOfOneStage(), 1);
  auto record = attacher_->Get(kVolume);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(StagedFacts::Of(*record).staging_path, kStaging) << "the facts ride in the attach's own write";
}

TEST_F(NodeStageRecordReadsTest, ARetryOfAFinishedStageReadsTheRecordOnce) {
  ASSERT_EQ(ReadsOfOneStage(), 1);
  EXPECT_EQ(ReadsOfOneStage(), 1);
}

TEST_F(NodeStageRecordReadsTest, AStageThatReusesTheAttachmentReadsTheRecordOnce) {
  ASSERT_EQ(ReadsOfOneStage(), 1);
  // The staging mount is gone (a crash after the attach, a manual umount)
  // and the record has no staged facts: the attach is reused, the mount redone.
  {
    std::lock_guard lock(world_->mu);
    world_->mounts.clear();
  }
  ASSERT_TRUE(attacher_->Annotate(kVolume, kStagedAnnotation, "").ok());
  EXPECT_EQ(ReadsOfOneStage(), 1);
  auto record = attacher_->Get(kVolume);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(StagedFacts::Of(*record).staging_path, kStaging) << "a reused attachment gets the facts too";
}

}  // namespace
}  // namespace blockcsi
