// NodeService against in-memory fakes: argument validation and codes, the
// never-reformat rule, idempotency of every RPC, the ordering of unmount
// before detach, expansion through the seams (including ext4 without
// CAP_SYS_RESOURCE) and stats/condition. No privileges needed.
#include "node/node_service.h"

#include "node/fence_monitor.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "common/topology.h"
#include "contract/publish_context.h"
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
using AccessMode = csi::v1::VolumeCapability::AccessMode;

constexpr char kStaging[] = "/var/lib/kubelet/plugins/kubernetes.io/csi/blockcsi.io/abc/globalmount";
constexpr char kTarget[] = "/var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pv1/mount";

class NodeServiceTest : public ::testing::Test {
 protected:
  NodeServiceTest() {
    SetLogCaptureForTest(&log_lines_);
    NodeServiceOptions o;
    o.node_id = "node-a";
    o.max_volumes_per_node = 16;
    o.attacher = attacher_;
    o.mounter = mounter_;
    o.probe = std::make_shared<FakeProbe>(world_);
    o.executor = executor_;
    o.host = host_;
    o.fault_hook = [this](std::string_view step) {
      std::lock_guard lock(steps_mu_);
      steps_.emplace_back(step);
      return OkStatus();
    };
    node_ = std::make_unique<NodeService>(std::move(o));
    world_->dirs.insert(kStaging);
  }
  ~NodeServiceTest() override { SetLogCaptureForTest(nullptr); }

  static std::map<std::string, std::string> Context(const std::string& volume) {
    return {{publish_context::kPortals, "127.0.0.1:3260"},
            {publish_context::kTargetIqn, "iqn.2026-11.io.blockcsi:" + volume},
            {publish_context::kLun, "1"},
            {publish_context::kSerial, "beaf1" + volume}};
  }

  static csi::v1::NodeStageVolumeRequest StageRequest(const std::string& volume, const std::string& fs = "ext4") {
    csi::v1::NodeStageVolumeRequest r;
    r.set_volume_id(volume);
    r.set_staging_target_path(kStaging);
    *r.mutable_volume_capability() = testing::CapabilityFor(fs);
    for (const auto& [k, v] : Context(volume)) (*r.mutable_publish_context())[k] = v;
    return r;
  }

  static csi::v1::NodePublishVolumeRequest PublishRequest(const std::string& volume, bool block = false,
                                                          bool readonly = false) {
    csi::v1::NodePublishVolumeRequest r;
    r.set_volume_id(volume);
    r.set_staging_target_path(kStaging);
    r.set_target_path(kTarget);
    r.set_readonly(readonly);
    *r.mutable_volume_capability() = block ? testing::BlockCapability() : testing::MountCapability("ext4");
    return r;
  }

  static csi::v1::NodeUnstageVolumeRequest UnstageRequest(const std::string& volume) {
    csi::v1::NodeUnstageVolumeRequest r;
    r.set_volume_id(volume);
    r.set_staging_target_path(kStaging);
    return r;
  }

  static csi::v1::NodeUnpublishVolumeRequest UnpublishRequest(const std::string& volume) {
    csi::v1::NodeUnpublishVolumeRequest r;
    r.set_volume_id(volume);
    r.set_target_path(kTarget);
    return r;
  }

  std::string Device(const std::string& volume, const std::string& path) {
    world_->AddDevice(path, {});
    attacher_->SetDeviceFor(volume, path);
    return path;
  }

  std::vector<std::string> Commands() {
    std::vector<std::string> out;
    for (const auto& argv : executor_->Commands()) {
      std::string line;
      for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
      out.push_back(line);
    }
    return out;
  }

  std::shared_ptr<FakeWorld> world_ = std::make_shared<FakeWorld>();
  std::shared_ptr<FakeAttacher> attacher_ = std::make_shared<FakeAttacher>(world_);
  std::shared_ptr<FakeMounter> mounter_ = std::make_shared<FakeMounter>(world_);
  std::shared_ptr<FakeWorldExecutor> executor_ = std::make_shared<FakeWorldExecutor>(world_);
  std::shared_ptr<FakeHost> host_ = std::make_shared<FakeHost>(world_);
  std::unique_ptr<NodeService> node_;
  std::string log_lines_;
  std::mutex steps_mu_;
  std::vector<std::string> steps_;
};

#define EXPECT_CODE(expr, code_value)                                            \
  do {                                                                           \
    ::blockcsi::Status _st = (expr);                                             \
    EXPECT_EQ(_st.code(), ::blockcsi::StatusCode::code_value) << _st.ToString(); \
  } while (0)

// ---- Info and capabilities

TEST_F(NodeServiceTest, GetInfoReportsNodeIdLimitAndTopology) {
  csi::v1::NodeGetInfoResponse info;
  ASSERT_TRUE(node_->NodeGetInfo(nullptr, nullptr, &info).ok());
  EXPECT_EQ(info.node_id(), "node-a");
  EXPECT_EQ(info.max_volumes_per_node(), 16);
  EXPECT_EQ(info.accessible_topology().segments().at(kTopologyNodeKey), "node-a");
  // No --zone: no zone key, so only storage hosts without a zone match it.
  EXPECT_EQ(info.accessible_topology().segments().count(kTopologyZoneKey), 0u);
}

TEST_F(NodeServiceTest, GetInfoAddsTheZoneToTheNodesSegment) {
  NodeServiceOptions o;
  o.node_id = "node-z";
  o.zone = "zone-b";
  o.attacher = attacher_;
  o.mounter = mounter_;
  o.probe = std::make_shared<FakeProbe>(world_);
  o.executor = executor_;
  o.host = host_;
  NodeService zoned(std::move(o));
  csi::v1::NodeGetInfoResponse info;
  ASSERT_TRUE(zoned.NodeGetInfo(nullptr, nullptr, &info).ok());
  const auto& segments = info.accessible_topology().segments();
  EXPECT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments.at(kTopologyNodeKey), "node-z");
  EXPECT_EQ(segments.at(kTopologyZoneKey), "zone-b");
}

TEST_F(NodeServiceTest, CapabilitiesListTheFiveRpcs) {
  csi::v1::NodeGetCapabilitiesResponse caps;
  ASSERT_TRUE(node_->NodeGetCapabilities(nullptr, nullptr, &caps).ok());
  std::set<int> types;
  for (const auto& c : caps.capabilities()) types.insert(c.rpc().type());
  using Rpc = csi::v1::NodeServiceCapability::RPC;
  EXPECT_EQ(types, (std::set<int>{Rpc::STAGE_UNSTAGE_VOLUME, Rpc::GET_VOLUME_STATS, Rpc::EXPAND_VOLUME,
                                  Rpc::VOLUME_CONDITION, Rpc::SINGLE_NODE_MULTI_WRITER}));
}

// ---- Stage validation: INVALID_ARGUMENT naming the volume, nothing attached.

TEST_F(NodeServiceTest, StageRejectsBadArgumentsBeforeAttaching) {
  struct Case {
    std::string name;
    std::function<void(csi::v1::NodeStageVolumeRequest&)> mutate;
    std::string message_part;
  };
  std::vector<Case> cases = {
      {"relative path", [](auto& r) { r.set_staging_target_path("var/lib/x"); }, "absolute"},
      {"dot-dot", [](auto& r) { r.set_staging_target_path("/var/lib/../etc"); }, "\"..\""},
      {"empty path", [](auto& r) { r.clear_staging_target_path(); }, "staging_target_path is required"},
      {"no capability", [](auto& r) { r.clear_volume_capability(); }, "volume_capability"},
      {"no access type", [](auto& r) { r.mutable_volume_capability()->clear_mount(); }, "access type"},
      {"fs type", [](auto& r) { r.mutable_volume_capability()->mutable_mount()->set_fs_type("ntfs"); }, "ntfs"},
      {"mount flag suid", [](auto& r) { r.mutable_volume_capability()->mutable_mount()->add_mount_flags("suid"); },
       "suid"},
      {"mount flag bind in a list",
       [](auto& r) { r.mutable_volume_capability()->mutable_mount()->add_mount_flags("noatime,bind"); }, "bind"},
      {"mkfs force", [](auto& r) { (*r.mutable_volume_context())[volume_context::kMkfsOptions] = "-F"; }, "-F"},
      {"mkfs path value", [](auto& r) { (*r.mutable_volume_context())[volume_context::kMkfsOptions] = "-L ../../etc"; },
       "../../etc"},
      {"publish context incomplete", [](auto& r) { r.mutable_publish_context()->erase(publish_context::kTargetIqn); },
       "targetIqn"},
      {"multi-node writer on a filesystem",
       [](auto& r) {
         r.mutable_volume_capability()->mutable_access_mode()->set_mode(AccessMode::MULTI_NODE_MULTI_WRITER);
       },
       "MULTI_NODE_MULTI_WRITER"},
  };
  for (const auto& c : cases) {
    auto req = StageRequest("vol1");
    c.mutate(req);
    Status st = node_->Stage(req);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.name << ": " << st.ToString();
    EXPECT_NE(st.message().find("vol1"), std::string::npos) << c.name << ": " << st.message();
    EXPECT_NE(st.message().find(c.message_part), std::string::npos) << c.name << ": " << st.message();
  }
  auto req = StageRequest("");
  EXPECT_CODE(node_->Stage(req), kInvalidArgument);
  EXPECT_EQ(world_->Count("attach"), 0);
}

TEST_F(NodeServiceTest, StageGrpcCodeIsInvalidArgument) {
  auto req = StageRequest("vol1");
  req.set_staging_target_path("relative");
  csi::v1::NodeStageVolumeResponse resp;
  grpc::Status st = node_->NodeStageVolume(nullptr, &req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// ---- Stage: format only a blank device.

TEST_F(NodeServiceTest, StageFormatsBlankDeviceWithFastOptionsAndMounts) {
  std::string dev = Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  EXPECT_EQ(Commands(),
            std::vector<std::string>{"mkfs.ext4 -q -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 /dev/fake1"});
  EXPECT_EQ(world_->Count("mount /dev/fake1 " + std::string(kStaging) + " ext4"), 1);
  auto rec = attacher_->Get("vol1");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->annotations.at(kStagedAnnotation), "mount,ext4," + std::string(kStaging));
  StagedFacts facts = StagedFacts::Of(*rec);
  EXPECT_EQ(facts.staging_path, kStaging);
  EXPECT_EQ(facts.fs_type, "ext4");
  EXPECT_FALSE(facts.block());
  EXPECT_EQ(steps_,
            (std::vector<std::string>{"node.stage.after-attach", "node.stage.after-mkfs", "node.stage.after-mount"}));
}

TEST_F(NodeServiceTest, StageXfsUsesDashKAndValidatedMkfsOptions) {
  Device("vol1", "/dev/fake1");
  auto req = StageRequest("vol1", "xfs");
  (*req.mutable_volume_context())[volume_context::kMkfsOptions] = "-m reflink=0 -L data";
  req.mutable_volume_capability()->mutable_mount()->add_mount_flags("noatime");
  ASSERT_TRUE(node_->Stage(req).ok());
  EXPECT_EQ(Commands(), std::vector<std::string>{"mkfs.xfs -q -K -m reflink=0 -L data /dev/fake1"});
  EXPECT_EQ(world_->Count("mount /dev/fake1 " + std::string(kStaging) + " xfs noatime"), 1);
}

TEST_F(NodeServiceTest, StageMergesExt4ExtendedOptions) {
  Device("vol1", "/dev/fake1");
  auto req = StageRequest("vol1");
  (*req.mutable_volume_context())[volume_context::kMkfsOptions] = "-E stride=16 -m 0";
  ASSERT_TRUE(node_->Stage(req).ok());
  EXPECT_EQ(Commands().at(0),
            "mkfs.ext4 -q -E nodiscard,lazy_itable_init=1,lazy_journal_init=1,stride=16 -m 0 /dev/fake1");
}

TEST_F(NodeServiceTest, StageMountsExistingFilesystemWithoutFormatting) {
  std::string dev = Device("vol1", "/dev/fake1");
  world_->SetSignature(dev, "ext4", "filesystem");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  EXPECT_EQ(Commands(), std::vector<std::string>{"dumpe2fs -h /dev/fake1"});
  EXPECT_EQ(world_->Count("mount /dev/fake1"), 1);
}

TEST_F(NodeServiceTest, StageRefusesForeignSignaturesAndNeverFormats) {
  struct Case {
    std::string type, usage;
  };
  for (const auto& c : std::vector<Case>{{"xfs", "filesystem"},
                                         {"dos", "partition_table"},
                                         {"gpt", "partition_table"},
                                         {"LVM2_member", "raid"},
                                         {"linux_raid_member", "raid"},
                                         {"crypto_LUKS", "crypto"}}) {
    std::string volume = "vol" + std::to_string(world_->devices.size());
    std::string dev = Device(volume, "/dev/fake-" + c.type);
    world_->SetSignature(dev, c.type, c.usage);
    Status st = node_->Stage(StageRequest(volume));
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << c.type << ": " << st.ToString();
    EXPECT_NE(st.message().find(c.type), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(volume), std::string::npos) << st.message();
  }
  EXPECT_TRUE(Commands().empty());
  EXPECT_EQ(world_->Count("mount"), 0);
}

TEST_F(NodeServiceTest, StageRefusesExpectedFilesystemMixedWithAnotherSignature) {
  std::string dev = Device("vol1", "/dev/fake1");
  world_->SetSignature(dev, "ext4", "filesystem");
  world_->SetSignature(dev, "dos", "partition_table");
  EXPECT_CODE(node_->Stage(StageRequest("vol1")), kFailedPrecondition);
  EXPECT_EQ(world_->Count("mount"), 0);
}

TEST_F(NodeServiceTest, StageRefusesToFormatBlankReadOnlyAttachment) {
  Device("vol1", "/dev/fake1");
  auto req = StageRequest("vol1");
  (*req.mutable_publish_context())[publish_context::kReadOnly] = "true";
  EXPECT_CODE(node_->Stage(req), kFailedPrecondition);
  EXPECT_TRUE(Commands().empty());
}

TEST_F(NodeServiceTest, StageRunsE2fsckWhenJournalNeedsRecovery) {
  std::string dev = Device("vol1", "/dev/fake1");
  world_->SetSignature(dev, "ext4", "filesystem");
  executor_->Script("dumpe2fs", 0,
                    "Filesystem state:         clean\nFilesystem features:      has_journal needs_recovery extent\n");
  // What e2fsck -p says after replaying a journal: 1, errors corrected.
  executor_->Script("e2fsck", 1,
                    "/dev/fake1: recovering journal\n/dev/fake1: clean, 11/65536 files, 12955/262144 blocks\n");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  EXPECT_EQ(Commands(), (std::vector<std::string>{"dumpe2fs -h /dev/fake1", "e2fsck -p /dev/fake1"}));
}

TEST_F(NodeServiceTest, StageStopsWhenE2fsckCannotRepair) {
  std::string dev = Device("vol1", "/dev/fake1");
  world_->SetSignature(dev, "ext4", "filesystem");
  executor_->Script("dumpe2fs", 0, "Filesystem state:         not clean with errors\n");
  executor_->Script("e2fsck", 4, "", "UNEXPECTED INCONSISTENCY; RUN fsck MANUALLY.");
  Status st = node_->Stage(StageRequest("vol1"));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("e2fsck"), std::string::npos);
  EXPECT_EQ(world_->Count("mount"), 0);
}

// ---- Whole rollback (issue #15): kubelet never unstages after a final
// failure, so the stage undoes its own attach; an uncertain one keeps it.

TEST_F(NodeServiceTest, StageFinalFailureAfterAttachDetachesAndSaysWhyInOneLine) {
  Device("vol1", "/dev/fake1");
  executor_->Script("mkfs.ext4", 1, "",
                    "mke2fs 1.47.0 (5-Feb-2023)\nmkfs.ext4: inode_size (256) * inodes_count (100000000) too big for a\n"
                    "\tfilesystem with 65536 blocks\nUsage: mkfs.ext4 [-c|-l filename]\n\t[-b block-size]\n");
  Status st = node_->Stage(StageRequest("vol1"));
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.ToString();
  EXPECT_NE(st.message().find("vol1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("too big for a filesystem with 65536 blocks"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("Usage"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  EXPECT_EQ(attacher_->Get("vol1").status().code(), StatusCode::kNotFound) << "the attachment was kept";
  EXPECT_EQ(world_->Count("detach vol1"), 1);
}

TEST_F(NodeServiceTest, StageUncertainFailureAfterAttachKeepsTheAttachmentForUnstage) {
  Device("vol1", "/dev/fake1");
  mounter_->FailNext(kStaging, Unavailable("mount timed out"));
  EXPECT_CODE(node_->Stage(StageRequest("vol1")), kUnavailable);
  EXPECT_TRUE(attacher_->Get("vol1").ok()) << "an uncertain failure must leave the attachment to a retry";
  EXPECT_EQ(world_->Count("detach vol1"), 0);
  ASSERT_TRUE(node_->Unstage(UnstageRequest("vol1")).ok());
  EXPECT_EQ(attacher_->Get("vol1").status().code(), StatusCode::kNotFound);
}

TEST_F(NodeServiceTest, StageFinalFailureKeepsAnAttachmentThatIsInUse) {
  // Staged and published as raw block, the staging record lost its path
  // (an old plugin): a failing restage must not pull the device from the pod.
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1", "block")).ok());
  world_->files.insert(kTarget);
  ASSERT_TRUE(node_->Publish(PublishRequest("vol1", /*block=*/true)).ok());
  ASSERT_TRUE(attacher_->Annotate("vol1", kStagedAnnotation, "").ok());
  executor_->Script("mkfs.ext4", 1, "", "mkfs.ext4: no\n");
  Status st = node_->Stage(StageRequest("vol1"));
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(attacher_->Get("vol1").ok()) << st.ToString();
  EXPECT_EQ(world_->Count("detach vol1"), 0);
}

TEST(StagedFactsTest, PathWithCommasSurvivesTheRoundTrip) {
  AttachRecord r;
  StagedFacts facts{.access_type = "mount", .fs_type = "xfs", .staging_path = "/a,b/c"};
  r.annotations[kStagedAnnotation] = facts.Encode();
  StagedFacts back = StagedFacts::Of(r);
  EXPECT_EQ(back.staging_path, "/a,b/c");
  EXPECT_EQ(back.fs_type, "xfs");
  r.annotations[kStagedAnnotation] = "garbage";
  EXPECT_EQ(StagedFacts::Of(r).staging_path, "");
}

TEST_F(NodeServiceTest, StageTwiceFormatsAndMountsOnce) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  EXPECT_EQ(world_->Count("exec mkfs"), 1);
  EXPECT_EQ(world_->Count("mount "), 1);
  EXPECT_EQ(world_->Count("attach"), 1);
}

// Not a crash: a mount failure after mkfs leaves the device formatted and
// unmounted. The real kill -9 between mkfs and mount is the fault matrix's
// node.stage.after-mkfs case (test/fault).
TEST_F(NodeServiceTest, StageRetryAfterAMountFailureFollowingMkfsDoesNotReformat) {
  Device("vol1", "/dev/fake1");
  mounter_->FailNext(kStaging, Internal("mount failed after mkfs"));
  EXPECT_FALSE(node_->Stage(StageRequest("vol1")).ok());
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  EXPECT_EQ(world_->Count("exec mkfs"), 1);
}

TEST_F(NodeServiceTest, StageWithSomethingElseMountedAtStagingPathFails) {
  world_->AddDevice("/dev/other", {});
  ASSERT_TRUE(mounter_->Mount("/dev/other", kStaging, "ext4", "").ok());
  Device("vol1", "/dev/fake1");
  Status st = node_->Stage(StageRequest("vol1"));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("/dev/other"), std::string::npos);
  EXPECT_EQ(world_->Count("exec"), 0);
}

TEST_F(NodeServiceTest, StageSameVolumeWithOtherFsTypeIsAlreadyExists) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1", "ext4")).ok());
  EXPECT_CODE(node_->Stage(StageRequest("vol1", "xfs")), kAlreadyExists);
}

TEST_F(NodeServiceTest, ConcurrentStageOfOneVolumeIsAborted) {
  Device("vol1", "/dev/fake1");
  std::mutex mu;
  std::condition_variable cv;
  bool in_mkfs = false, release = false;
  executor_->BeforeRun([&](const std::vector<std::string>& argv) {
    if (argv[0].rfind("mkfs", 0) != 0) return;
    std::unique_lock lock(mu);
    in_mkfs = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  auto first = std::async(std::launch::async, [&] { return node_->Stage(StageRequest("vol1")); });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return in_mkfs; });
  }
  Status second = node_->Stage(StageRequest("vol1"));
  EXPECT_EQ(second.code(), StatusCode::kAborted) << second.ToString();
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(first.get().ok());
  EXPECT_EQ(world_->Count("exec mkfs"), 1);
}

TEST_F(NodeServiceTest, StageAttachFailureIsReturnedWithItsCode) {
  attacher_->FailAttachWith(Unavailable("portal 127.0.0.1:3260 unreachable"));
  EXPECT_CODE(node_->Stage(StageRequest("vol1")), kUnavailable);
  EXPECT_TRUE(Commands().empty());
}

TEST_F(NodeServiceTest, StageRawBlockRecordsAndNeverProbesOrFormats) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1", "block")).ok());
  EXPECT_EQ(world_->Count("probe"), 0);
  EXPECT_TRUE(Commands().empty());
  EXPECT_EQ(world_->Count("mount"), 0);
  EXPECT_EQ(attacher_->Get("vol1")->annotations.at(kStagedAnnotation), "block,," + std::string(kStaging));
}

// ---- Publish / unpublish

TEST_F(NodeServiceTest, PublishBeforeStageIsFailedPrecondition) {
  Status st = node_->Publish(PublishRequest("vol1"));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("vol1"), std::string::npos);
}

TEST_F(NodeServiceTest, PublishValidatesPaths) {
  auto req = PublishRequest("vol1");
  req.set_target_path("/pods/../../etc");
  EXPECT_CODE(node_->Publish(req), kInvalidArgument);
  req = PublishRequest("vol1");
  req.set_staging_target_path("stage");
  EXPECT_CODE(node_->Publish(req), kInvalidArgument);
  req = PublishRequest("vol1");
  req.clear_target_path();
  EXPECT_CODE(node_->Publish(req), kInvalidArgument);
  req = PublishRequest("vol1");
  req.clear_volume_capability();
  EXPECT_CODE(node_->Publish(req), kInvalidArgument);
  // The CSI spec names FAILED_PRECONDITION for a missing staging path.
  req = PublishRequest("vol1");
  req.clear_staging_target_path();
  EXPECT_CODE(node_->Publish(req), kFailedPrecondition);
}

TEST_F(NodeServiceTest, PublishBindsStagingOntoTargetIdempotently) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest("vol1")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest("vol1")).ok());
  EXPECT_EQ(world_->Count("bind " + std::string(kStaging) + " " + kTarget + " rw"), 1);
  // The same target read-only now: incompatible with what is there.
  EXPECT_CODE(node_->Publish(PublishRequest("vol1", false, true)), kAlreadyExists);
}

TEST_F(NodeServiceTest, PublishReadOnlyBindsReadOnly) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest("vol1", false, true)).ok());
  EXPECT_EQ(world_->Count("bind " + std::string(kStaging) + " " + kTarget + " ro"), 1);
}

TEST_F(NodeServiceTest, PublishAtOtherStagingPathIsFailedPrecondition) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  auto req = PublishRequest("vol1");
  req.set_staging_target_path("/elsewhere");
  EXPECT_CODE(node_->Publish(req), kFailedPrecondition);
}

TEST_F(NodeServiceTest, PublishBlockAsMountIsFailedPrecondition) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1", "block")).ok());
  EXPECT_CODE(node_->Publish(PublishRequest("vol1", false)), kFailedPrecondition);
}

TEST_F(NodeServiceTest, PublishRawBlockBindsDeviceOntoFile) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1", "block")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest("vol1", true)).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest("vol1", true)).ok());
  EXPECT_TRUE(world_->files.contains(kTarget));
  EXPECT_EQ(world_->Count("bind /dev/fake1 " + std::string(kTarget) + " rw"), 1);
}

TEST_F(NodeServiceTest, PublishRawBlockReadOnlyGoesThroughAReadOnlyLoopLayer) {
  // A read-only bind of a device node still lets writes through; a
  // read-only loop device on top of it does not.
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1", "block")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest("vol1", true, true)).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest("vol1", true, true)).ok());
  EXPECT_EQ(Commands(), std::vector<std::string>{"losetup --read-only --find --show /dev/fake1"});
  EXPECT_EQ(world_->Count("bind /dev/loop50 " + std::string(kTarget) + " ro"), 1);
  EXPECT_CODE(node_->Unstage(UnstageRequest("vol1")), kFailedPrecondition);
  ASSERT_TRUE(node_->Unpublish(UnpublishRequest("vol1")).ok());
  EXPECT_EQ(Commands().back(), "losetup --detach /dev/loop50");
  ASSERT_TRUE(node_->Unstage(UnstageRequest("vol1")).ok());
  EXPECT_EQ(world_->Count("detach vol1"), 1);
}

TEST_F(NodeServiceTest, PublishRawBlockReadOnlyLayerIsFreedWhenBindFails) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1", "block")).ok());
  mounter_->FailNext(kTarget, Internal("bind failed"));
  EXPECT_CODE(node_->Publish(PublishRequest("vol1", true, true)), kInternal);
  EXPECT_EQ(Commands().back(), "losetup --detach /dev/loop50");
  EXPECT_TRUE(world_->loop_backing.empty());
}

TEST_F(NodeServiceTest, UnpublishAndUnstageOfNothingAreOk) {
  EXPECT_TRUE(node_->Unpublish(UnpublishRequest("vol1")).ok());
  EXPECT_TRUE(node_->Unstage(UnstageRequest("vol1")).ok());
  EXPECT_EQ(world_->Count("umount"), 0);
}

TEST_F(NodeServiceTest, UnstageRefusesWhilePublishedThenUnmountsBeforeDetach) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest("vol1")).ok());
  Status st = node_->Unstage(UnstageRequest("vol1"));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find(kTarget), std::string::npos) << st.message();
  EXPECT_EQ(world_->Count("umount"), 0);
  EXPECT_EQ(world_->Count("detach"), 0);

  ASSERT_TRUE(node_->Unpublish(UnpublishRequest("vol1")).ok());
  EXPECT_FALSE(world_->dirs.contains(kTarget));
  ASSERT_TRUE(node_->Unstage(UnstageRequest("vol1")).ok());
  auto log = world_->Log();
  auto umount = std::find(log.begin(), log.end(), "umount " + std::string(kStaging));
  auto detach = std::find(log.begin(), log.end(), "detach vol1");
  ASSERT_NE(umount, log.end());
  ASSERT_NE(detach, log.end());
  EXPECT_LT(umount - log.begin(), detach - log.begin());
  EXPECT_FALSE(attacher_->Get("vol1").ok());
  // Again: nothing left, still OK.
  EXPECT_TRUE(node_->Unstage(UnstageRequest("vol1")).ok());
}

TEST_F(NodeServiceTest, UnstageRefusesWhileRawBlockIsPublished) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1", "block")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest("vol1", true)).ok());
  EXPECT_CODE(node_->Unstage(UnstageRequest("vol1")), kFailedPrecondition);
  EXPECT_EQ(world_->Count("detach"), 0);
  ASSERT_TRUE(node_->Unpublish(UnpublishRequest("vol1")).ok());
  ASSERT_TRUE(node_->Unstage(UnstageRequest("vol1")).ok());
  EXPECT_EQ(world_->Count("detach"), 1);
}

TEST_F(NodeServiceTest, UnstageDoesNotDetachWhenUnmountFails) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  mounter_->FailNext(kStaging, Status(StatusCode::kUnavailable, "device or resource busy"));
  EXPECT_CODE(node_->Unstage(UnstageRequest("vol1")), kUnavailable);
  EXPECT_EQ(world_->Count("detach"), 0);
  EXPECT_TRUE(attacher_->Get("vol1").ok());
}

TEST_F(NodeServiceTest, RestageAfterUnstageMountsTheSameFilesystem) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  ASSERT_TRUE(node_->Unstage(UnstageRequest("vol1")).ok());
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  EXPECT_EQ(world_->Count("exec mkfs"), 1);
  EXPECT_EQ(world_->Count("mount /dev/fake1"), 2);
}

// ---- Expand

csi::v1::NodeExpandVolumeRequest ExpandRequest(const std::string& volume, const std::string& path) {
  csi::v1::NodeExpandVolumeRequest r;
  r.set_volume_id(volume);
  r.set_volume_path(path);
  return r;
}

TEST_F(NodeServiceTest, ExpandXfsRescansAndGrowsAtTheMountPath) {
  std::string dev = Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1", "xfs")).ok());
  world_->devices[dev].size_bytes = 2ULL << 30;
  auto req = ExpandRequest("vol1", kStaging);
  req.mutable_capacity_range()->set_required_bytes(2LL << 30);
  csi::v1::NodeExpandVolumeResponse resp;
  ASSERT_TRUE(node_->Expand(req, &resp).ok());
  EXPECT_EQ(resp.capacity_bytes(), 2LL << 30);
  EXPECT_EQ(Commands().back(), "xfs_growfs " + std::string(kStaging));
  EXPECT_EQ(world_->Count("rescan vol1"), 1);
}

TEST_F(NodeServiceTest, ExpandExt4RunsResize2fsOnTheDevice) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  csi::v1::NodeExpandVolumeResponse resp;
  ASSERT_TRUE(node_->Expand(ExpandRequest("vol1", kStaging), &resp).ok());
  EXPECT_EQ(Commands().back(), "resize2fs /dev/fake1");
}

TEST_F(NodeServiceTest, ExpandExt4WithoutCapSysResourceSaysSo) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  host_->cap_sys_resource = false;
  csi::v1::NodeExpandVolumeResponse resp;
  Status st = node_->Expand(ExpandRequest("vol1", kStaging), &resp);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("CAP_SYS_RESOURCE"), std::string::npos) << st.message();
  EXPECT_EQ(world_->Count("exec resize2fs"), 0);
}

TEST_F(NodeServiceTest, ExpandExt4KernelRefusalIsExplained) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  executor_->Script("resize2fs", 1, "", "resize2fs: Permission denied to resize filesystem");
  csi::v1::NodeExpandVolumeResponse resp;
  Status st = node_->Expand(ExpandRequest("vol1", kStaging), &resp);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("CAP_SYS_RESOURCE"), std::string::npos);
}

TEST_F(NodeServiceTest, ExpandRawBlockOnlyRescans) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1", "block")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest("vol1", true)).ok());
  csi::v1::NodeExpandVolumeResponse resp;
  ASSERT_TRUE(node_->Expand(ExpandRequest("vol1", kTarget), &resp).ok());
  EXPECT_EQ(resp.capacity_bytes(), 1LL << 30);
  EXPECT_TRUE(Commands().empty());
}

TEST_F(NodeServiceTest, ExpandBelowRequiredSizeIsUnavailable) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1", "xfs")).ok());
  auto req = ExpandRequest("vol1", kStaging);
  req.mutable_capacity_range()->set_required_bytes(4LL << 30);
  csi::v1::NodeExpandVolumeResponse resp;
  EXPECT_CODE(node_->Expand(req, &resp), kUnavailable);
  EXPECT_EQ(world_->Count("exec xfs_growfs"), 0);
}

// A static PV's LUN is grown by the array's admin (issue #24): until then
// a PVC resize asks for more than there is, which no retry of ours changes:
// OUT_OF_RANGE in one line naming the volume, and nothing is grown.
TEST_F(NodeServiceTest, ExpandOfAStaticLunStillTooSmallIsOutOfRange) {
  Device("vol1", "/dev/fake1");
  auto stage = StageRequest("vol1", "xfs");
  (*stage.mutable_publish_context())[publish_context::kStatic] = "true";
  ASSERT_TRUE(node_->Stage(stage).ok());
  auto req = ExpandRequest("vol1", kStaging);
  req.mutable_capacity_range()->set_required_bytes(4LL << 30);
  csi::v1::NodeExpandVolumeResponse resp;
  Status st = node_->Expand(req, &resp);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.ToString();
  EXPECT_NE(st.message().find("vol1"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  EXPECT_EQ(world_->Count("exec xfs_growfs"), 0);
}

TEST_F(NodeServiceTest, ExpandUnknownVolumeIsNotFound) {
  csi::v1::NodeExpandVolumeResponse resp;
  EXPECT_CODE(node_->Expand(ExpandRequest("nope", kStaging), &resp), kNotFound);
}

// ---- Stats and condition

csi::v1::NodeGetVolumeStatsRequest StatsRequest(const std::string& volume, const std::string& path) {
  csi::v1::NodeGetVolumeStatsRequest r;
  r.set_volume_id(volume);
  r.set_volume_path(path);
  return r;
}

// Only the node's part: each of the host's six figures lands in its own CSI
// field (six different numbers, so a swap shows) and a healthy mount is
// normal. The figures themselves are the kernel's: node_real_test's
// Ext4StatsFollowWhatIsWrittenOnTheRealFilesystem checks them on a real mount.
TEST_F(NodeServiceTest, StatsPutEachFigureOfTheHostInItsOwnField) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  host_->usage = {.total_bytes = 7001,
                  .available_bytes = 5003,
                  .used_bytes = 1907,
                  .total_inodes = 311,
                  .free_inodes = 293,
                  .used_inodes = 17};
  csi::v1::NodeGetVolumeStatsResponse resp;
  ASSERT_TRUE(node_->Stats(StatsRequest("vol1", kStaging), &resp).ok());
  ASSERT_EQ(resp.usage_size(), 2);
  EXPECT_EQ(resp.usage(0).unit(), csi::v1::VolumeUsage::BYTES);
  EXPECT_EQ(resp.usage(0).total(), 7001);
  EXPECT_EQ(resp.usage(0).available(), 5003);
  EXPECT_EQ(resp.usage(0).used(), 1907);
  EXPECT_EQ(resp.usage(1).unit(), csi::v1::VolumeUsage::INODES);
  EXPECT_EQ(resp.usage(1).total(), 311);
  EXPECT_EQ(resp.usage(1).available(), 293);
  EXPECT_EQ(resp.usage(1).used(), 17);
  EXPECT_FALSE(resp.volume_condition().abnormal()) << resp.volume_condition().message();
}

TEST_F(NodeServiceTest, StatsConditionAbnormalWhenMountIsGone) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  ASSERT_TRUE(mounter_->Unmount(kStaging).ok());
  csi::v1::NodeGetVolumeStatsResponse resp;
  ASSERT_TRUE(node_->Stats(StatsRequest("vol1", kStaging), &resp).ok());
  EXPECT_TRUE(resp.volume_condition().abnormal());
  EXPECT_NE(resp.volume_condition().message().find("mount is gone"), std::string::npos);
}

TEST_F(NodeServiceTest, StatsConditionAbnormalWhenDeviceIsGone) {
  std::string dev = Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  world_->devices[dev].present = false;
  csi::v1::NodeGetVolumeStatsResponse resp;
  ASSERT_TRUE(node_->Stats(StatsRequest("vol1", kStaging), &resp).ok());
  EXPECT_TRUE(resp.volume_condition().abnormal());
  EXPECT_NE(resp.volume_condition().message().find("/dev/fake1 is gone"), std::string::npos);
}

TEST_F(NodeServiceTest, StatsConditionAbnormalWhenTheFilesystemWentReadOnly) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  host_->usage.read_only = true;  // what statvfs says after errors=remount-ro
  csi::v1::NodeGetVolumeStatsResponse resp;
  ASSERT_TRUE(node_->Stats(StatsRequest("vol1", kStaging), &resp).ok());
  EXPECT_TRUE(resp.volume_condition().abnormal());
  EXPECT_NE(resp.volume_condition().message().find("went read-only after I/O errors"), std::string::npos)
      << resp.volume_condition().message();
}

TEST_F(NodeServiceTest, StatsConditionCarriesTheAttachersVerdict) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  attacher_->SetHealth("vol1", {true, "LUN identity changed: serial x, expected y"});
  csi::v1::NodeGetVolumeStatsResponse resp;
  ASSERT_TRUE(node_->Stats(StatsRequest("vol1", kStaging), &resp).ok());
  EXPECT_TRUE(resp.volume_condition().abnormal());
  EXPECT_NE(resp.volume_condition().message().find("identity changed"), std::string::npos);
}

TEST_F(NodeServiceTest, StatsOfRawBlockReportBytes) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1", "block")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest("vol1", true)).ok());
  csi::v1::NodeGetVolumeStatsResponse resp;
  ASSERT_TRUE(node_->Stats(StatsRequest("vol1", kTarget), &resp).ok());
  ASSERT_EQ(resp.usage_size(), 1);
  EXPECT_EQ(resp.usage(0).total(), 1LL << 30);
  EXPECT_FALSE(resp.volume_condition().abnormal()) << resp.volume_condition().message();
}

TEST_F(NodeServiceTest, StatsOfMissingPathOrVolumeIsNotFound) {
  csi::v1::NodeGetVolumeStatsResponse resp;
  EXPECT_CODE(node_->Stats(StatsRequest("vol1", "/nowhere"), &resp), kNotFound);
  EXPECT_CODE(node_->Stats(StatsRequest("vol1", kStaging), &resp), kNotFound);
  // An unknown volume is NOT_FOUND whatever the path looks like (issue #15,
  // csi-sanity's "should fail when volume is not found" asks at "some/path").
  EXPECT_CODE(node_->Stats(StatsRequest("vol1", "rel"), &resp), kNotFound);
  csi::v1::NodeExpandVolumeResponse expanded;
  EXPECT_CODE(node_->Expand(ExpandRequest("vol1", "rel"), &expanded), kNotFound);
  EXPECT_CODE(node_->Stats(StatsRequest("vol1", ""), &resp), kInvalidArgument);
}

// ---- fencing: the node lets go of everything and stages nothing new ----

TEST_F(NodeServiceTest, AFencedNodeReleasesEverythingAndRefusesToStage) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest("vol1")).ok());
  node_->SetFenced("2027-01-15T08:00:00Z");
  std::vector<std::string> lazily;
  ASSERT_TRUE(node_->ReleaseAll(&lazily).ok());
  EXPECT_TRUE(lazily.empty());
  EXPECT_TRUE(world_->mounts.empty()) << "a mount of the fenced volume is left";
  auto log = world_->Log();
  auto pod = std::find(log.begin(), log.end(), "umount " + std::string(kTarget));
  auto staging = std::find(log.begin(), log.end(), "umount " + std::string(kStaging));
  auto detach = std::find(log.begin(), log.end(), "detach vol1");
  ASSERT_NE(pod, log.end());
  ASSERT_NE(staging, log.end());
  ASSERT_NE(detach, log.end());
  EXPECT_LT(pod - log.begin(), staging - log.begin()) << "the staging mount went before the pod's";
  EXPECT_LT(staging - log.begin(), detach - log.begin());
  EXPECT_FALSE(attacher_->Get("vol1").ok());

  Status refused = node_->Stage(StageRequest("vol2"));
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
  EXPECT_NE(refused.message().find("fenced (fence 2027-01-15T08:00:00Z)"), std::string::npos) << refused.message();
  EXPECT_FALSE(attacher_->Get("vol2").ok()) << "a fenced node attached a volume";
  // kubelet's own teardown afterwards still succeeds.
  EXPECT_TRUE(node_->Unpublish(UnpublishRequest("vol1")).ok());
  EXPECT_TRUE(node_->Unstage(UnstageRequest("vol1")).ok());
  node_->SetFenced("");
  EXPECT_TRUE(node_->Stage(StageRequest("vol2")).ok());
}

TEST_F(NodeServiceTest, AFilesystemThatCannotBeUnmountedCleanlyIsDetachedLazilyAndReported) {
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node_->Stage(StageRequest("vol1")).ok());
  mounter_->FailNext(kStaging, Status(StatusCode::kUnavailable, "input/output error"));
  std::vector<std::string> lazily;
  ASSERT_TRUE(node_->ReleaseAll(&lazily).ok());
  EXPECT_EQ(lazily, std::vector<std::string>{kStaging});
  EXPECT_EQ(world_->Count("umount-lazy " + std::string(kStaging)), 1);
  EXPECT_TRUE(world_->mounts.empty());
  EXPECT_FALSE(attacher_->Get("vol1").ok());
}

TEST_F(NodeServiceTest, TheFenceMonitorCleansUpOnceAndReportsForThatFence) {
  std::shared_ptr<NodeService> node = std::move(node_);
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node->Stage(StageRequest("vol1")).ok());
  FenceNotice notice{"2027-01-15T08:00:00Z", ""};
  std::vector<std::string> reports;
  NodeFenceMonitorOptions options;
  options.check = [&]() -> StatusOr<FenceNotice> { return notice; };
  options.report = [&](const std::string& id, const std::vector<std::string>&) {
    reports.push_back(id);
    notice.cleaned_up = id;
    return OkStatus();
  };
  NodeFenceMonitor monitor(node, options);
  ASSERT_TRUE(monitor.CheckNow().ok());
  EXPECT_EQ(reports, std::vector<std::string>{"2027-01-15T08:00:00Z"});
  EXPECT_FALSE(attacher_->Get("vol1").ok());
  EXPECT_EQ(node->Fenced(), "2027-01-15T08:00:00Z");
  ASSERT_TRUE(monitor.CheckNow().ok());
  EXPECT_EQ(reports.size(), 1u) << "reported twice for one fence";
  // A new fence is cleaned up after and reported again.
  notice.fence_id = "2027-01-16T08:00:00Z";
  ASSERT_TRUE(monitor.CheckNow().ok());
  EXPECT_EQ(reports.back(), "2027-01-16T08:00:00Z");
  // Unfenced: NodeStage works again.
  notice = FenceNotice{};
  ASSERT_TRUE(monitor.CheckNow().ok());
  EXPECT_EQ(node->Fenced(), "");
  EXPECT_TRUE(node->Stage(StageRequest("vol1")).ok());
}

TEST_F(NodeServiceTest, TheFenceMonitorDoesNotReportWhileSomethingIsLeft) {
  std::shared_ptr<NodeService> node = std::move(node_);
  Device("vol1", "/dev/fake1");
  ASSERT_TRUE(node->Stage(StageRequest("vol1")).ok());
  int reports = 0;
  NodeFenceMonitorOptions options;
  options.check = []() -> StatusOr<FenceNotice> { return FenceNotice{"f1", ""}; };
  options.report = [&](const std::string&, const std::vector<std::string>&) {
    ++reports;
    return OkStatus();
  };
  NodeFenceMonitor monitor(node, options);
  attacher_->FailDetachWith(Unavailable("logout failed"));
  EXPECT_FALSE(monitor.CheckNow().ok());
  EXPECT_EQ(reports, 0) << "reported a cleanup that did not finish";
  attacher_->FailDetachWith(OkStatus());
  ASSERT_TRUE(monitor.CheckNow().ok());
  EXPECT_EQ(reports, 1);
}

}  // namespace
}  // namespace blockcsi
