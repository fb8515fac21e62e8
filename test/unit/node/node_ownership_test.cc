// The node acts only on what its own attach records give to the volume it
// is called for: each attack of a node-level caller (an unknown volume id,
// another volume's path, a symbolic link, another volume's LUN, two calls
// on one path) against the in-memory fakes, with "nothing changed" checked
// right after each refused call. No privileges needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>

#include "contract/publish_context.h"
#include "node/node_claims.h"
#include "node/node_service.h"
#include "node/staged_facts.h"
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

constexpr char kKubelet[] = "/var/lib/kubelet";

std::string StagingOf(const std::string& volume) {
  return std::string(kKubelet) + "/plugins/csi/" + volume + "/globalmount";
}
std::string TargetOf(const std::string& volume) { return std::string(kKubelet) + "/pods/p-" + volume + "/mount"; }

// Everything a node call can change in the fake world, to compare before
// and after a refused call.
struct WorldState {
  std::vector<std::string> mounts;
  std::set<std::string> dirs, files;
  std::set<std::string> present_devices;
  std::map<std::string, std::map<std::string, std::string>> records;
  bool operator==(const WorldState&) const = default;
};

class NodeOwnershipTest : public ::testing::Test {
 protected:
  NodeOwnershipTest() {
    NodeServiceOptions o;
    o.node_id = "node-a";
    o.attacher = attacher_;
    o.mounter = mounter_;
    o.probe = std::make_shared<FakeProbe>(world_);
    o.executor = executor_;
    o.host = host_;
    node_ = std::make_unique<NodeService>(std::move(o));
  }

  static std::map<std::string, std::string> Context(const std::string& lun_of) {
    return {{publish_context::kPortals, "127.0.0.1:3260"},
            {publish_context::kTargetIqn, "iqn.2026-11.io.blockcsi:" + lun_of},
            {publish_context::kLun, "1"},
            {publish_context::kSerial, "beaf1" + lun_of}};
  }

  // Stage of `volume` at its own staging path, with the LUN of `lun_of`.
  csi::v1::NodeStageVolumeRequest StageRequest(const std::string& volume, const std::string& lun_of = "",
                                               const std::string& fs = "ext4") {
    csi::v1::NodeStageVolumeRequest r;
    r.set_volume_id(volume);
    r.set_staging_target_path(StagingOf(volume));
    *r.mutable_volume_capability() = testing::CapabilityFor(fs);
    for (const auto& [k, v] : Context(lun_of.empty() ? volume : lun_of)) (*r.mutable_publish_context())[k] = v;
    world_->dirs.insert(StagingOf(volume));
    return r;
  }
  csi::v1::NodePublishVolumeRequest PublishRequest(const std::string& volume, const std::string& target = "",
                                                   const std::string& fs = "ext4") {
    csi::v1::NodePublishVolumeRequest r;
    r.set_volume_id(volume);
    r.set_staging_target_path(StagingOf(volume));
    r.set_target_path(target.empty() ? TargetOf(volume) : target);
    *r.mutable_volume_capability() = testing::CapabilityFor(fs);
    return r;
  }
  static csi::v1::NodeUnpublishVolumeRequest UnpublishRequest(const std::string& volume, const std::string& target) {
    csi::v1::NodeUnpublishVolumeRequest r;
    r.set_volume_id(volume);
    r.set_target_path(target);
    return r;
  }
  static csi::v1::NodeUnstageVolumeRequest UnstageRequest(const std::string& volume, const std::string& staging) {
    csi::v1::NodeUnstageVolumeRequest r;
    r.set_volume_id(volume);
    r.set_staging_target_path(staging);
    return r;
  }

  // Stages and publishes `volume` at its own paths.
  void StageAndPublish(const std::string& volume, const std::string& fs = "ext4") {
    Status st = node_->Stage(StageRequest(volume, "", fs));
    ASSERT_TRUE(st.ok()) << st.ToString();
    st = node_->Publish(PublishRequest(volume, "", fs));
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  WorldState State() {
    WorldState s;
    auto records = attacher_->List();
    for (const auto& r : *records) s.records[r.volume_id] = r.annotations;
    std::lock_guard lock(world_->mu);
    for (const auto& m : world_->mounts) s.mounts.push_back(m.target + " " + m.major_minor + " " + m.root);
    s.dirs = world_->dirs;
    s.files = world_->files;
    for (const auto& [path, d] : world_->devices) {
      if (d.present) s.present_devices.insert(path);
    }
    return s;
  }

  void AddForeignMount(const std::string& target, const std::string& fs_type, const std::string& root = "/") {
    std::lock_guard lock(world_->mu);
    world_->dirs.insert(target);
    MountEntry e;
    e.mount_id = world_->next_mount_id++;
    e.major_minor = "0:77";
    e.root = root;
    e.target = target;
    e.fs_type = fs_type;
    e.source = fs_type;
    e.options = "rw,relatime";
    world_->mounts.push_back(e);
  }

  std::shared_ptr<FakeWorld> world_ = std::make_shared<FakeWorld>();
  std::shared_ptr<FakeAttacher> attacher_ = std::make_shared<FakeAttacher>(world_);
  std::shared_ptr<FakeMounter> mounter_ = std::make_shared<FakeMounter>(world_);
  std::shared_ptr<FakeWorldExecutor> executor_ = std::make_shared<FakeWorldExecutor>(world_);
  std::shared_ptr<FakeHost> host_ = std::make_shared<FakeHost>(world_);
  std::unique_ptr<NodeService> node_;
};

// The code asked for, with a message naming every volume in `names`.
::testing::AssertionResult Refused(const Status& st, StatusCode code, std::vector<std::string> names) {
  if (st.code() != code)
    return ::testing::AssertionFailure() << "want " << static_cast<int>(code) << ", got " << st.ToString();
  for (const auto& n : names) {
    if (st.message().find(n) == std::string::npos)
      return ::testing::AssertionFailure() << "does not name " << n << ": " << st.ToString();
  }
  return ::testing::AssertionSuccess();
}

// ---- Unknown volume ids touch nothing.

TEST_F(NodeOwnershipTest, UnpublishOfAnUnknownVolumeLeavesARegularFileAtTheTarget) {
  const std::string file = std::string(kKubelet) + "/config.yaml";
  world_->files.insert(file);
  WorldState before = State();
  EXPECT_TRUE(node_->Unpublish(UnpublishRequest("ghost", file)).ok());
  EXPECT_EQ(State(), before) << "the file was removed";
  EXPECT_EQ(world_->Count("remove"), 0);
}

TEST_F(NodeOwnershipTest, UnpublishOfAnUnknownVolumeLeavesAForeignTmpfsAndItsDirectory) {
  const std::string tmpfs = "/run/secrets/kubernetes.io";
  AddForeignMount(tmpfs, "tmpfs");
  WorldState before = State();
  EXPECT_TRUE(node_->Unpublish(UnpublishRequest("ghost", tmpfs)).ok());
  EXPECT_EQ(State(), before);
  EXPECT_EQ(world_->Count("umount"), 0);
}

TEST_F(NodeOwnershipTest, UnstageOfAnUnknownVolumeLeavesAForeignBindMount) {
  const std::string bind = "/var/lib/containers/storage/overlay";
  AddForeignMount(bind, "ext4", "/containers");
  WorldState before = State();
  EXPECT_TRUE(node_->Unstage(UnstageRequest("ghost", bind)).ok());
  EXPECT_EQ(State(), before);
  EXPECT_EQ(world_->Count("umount"), 0);
}

TEST_F(NodeOwnershipTest, UnstageOfAnUnknownVolumeLeavesAPublishedVolumesStaging) {
  StageAndPublish("vol-e");
  WorldState before = State();
  EXPECT_TRUE(node_->Unstage(UnstageRequest("ghost", StagingOf("vol-e"))).ok());
  EXPECT_EQ(State(), before) << "volume vol-e's staging mount was touched";
  EXPECT_EQ(world_->Count("umount"), 0);
  EXPECT_EQ(world_->Count("detach"), 0);
}

// ---- Another volume's paths are refused, naming both volumes.

TEST_F(NodeOwnershipTest, UnpublishOfOneVolumeAtAnothersTargetIsRefused) {
  StageAndPublish("vol-e");
  StageAndPublish("vol-f");
  WorldState before = State();
  EXPECT_TRUE(Refused(node_->Unpublish(UnpublishRequest("vol-e", TargetOf("vol-f"))), StatusCode::kFailedPrecondition,
                      {"vol-e", "vol-f"}));
  EXPECT_EQ(State(), before) << "volume vol-f's publish was touched";
}

TEST_F(NodeOwnershipTest, UnstageOfOneVolumeAtAnothersStagingIsRefused) {
  StageAndPublish("vol-e");
  ASSERT_TRUE(node_->Stage(StageRequest("vol-f")).ok());
  WorldState before = State();
  EXPECT_TRUE(Refused(node_->Unstage(UnstageRequest("vol-f", StagingOf("vol-e"))), StatusCode::kFailedPrecondition,
                      {"vol-e", "vol-f"}));
  EXPECT_EQ(State(), before);
}

TEST_F(NodeOwnershipTest, StageOrPublishAtOrInsideAnotherVolumesPathIsRefused) {
  StageAndPublish("vol-e");
  ASSERT_TRUE(node_->Stage(StageRequest("vol-f")).ok());
  WorldState before = State();
  EXPECT_TRUE(Refused(node_->Publish(PublishRequest("vol-f", TargetOf("vol-e"))), StatusCode::kFailedPrecondition,
                      {"vol-e", "vol-f"}));
  EXPECT_TRUE(Refused(node_->Publish(PublishRequest("vol-f", StagingOf("vol-e") + "/sub")),
                      StatusCode::kFailedPrecondition, {"vol-e", "vol-f"}));
  EXPECT_TRUE(Refused(node_->Publish(PublishRequest("vol-f", std::string(kKubelet) + "/plugins")),
                      StatusCode::kFailedPrecondition, {"vol-e", "vol-f"}))
      << "a bind above vol-e's staging path would hide it";
  EXPECT_EQ(State(), before);
  auto stage_g = StageRequest("vol-g");
  stage_g.set_staging_target_path(TargetOf("vol-e"));
  before = State();
  EXPECT_TRUE(Refused(node_->Stage(stage_g), StatusCode::kFailedPrecondition, {"vol-e", "vol-g"}));
  EXPECT_EQ(State(), before);
  EXPECT_EQ(world_->Count("attach vol-g"), 0);
}

// ---- What the node does at its own paths.

TEST_F(NodeOwnershipTest, PublishRecordsItsTargetAndUnpublishForgetsIt) {
  StageAndPublish("vol-e");
  auto record = attacher_->Get("vol-e");
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(PublishedTargets(*record), std::vector<std::string>{TargetOf("vol-e")});
  ASSERT_TRUE(node_->Unpublish(UnpublishRequest("vol-e", TargetOf("vol-e"))).ok());
  EXPECT_TRUE(PublishedTargets(*attacher_->Get("vol-e")).empty());
  EXPECT_EQ(FindMountAt(*mounter_->List(), TargetOf("vol-e")), nullptr);
  // Again: nothing recorded, nothing mounted there: OK, nothing touched.
  EXPECT_TRUE(node_->Unpublish(UnpublishRequest("vol-e", TargetOf("vol-e"))).ok());
}

TEST_F(NodeOwnershipTest, UnpublishAtAPathItsRecordDoesNotNameLeavesAForeignMount) {
  StageAndPublish("vol-e");
  const std::string other = std::string(kKubelet) + "/pods/p-x/volumes/secret";
  AddForeignMount(other, "tmpfs");
  WorldState before = State();
  EXPECT_TRUE(node_->Unpublish(UnpublishRequest("vol-e", other)).ok());
  EXPECT_EQ(State(), before);
}

// A publish by a plugin from before publish targets were recorded: the
// mount at the target is of the volume's device, so unpublish undoes it.
TEST_F(NodeOwnershipTest, UnpublishUndoesAnUnrecordedBindOfTheVolumesOwnFilesystem) {
  StageAndPublish("vol-e");
  ASSERT_TRUE(attacher_->Annotate("vol-e", PublishedAnnotation(TargetOf("vol-e")), "").ok());
  ASSERT_TRUE(node_->Unpublish(UnpublishRequest("vol-e", TargetOf("vol-e"))).ok());
  EXPECT_EQ(FindMountAt(*mounter_->List(), TargetOf("vol-e")), nullptr);
  EXPECT_TRUE(node_->Unstage(UnstageRequest("vol-e", StagingOf("vol-e"))).ok());
}

// ---- Symbolic links.

TEST_F(NodeOwnershipTest, PublishAtASymlinkedTargetIsRefused) {
  ASSERT_TRUE(node_->Stage(StageRequest("vol-e")).ok());
  for (const std::string& link : {TargetOf("vol-e"), std::string(kKubelet) + "/pods/p-vol-e"}) {
    world_->symlinks = {{link, "/etc/cron.d"}};
    WorldState before = State();
    EXPECT_TRUE(
        Refused(node_->Publish(PublishRequest("vol-e")), StatusCode::kFailedPrecondition, {"vol-e", "/etc/cron.d"}))
        << link;
    EXPECT_EQ(State(), before) << link;
    EXPECT_EQ(world_->Count("bind"), 0) << link;
  }
}

TEST_F(NodeOwnershipTest, StageAtASymlinkedStagingPathIsRefusedBeforeAttaching) {
  world_->symlinks = {{StagingOf("vol-e"), "/var/lib/etcd"}};
  auto req = StageRequest("vol-e");
  WorldState before = State();
  EXPECT_TRUE(Refused(node_->Stage(req), StatusCode::kFailedPrecondition, {"vol-e"}));
  EXPECT_EQ(State(), before);
  EXPECT_EQ(world_->Count("attach"), 0);
}

TEST_F(NodeOwnershipTest, UnpublishThroughALinkPlacedAfterThePublishIsRefused) {
  StageAndPublish("vol-e");
  world_->symlinks = {{std::string(kKubelet) + "/pods", "/srv/pods"}};
  WorldState before = State();
  EXPECT_TRUE(Refused(node_->Unpublish(UnpublishRequest("vol-e", TargetOf("vol-e"))), StatusCode::kFailedPrecondition,
                      {"vol-e"}));
  EXPECT_EQ(State(), before);
}

// ---- One LUN, one volume id.

TEST_F(NodeOwnershipTest, StageOfAnotherVolumeIdWithAStagedVolumesLunIsRefused) {
  StageAndPublish("vol-e");
  for (bool is_static : {false, true}) {
    auto req = StageRequest("vol-g", /*lun_of=*/"vol-e");
    if (is_static) (*req.mutable_publish_context())[publish_context::kStatic] = "true";
    WorldState before = State();
    EXPECT_TRUE(Refused(node_->Stage(req), StatusCode::kFailedPrecondition, {"vol-e", "vol-g"})) << is_static;
    EXPECT_EQ(State(), before) << is_static;
    EXPECT_EQ(world_->Count("attach vol-g"), 0) << is_static;
  }
  // The same WWN under another IQN names the same LUN.
  ASSERT_TRUE(node_->Unpublish(UnpublishRequest("vol-e", TargetOf("vol-e"))).ok());
  ASSERT_TRUE(node_->Unstage(UnstageRequest("vol-e", StagingOf("vol-e"))).ok());
  auto with_wwn = StageRequest("vol-w");
  (*with_wwn.mutable_publish_context())[publish_context::kWwn] = "5001405aabbccdd0";
  ASSERT_TRUE(node_->Stage(with_wwn).ok());
  auto same_wwn = StageRequest("vol-h");
  (*same_wwn.mutable_publish_context())[publish_context::kWwn] = "5001405aabbccdd0";
  EXPECT_TRUE(Refused(node_->Stage(same_wwn), StatusCode::kFailedPrecondition, {"vol-w", "vol-h"}));
  // Once the volume is unstaged, its LUN may be staged under a new id.
  ASSERT_TRUE(node_->Unstage(UnstageRequest("vol-w", StagingOf("vol-w"))).ok());
  EXPECT_TRUE(node_->Stage(same_wwn).ok());
}

// ---- One call per path and per LUN at a time.

TEST_F(NodeOwnershipTest, CallsOnAPathOrALunInFlightUnderAnotherVolumeIdAreAborted) {
  std::mutex mu;
  std::condition_variable cv;
  bool in_mkfs = false, release = false;
  executor_->BeforeRun([&](const std::vector<std::string>& argv) {
    // Only vol-e's mkfs waits: a call that got through would run its own.
    if (argv[0].rfind("mkfs", 0) != 0 || std::find(argv.begin(), argv.end(), "/dev/fake-e") == argv.end()) return;
    std::unique_lock lock(mu);
    in_mkfs = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  attacher_->SetDeviceFor("vol-e", world_->AddDevice("/dev/fake-e", {}));
  auto first = std::async(std::launch::async, [&] { return node_->Stage(StageRequest("vol-e")); });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return in_mkfs; });
  }
  auto same_path = StageRequest("vol-g");
  same_path.set_staging_target_path(StagingOf("vol-e"));
  EXPECT_TRUE(Refused(node_->Stage(same_path), StatusCode::kAborted, {"vol-g", StagingOf("vol-e")}));
  EXPECT_TRUE(Refused(node_->Stage(StageRequest("vol-h", "vol-e")), StatusCode::kAborted, {"vol-h"}));
  EXPECT_TRUE(Refused(node_->Unstage(UnstageRequest("ghost", StagingOf("vol-e"))), StatusCode::kAborted, {"ghost"}));
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(first.get().ok());
  EXPECT_EQ(world_->Count("attach vol-g"), 0);
  EXPECT_EQ(world_->Count("attach vol-h"), 0);
}

}  // namespace
}  // namespace blockcsi
