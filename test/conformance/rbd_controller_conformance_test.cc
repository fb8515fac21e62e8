// Conformance of the Controller service on Ceph RBD: the real
// `blockcsi --mode controller --backend rbd` on a real single-node Ceph
// (hack/ceph-cluster.sh), driven as a CSI client over its unix socket —
// creation and its capacity rules, idempotency, publish and the
// publish_context a node gets (never a key), the VolumeAttachment handover
// between nodes with the grant visible in the image's metadata, snapshots,
// restores, clones, expansion, paging, capacity; cephx credentials from CSI
// secrets; and --backend-config serving a local (tgtd) and an rbd backend
// at once. Needs root and the ceph packages (plus tgt for the mixed test);
// skips with the reason otherwise. Under ctest, the rbd_cluster fixture's
// cluster is shared (BLOCKCSI_CEPH_DIR); run directly, the suite starts and
// stops a cluster of its own. Each case deletes what it made; TearDown
// asserts with the shared leak checker, before it cleans, that the pool
// holds no new image or snapshot (and the local pool of the mixed test no
// file), and a refused call is checked right after it (issue #22). The
// checker reads the whole shared pool: every case runs alone (RUN_SERIAL).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "contract/publish_context.h"
#include "csi.grpc.pb.h"
#include "support/ceph_client.h"
#include "support/ceph_test_cluster.h"
#include "support/csi_capabilities.h"
#include "support/csi_requests.h"
#include "support/leak_check.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;
using Mode = csi::v1::VolumeCapability::AccessMode;
using Code = grpc::StatusCode;
constexpr int64_t kMiB = 1 << 20;

std::string Describe(const grpc::Status& st) {
  return std::to_string(static_cast<int>(st.error_code())) + ": " + st.error_message();
}

class RbdControllerConformanceTest : public testing::CephSuiteTest {
 protected:
  void SetUp() override {
    CephSuiteTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    baseline_ = testing::TakeLeakSnapshot(Scope());
    // A pool the checker cannot read would make every later check vacuous.
    ASSERT_TRUE(baseline_.unreadable.empty())
        << testing::DescribeItems({baseline_.unreadable.begin(), baseline_.unreadable.end()});
    have_baseline_ = true;
  }
  void TearDown() override {
    // The case's own deletes ran: anything new is a leak, asserted before
    // the fallback below removes it.
    if (have_baseline_) {
      EXPECT_TRUE(testing::NothingLeftSince(baseline_, Scope(), "the test's own deletes, before the fixture cleans"))
          << PluginLog();
    }
    // Leave the shared cluster as we found it, also after a failure.
    if (controller_ != nullptr) {
      for (auto it = snapshots_.rbegin(); it != snapshots_.rend(); ++it) (void)DeleteSnapshot(*it);
      for (auto it = volumes_.rbegin(); it != volumes_.rend(); ++it) {
        (void)Unpublish(*it, "");
        (void)Delete(*it);
      }
    }
    StopPlugin();
  }

  // The RBD pool's images and snapshots, the local pool and tgtd of the
  // mixed test (--backend-config), and the metadata (grants) of `images`.
  testing::LeakScope Scope(const std::vector<std::string>& images = {}) const {
    testing::LeakScope scope = PoolLeakScope();
    scope.pool_dir = dir_.Join("pool");
    scope.tgtd = tgtd_.get();
    for (const auto& image : images) scope.rbd_metadata_images.push_back(env_.at("RBD_POOL") + "/" + image);
    return scope;
  }
  testing::LeakSnapshot Snapshot(const std::vector<std::string>& images = {}) const {
    return testing::TakeLeakSnapshot(Scope(images));
  }

  std::vector<std::string> RbdFlags() const {
    return {"--backend",      "rbd",
            "--ceph-conf",    env_.at("CEPH_CONF"),
            "--ceph-user",    env_.at("BLOCKCSI_CEPH_USER"),
            "--ceph-keyring", env_.at("BLOCKCSI_CEPH_KEYRING"),
            "--rbd-pool",     env_.at("RBD_POOL")};
  }

  // The real plugin, controller only, with `flags` for its backend.
  void StartPlugin(const std::vector<std::string>& flags) {
    socket_ = dir_.Join("csi.sock");
    log_path_ = dir_.Join("plugin.log");
    std::vector<std::string> argv{testing::BinDir() + "/blockcsi",
                                  "--mode",
                                  "controller",
                                  "--endpoint",
                                  "unix://" + socket_,
                                  "--state-dir",
                                  dir_.Join("state"),
                                  "--log-level",
                                  "debug"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    plugin_ = std::make_unique<testing::ChildProcess>(argv, log_path_);
    ASSERT_TRUE(testing::WaitForSocket(socket_, 30s)) << "plugin did not come up:\n" << PluginLog();
    auto channel = grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials());
    controller_ = csi::v1::Controller::NewStub(channel);
    identity_ = csi::v1::Identity::NewStub(channel);
  }
  void StopPlugin() {
    if (!plugin_) return;
    // Our connection closed first: the server's graceful shutdown would
    // otherwise wait for it to go idle.
    controller_.reset();
    identity_.reset();
    plugin_->Signal(SIGTERM);
    (void)plugin_->Wait(15s);
    plugin_.reset();  // SIGKILL by pid if still running
  }
  std::string PluginLog() const { return testing::ReadFileOrEmpty(log_path_); }

  template <typename Req, typename Resp, typename Method>
  grpc::Status Call(Method method, const Req& request, Resp* response) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 90s);
    return ((*controller_).*method)(&ctx, request, response);
  }

  // A name unique to this test and process: tests share the cluster.
  std::string Unique(const std::string& what) const {
    return std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" + what + "-" +
           std::to_string(::getpid());
  }

  csi::v1::CreateVolumeRequest CreateRequest(const std::string& name, int64_t required = 8 * kMiB, int64_t limit = 0) {
    csi::v1::CreateVolumeRequest r;
    r.set_name(name);
    r.mutable_capacity_range()->set_required_bytes(required);
    r.mutable_capacity_range()->set_limit_bytes(limit);
    *r.add_volume_capabilities() = testing::MountCapability("ext4");
    for (const auto& [k, v] : secrets_) (*r.mutable_secrets())[k] = v;
    return r;
  }
  grpc::Status Create(const csi::v1::CreateVolumeRequest& r, csi::v1::CreateVolumeResponse* resp) {
    grpc::Status st = Call(&csi::v1::Controller::Stub::CreateVolume, r, resp);
    if (st.ok()) Remember(volumes_, resp->volume().volume_id());
    return st;
  }
  std::string MakeVolume(const std::string& name, std::map<std::string, std::string> params = {},
                         int64_t bytes = 8 * kMiB) {
    auto r = CreateRequest(name, bytes);
    for (const auto& [k, v] : params) (*r.mutable_parameters())[k] = v;
    csi::v1::CreateVolumeResponse resp;
    grpc::Status st = Create(r, &resp);
    EXPECT_TRUE(st.ok()) << Describe(st) << "\n" << PluginLog();
    return resp.volume().volume_id();
  }
  grpc::Status Delete(const std::string& id) {
    csi::v1::DeleteVolumeRequest r;
    r.set_volume_id(id);
    for (const auto& [k, v] : secrets_) (*r.mutable_secrets())[k] = v;
    csi::v1::DeleteVolumeResponse resp;
    return Call(&csi::v1::Controller::Stub::DeleteVolume, r, &resp);
  }
  grpc::Status Publish(const std::string& id, const std::string& node, csi::v1::ControllerPublishVolumeResponse* resp,
                       const csi::v1::VolumeCapability& cap = testing::MountCapability("ext4")) {
    auto r = testing::PublishRequest(id, node, cap);
    for (const auto& [k, v] : secrets_) (*r.mutable_secrets())[k] = v;
    return Call(&csi::v1::Controller::Stub::ControllerPublishVolume, r, resp);
  }
  grpc::Status Publish(const std::string& id, const std::string& node) {
    csi::v1::ControllerPublishVolumeResponse resp;
    return Publish(id, node, &resp);
  }
  grpc::Status Unpublish(const std::string& id, const std::string& node) {
    auto r = testing::UnpublishRequest(id, node);
    for (const auto& [k, v] : secrets_) (*r.mutable_secrets())[k] = v;
    csi::v1::ControllerUnpublishVolumeResponse resp;
    return Call(&csi::v1::Controller::Stub::ControllerUnpublishVolume, r, &resp);
  }
  grpc::Status GetVolume(const std::string& id, csi::v1::ControllerGetVolumeResponse* resp) {
    csi::v1::ControllerGetVolumeRequest r;
    r.set_volume_id(id);
    return Call(&csi::v1::Controller::Stub::ControllerGetVolume, r, resp);
  }
  grpc::Status CreateSnapshot(const std::string& source, const std::string& name,
                              csi::v1::CreateSnapshotResponse* resp) {
    csi::v1::CreateSnapshotRequest r;
    r.set_source_volume_id(source);
    r.set_name(name);
    for (const auto& [k, v] : secrets_) (*r.mutable_secrets())[k] = v;
    grpc::Status st = Call(&csi::v1::Controller::Stub::CreateSnapshot, r, resp);
    if (st.ok()) Remember(snapshots_, resp->snapshot().snapshot_id());
    return st;
  }
  grpc::Status DeleteSnapshot(const std::string& id) {
    csi::v1::DeleteSnapshotRequest r;
    r.set_snapshot_id(id);
    for (const auto& [k, v] : secrets_) (*r.mutable_secrets())[k] = v;
    csi::v1::DeleteSnapshotResponse resp;
    return Call(&csi::v1::Controller::Stub::DeleteSnapshot, r, &resp);
  }
  static void Remember(std::vector<std::string>& list, const std::string& id) {
    if (std::find(list.begin(), list.end(), id) == list.end()) list.push_back(id);
  }

  // The image's metadata value `key`, read with the admin keyring straight
  // from the cluster (not through the plugin); nullopt when absent.
  std::optional<std::string> ImageMeta(const std::string& image, const std::string& key) {
    testing::CephClient admin(env_.at("CEPH_CONF"), "admin", env_.at("CEPH_KEYRING"), env_.at("RBD_POOL"));
    return admin.Metadata(image, key);
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::ChildProcess> plugin_;
  std::string socket_, log_path_;
  std::unique_ptr<csi::v1::Controller::Stub> controller_;
  std::unique_ptr<csi::v1::Identity::Stub> identity_;
  std::map<std::string, std::string> secrets_;  // sent with every call that takes secrets
  std::vector<std::string> volumes_, snapshots_;
  testing::LeakSnapshot baseline_;
  bool have_baseline_ = false;
  // The mixed test's local backend's tgtd: a member, so that it serves
  // until TearDown's leak check and fallback cleanup are done.
  std::unique_ptr<testing::TgtdHarness> tgtd_;
};

#define EXPECT_CODE(expr, code)                               \
  do {                                                        \
    grpc::Status _st = (expr);                                \
    EXPECT_EQ(_st.error_code(), Code::code) << Describe(_st); \
  } while (0)
// A refused call: its code, and right after it, before anything cleans,
// nothing new in the pool (nor in the metadata of the images listed after).
#define EXPECT_REFUSED(expr, code, ...)                                                          \
  do {                                                                                           \
    const testing::LeakSnapshot _before = Snapshot({__VA_ARGS__});                               \
    EXPECT_CODE(expr, code);                                                                     \
    EXPECT_TRUE(testing::NothingLeftSince(_before, Scope({__VA_ARGS__}), "the refused " #expr)); \
  } while (0)

TEST_F(RbdControllerConformanceTest, ProbeIsReadyAndCreateIsIdempotentWithCapacityRules) {
  StartPlugin(RbdFlags());
  grpc::ClientContext ctx;
  csi::v1::ProbeResponse probe;
  ASSERT_TRUE(identity_->Probe(&ctx, {}, &probe).ok());
  EXPECT_TRUE(probe.ready().value());

  const std::string name = Unique("v");
  csi::v1::CreateVolumeResponse first, again;
  // 5 MiB + 1 byte rounds up to whole MiB.
  ASSERT_TRUE(Create(CreateRequest(name, 5 * kMiB + 1), &first).ok()) << PluginLog();
  const std::string id = first.volume().volume_id();
  EXPECT_TRUE(id.starts_with("rbd." + env_.at("RBD_POOL") + ".csi-vol-")) << id;
  EXPECT_LE(id.size(), 128u);
  EXPECT_EQ(first.volume().capacity_bytes(), 6 * kMiB);
  EXPECT_EQ(first.volume().volume_context().at("fsType"), "ext4");
  ASSERT_TRUE(Create(CreateRequest(name, 5 * kMiB + 1), &again).ok());
  EXPECT_EQ(again.volume().volume_id(), id);
  EXPECT_EQ(again.volume().capacity_bytes(), 6 * kMiB);

  // Same name, other size → ALREADY_EXISTS.
  csi::v1::CreateVolumeResponse other;
  EXPECT_REFUSED(Create(CreateRequest(name, 64 * kMiB), &other), ALREADY_EXISTS);
  // No size fits the range → OUT_OF_RANGE; a limit below the granularity too.
  EXPECT_REFUSED(Create(CreateRequest(Unique("range"), 10 * kMiB, 4 * kMiB), &other), OUT_OF_RANGE);
  EXPECT_REFUSED(Create(CreateRequest(Unique("tiny"), 1, kMiB / 2), &other), OUT_OF_RANGE);
  EXPECT_REFUSED(Create(CreateRequest(""), &other), INVALID_ARGUMENT);

  csi::v1::ControllerGetVolumeResponse got;
  ASSERT_TRUE(GetVolume(id, &got).ok());
  EXPECT_EQ(got.volume().capacity_bytes(), 6 * kMiB);
  EXPECT_FALSE(got.status().volume_condition().abnormal());
  EXPECT_CODE(GetVolume("rbd." + env_.at("RBD_POOL") + ".csi-vol-00000000000000000000000000000000", &got), NOT_FOUND);
  EXPECT_CODE(GetVolume("not-an-rbd-id", &got), NOT_FOUND);
  EXPECT_TRUE(Delete(id).ok()) << PluginLog();
}

TEST_F(RbdControllerConformanceTest, DeleteIsIdempotentAndRefusedWhilePublished) {
  StartPlugin(RbdFlags());
  const std::string id = MakeVolume(Unique("v"));
  ASSERT_TRUE(Publish(id, "n1").ok());
  grpc::Status st = Delete(id);
  EXPECT_EQ(st.error_code(), Code::FAILED_PRECONDITION) << Describe(st);
  EXPECT_NE(st.error_message().find("n1"), std::string::npos) << Describe(st);
  ASSERT_TRUE(Unpublish(id, "n1").ok());
  ASSERT_TRUE(Delete(id).ok()) << PluginLog();
  EXPECT_TRUE(Delete(id).ok());  // gone already
  EXPECT_TRUE(Delete("rbd.nosuchpool.csi-vol-00000000000000000000000000000000").ok());
  csi::v1::ControllerGetVolumeResponse got;
  EXPECT_CODE(GetVolume(id, &got), NOT_FOUND);
}

TEST_F(RbdControllerConformanceTest, PublishContextDescribesTheImageAndNeverCarriesAKey) {
  StartPlugin(RbdFlags());
  const std::string id = MakeVolume(Unique("v"));
  csi::v1::ControllerPublishVolumeResponse resp;
  ASSERT_TRUE(Publish(id, "n1", &resp).ok()) << PluginLog();
  const auto& ctx = resp.publish_context();
  EXPECT_EQ(ctx.at(publish_context::kTransport), "rbd");
  EXPECT_EQ(ctx.at(publish_context::kRbdPool), env_.at("RBD_POOL"));
  EXPECT_TRUE(ctx.at(publish_context::kRbdImage).starts_with("csi-vol-"));
  EXPECT_EQ(id, "rbd." + env_.at("RBD_POOL") + "." + ctx.at(publish_context::kRbdImage));
  EXPECT_FALSE(ctx.at(publish_context::kRbdImageId).empty());
  EXPECT_NE(ctx.at(publish_context::kCephMonitors).find("127.0.0.1"), std::string::npos);
  EXPECT_EQ(ctx.at(publish_context::kCephUser), env_.at("BLOCKCSI_CEPH_USER"));
  const std::string key = testing::KeyFromKeyring(env_.at("BLOCKCSI_CEPH_KEYRING"));
  ASSERT_FALSE(key.empty());
  for (const auto& [k, v] : ctx) {
    EXPECT_EQ(v.find(key), std::string::npos) << k;
    EXPECT_NE(k, "userKey");
  }
  EXPECT_EQ(PluginLog().find(key), std::string::npos) << "the cephx key is in the plugin's log";

  // Idempotent for the same node and capability; another single-node
  // writer elsewhere is refused.
  csi::v1::ControllerPublishVolumeResponse again;
  ASSERT_TRUE(Publish(id, "n1", &again).ok());
  EXPECT_EQ(again.publish_context().at(publish_context::kRbdImageId), ctx.at(publish_context::kRbdImageId));
  const std::string image = ctx.at(publish_context::kRbdImage);
  EXPECT_REFUSED(Publish(id, "n2"), FAILED_PRECONDITION, image);
  EXPECT_REFUSED(Publish(id, "n1", &again, testing::MountCapability("ext4", Mode::SINGLE_NODE_READER_ONLY)),
                 ALREADY_EXISTS, image);
  EXPECT_REFUSED(Publish("rbd." + env_.at("RBD_POOL") + ".csi-vol-00000000000000000000000000000000", "n1"), NOT_FOUND);
  EXPECT_TRUE(Unpublish(id, "n1").ok());
  EXPECT_TRUE(Unpublish(id, "n1").ok());  // idempotent
  EXPECT_TRUE(Delete(id).ok()) << PluginLog();
}

TEST_F(RbdControllerConformanceTest, VolumeAttachmentMovesBetweenNodesAndTheGrantIsInTheImageMetadata) {
  StartPlugin(RbdFlags());
  const std::string id = MakeVolume(Unique("v"));
  const std::string image = id.substr(id.rfind('.') + 1);
  ASSERT_TRUE(Publish(id, "n1").ok()) << PluginLog();
  EXPECT_TRUE(ImageMeta(image, "blockcsi.grant.n1").has_value());
  // A → n2 while n1 holds it: refused, nothing written for n2.
  EXPECT_REFUSED(Publish(id, "n2"), FAILED_PRECONDITION, image);
  EXPECT_FALSE(ImageMeta(image, "blockcsi.grant.n2").has_value());
  ASSERT_TRUE(Unpublish(id, "n1").ok()) << PluginLog();
  EXPECT_FALSE(ImageMeta(image, "blockcsi.grant.n1").has_value());
  ASSERT_TRUE(Publish(id, "n2").ok()) << PluginLog();
  auto grant = ImageMeta(image, "blockcsi.grant.n2");
  ASSERT_TRUE(grant.has_value());
  EXPECT_NE(grant->find("\"node_id\":\"n2\""), std::string::npos) << *grant;
  csi::v1::ControllerGetVolumeResponse got;
  ASSERT_TRUE(GetVolume(id, &got).ok());
  ASSERT_EQ(got.status().published_node_ids_size(), 1);
  EXPECT_EQ(got.status().published_node_ids(0), "n2");
  ASSERT_TRUE(Unpublish(id, "n2").ok()) << PluginLog();
  EXPECT_TRUE(Delete(id).ok()) << PluginLog();
}

TEST_F(RbdControllerConformanceTest, SnapshotsRestoreCloneAndExpand) {
  StartPlugin(RbdFlags());
  const std::string id = MakeVolume(Unique("v"), {}, 16 * kMiB);

  csi::v1::CreateSnapshotResponse snap, snap_again, other;
  ASSERT_TRUE(CreateSnapshot(id, Unique("s"), &snap).ok()) << PluginLog();
  const std::string snap_id = snap.snapshot().snapshot_id();
  EXPECT_TRUE(snap.snapshot().ready_to_use());
  EXPECT_EQ(snap.snapshot().source_volume_id(), id);
  EXPECT_EQ(snap.snapshot().size_bytes(), 16 * kMiB);
  EXPECT_LE(snap_id.size(), 128u);
  ASSERT_TRUE(CreateSnapshot(id, Unique("s"), &snap_again).ok());
  EXPECT_EQ(snap_again.snapshot().snapshot_id(), snap_id);
  const std::string id2 = MakeVolume(Unique("v2"));
  EXPECT_REFUSED(CreateSnapshot(id2, Unique("s"), &other), ALREADY_EXISTS);
  EXPECT_REFUSED(
      CreateSnapshot("rbd." + env_.at("RBD_POOL") + ".csi-vol-00000000000000000000000000000000", Unique("x"), &other),
      NOT_FOUND);

  // Listed by id and by source volume.
  csi::v1::ListSnapshotsRequest by_source;
  by_source.set_source_volume_id(id);
  csi::v1::ListSnapshotsResponse listed;
  ASSERT_TRUE(Call(&csi::v1::Controller::Stub::ListSnapshots, by_source, &listed).ok());
  ASSERT_EQ(listed.entries_size(), 1);
  EXPECT_EQ(listed.entries(0).snapshot().snapshot_id(), snap_id);
  csi::v1::ListSnapshotsRequest by_id;
  by_id.set_snapshot_id(snap_id);
  ASSERT_TRUE(Call(&csi::v1::Controller::Stub::ListSnapshots, by_id, &listed).ok());
  ASSERT_EQ(listed.entries_size(), 1);

  // Restore: at least the snapshot's size; smaller is OUT_OF_RANGE.
  auto restore = CreateRequest(Unique("restored"), 16 * kMiB);
  restore.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(snap_id);
  csi::v1::CreateVolumeResponse restored;
  ASSERT_TRUE(Create(restore, &restored).ok()) << PluginLog();
  EXPECT_EQ(restored.volume().content_source().snapshot().snapshot_id(), snap_id);
  EXPECT_EQ(restored.volume().capacity_bytes(), 16 * kMiB);
  const std::string restored_id = restored.volume().volume_id();
  auto too_small = CreateRequest(Unique("small"), 8 * kMiB);
  too_small.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(snap_id);
  EXPECT_REFUSED(Create(too_small, &restored), OUT_OF_RANGE);
  auto missing = CreateRequest(Unique("missing"));
  missing.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(snap_id + "0");
  EXPECT_REFUSED(Create(missing, &restored), NOT_FOUND);

  // Clone of a volume, larger than its source.
  auto clone = CreateRequest(Unique("clone"), 32 * kMiB);
  clone.mutable_volume_content_source()->mutable_volume()->set_volume_id(id);
  csi::v1::CreateVolumeResponse cloned;
  ASSERT_TRUE(Create(clone, &cloned).ok()) << PluginLog();
  EXPECT_EQ(cloned.volume().content_source().volume().volume_id(), id);
  EXPECT_EQ(cloned.volume().capacity_bytes(), 32 * kMiB);

  // Expand: grows, idempotent, never shrinks.
  const auto ext4 = testing::MountCapability("ext4");
  auto expand = testing::ExpandRequest(id, 48 * kMiB, &ext4);
  csi::v1::ControllerExpandVolumeResponse expanded;
  ASSERT_TRUE(Call(&csi::v1::Controller::Stub::ControllerExpandVolume, expand, &expanded).ok()) << PluginLog();
  EXPECT_EQ(expanded.capacity_bytes(), 48 * kMiB);
  EXPECT_TRUE(expanded.node_expansion_required());
  ASSERT_TRUE(Call(&csi::v1::Controller::Stub::ControllerExpandVolume, expand, &expanded).ok());
  EXPECT_EQ(expanded.capacity_bytes(), 48 * kMiB);
  expand.mutable_capacity_range()->set_required_bytes(8 * kMiB);
  expand.mutable_capacity_range()->set_limit_bytes(16 * kMiB);
  EXPECT_REFUSED(Call(&csi::v1::Controller::Stub::ControllerExpandVolume, expand, &expanded), OUT_OF_RANGE);
  csi::v1::ControllerGetVolumeResponse got;
  ASSERT_TRUE(GetVolume(id, &got).ok());
  EXPECT_EQ(got.volume().capacity_bytes(), 48 * kMiB);

  // A volume with snapshots cannot go; after DeleteSnapshot (idempotent) it can.
  EXPECT_REFUSED(Delete(id), FAILED_PRECONDITION);
  ASSERT_TRUE(DeleteSnapshot(snap_id).ok()) << PluginLog();
  EXPECT_TRUE(DeleteSnapshot(snap_id).ok());
  ASSERT_TRUE(Call(&csi::v1::Controller::Stub::ListSnapshots, by_id, &listed).ok());
  EXPECT_EQ(listed.entries_size(), 0);
  EXPECT_TRUE(Delete(id).ok()) << PluginLog();
  for (const auto& other_id : {id2, restored_id, cloned.volume().volume_id()}) {
    EXPECT_TRUE(Delete(other_id).ok()) << other_id << "\n" << PluginLog();
  }
}

// A restore or clone is a new volume: nothing of its source's publication
// (grants, fences, the source's name) may come with it. rbd_clone3 copies
// the parent image's metadata, so the backend has to drop those keys.
TEST_F(RbdControllerConformanceTest, RestoreAndCloneOfAPublishedVolumeAreNotPublished) {
  StartPlugin(RbdFlags());
  const std::string id = MakeVolume(Unique("v"));
  ASSERT_TRUE(Publish(id, "n1").ok()) << PluginLog();
  csi::v1::CreateSnapshotResponse snap;
  ASSERT_TRUE(CreateSnapshot(id, Unique("s"), &snap).ok()) << PluginLog();
  auto restore = CreateRequest(Unique("restored"));
  restore.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(snap.snapshot().snapshot_id());
  csi::v1::CreateVolumeResponse restored;
  ASSERT_TRUE(Create(restore, &restored).ok()) << PluginLog();
  auto clone = CreateRequest(Unique("clone"));
  clone.mutable_volume_content_source()->mutable_volume()->set_volume_id(id);
  csi::v1::CreateVolumeResponse cloned;
  ASSERT_TRUE(Create(clone, &cloned).ok()) << PluginLog();
  for (const auto& copy : {restored.volume().volume_id(), cloned.volume().volume_id()}) {
    csi::v1::ControllerGetVolumeResponse got;
    ASSERT_TRUE(GetVolume(copy, &got).ok());
    EXPECT_EQ(got.status().published_node_ids_size(), 0) << copy << " inherited its source's grant";
    const std::string image = copy.substr(copy.rfind('.') + 1);
    EXPECT_FALSE(ImageMeta(image, "blockcsi.grant.n1").has_value()) << image;
    // Deletable without an unpublish: it was never published.
    EXPECT_TRUE(Delete(copy).ok()) << copy;
  }
  EXPECT_TRUE(DeleteSnapshot(snap.snapshot().snapshot_id()).ok()) << PluginLog();
  ASSERT_TRUE(Unpublish(id, "n1").ok()) << PluginLog();
  EXPECT_TRUE(Delete(id).ok()) << PluginLog();
}

TEST_F(RbdControllerConformanceTest, ListVolumesPagesAndGetCapacityReportsThePool) {
  StartPlugin(RbdFlags());
  std::set<std::string> mine;
  for (int i = 0; i < 3; ++i) mine.insert(MakeVolume(Unique("v" + std::to_string(i))));
  std::set<std::string> seen;
  auto pages = testing::ListVolumePages(
      [this](const auto& r, auto* resp) { return Call(&csi::v1::Controller::Stub::ListVolumes, r, resp); }, 2, 1000);
  ASSERT_LT(pages.size(), 1000u) << "no last page";
  for (const auto& resp : pages) {
    for (const auto& e : resp.entries()) EXPECT_TRUE(seen.insert(e.volume().volume_id()).second) << "listed twice";
  }
  for (const auto& id : mine) EXPECT_TRUE(seen.contains(id)) << id;
  csi::v1::ListVolumesRequest bad;
  bad.set_starting_token("no-such-token");
  csi::v1::ListVolumesResponse resp;
  EXPECT_CODE(Call(&csi::v1::Controller::Stub::ListVolumes, bad, &resp), ABORTED);

  csi::v1::GetCapacityRequest capacity;
  csi::v1::GetCapacityResponse cap;
  ASSERT_TRUE(Call(&csi::v1::Controller::Stub::GetCapacity, capacity, &cap).ok());
  EXPECT_GT(cap.available_capacity(), 0);
  EXPECT_EQ(cap.available_capacity() % kMiB, 0);
  EXPECT_EQ(cap.minimum_volume_size().value(), kMiB);
  for (const auto& id : mine) EXPECT_TRUE(Delete(id).ok()) << id;
}

TEST_F(RbdControllerConformanceTest, CephxCredentialsFromCsiSecrets) {
  // No --ceph-user/--ceph-keyring: the controller has no identity of its own.
  StartPlugin({"--backend", "rbd", "--ceph-conf", env_.at("CEPH_CONF"), "--rbd-pool", env_.at("RBD_POOL")});
  grpc::ClientContext ctx;
  csi::v1::ProbeResponse probe;
  ASSERT_TRUE(identity_->Probe(&ctx, {}, &probe).ok());
  EXPECT_TRUE(probe.ready().value()) << "a controller waiting for its first secret is ready";

  // Without a secret there is nobody to connect as.
  csi::v1::CreateVolumeResponse resp;
  EXPECT_REFUSED(Create(CreateRequest(Unique("nosecret")), &resp), FAILED_PRECONDITION);
  const std::string key = testing::KeyFromKeyring(env_.at("BLOCKCSI_CEPH_KEYRING"));
  ASSERT_FALSE(key.empty());
  // Half a secret is named, never echoed.
  secrets_ = {{"userID", env_.at("BLOCKCSI_CEPH_USER")}};
  testing::LeakSnapshot before = Snapshot();
  grpc::Status st = Create(CreateRequest(Unique("half")), &resp);
  EXPECT_EQ(st.error_code(), Code::INVALID_ARGUMENT) << Describe(st);
  EXPECT_NE(st.error_message().find("userKey"), std::string::npos) << Describe(st);
  EXPECT_TRUE(testing::NothingLeftSince(before, Scope(), "the create with half a secret"));
  // A wrong key is refused by the cluster.
  secrets_ = {{"userID", env_.at("BLOCKCSI_CEPH_USER")}, {"userKey", "AQBrb25nbm9ub25zZW5zZWtleWtleWtleQ=="}};
  before = Snapshot();
  st = Create(CreateRequest(Unique("wrong")), &resp);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.error_message().find("AQBrb25n"), std::string::npos) << Describe(st);
  EXPECT_TRUE(testing::NothingLeftSince(before, Scope(), "the create with a wrong key"));

  secrets_ = {{"userID", env_.at("BLOCKCSI_CEPH_USER")}, {"userKey", key}};
  const std::string id = MakeVolume(Unique("v"));
  csi::v1::ControllerPublishVolumeResponse published;
  ASSERT_TRUE(Publish(id, "n1", &published).ok()) << PluginLog();
  EXPECT_EQ(published.publish_context().at(publish_context::kCephUser), env_.at("BLOCKCSI_CEPH_USER"));
  // Calls that carry no secret (ControllerGetVolume) use the open connection.
  csi::v1::ControllerGetVolumeResponse got;
  ASSERT_TRUE(GetVolume(id, &got).ok());
  ASSERT_TRUE(Unpublish(id, "n1").ok());
  ASSERT_TRUE(Delete(id).ok());
  EXPECT_EQ(PluginLog().find(key), std::string::npos) << "the cephx key is in the plugin's log";
}

TEST_F(RbdControllerConformanceTest, BadRbdFlagsAreUsageErrorsNamingTheFlag) {
  struct Case {
    std::vector<std::string> flags;
    std::string named;
  };
  int case_index = 0;
  for (const auto& c : std::vector<Case>{
           {{"--backend", "rbd", "--ceph-conf", env_.at("CEPH_CONF")}, "--rbd-pool"},
           {{"--backend", "rbd", "--rbd-pool", "rbd"}, "--ceph-conf"},
           {{"--backend", "rbd", "--ceph-conf", env_.at("CEPH_CONF"), "--rbd-pool", "rbd", "--ceph-keyring", "/k"},
            "--ceph-keyring"},
           {{"--backend", "rbd", "--ceph-conf", env_.at("CEPH_CONF"), "--rbd-pool", "bad/pool", "--ceph-user", "u"},
            "--rbd-pool"},
           {{"--backend-config", "/nonexistent.conf"}, "--backend-config"}}) {
    std::vector<std::string> argv{testing::BinDir() + "/blockcsi", "--mode", "controller", "--endpoint",
                                  "unix://" + dir_.Join("x.sock")};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    // One log per case: the child appends, so a shared file would let a case
    // find the flag an earlier case printed.
    const std::string log = dir_.Join("usage-" + std::to_string(case_index++) + ".log");
    testing::ChildProcess child(argv, log);
    EXPECT_EQ(child.Wait(60s), 2) << c.named << ": " << testing::ReadFileOrEmpty(log);
    EXPECT_NE(testing::ReadFileOrEmpty(log).find(c.named), std::string::npos) << testing::ReadFileOrEmpty(log);
  }
}

TEST_F(RbdControllerConformanceTest, BackendConfigServesLocalAndRbdSideBySide) {
  std::string error;
  tgtd_ = testing::TgtdHarness::Start(&error);
  BLOCKCSI_REQUIRE_TGTD(tgtd_, error);
  // From here the leak scope reads this tgtd too: the baseline again.
  baseline_ = Snapshot();
  ASSERT_TRUE(baseline_.unreadable.empty())
      << testing::DescribeItems({baseline_.unreadable.begin(), baseline_.unreadable.end()});
  const std::string config = dir_.Join("backends.conf");
  {
    std::ofstream out(config);
    out << "# written by the conformance test\n"
        << "[backend iscsi]\nkind = local\npool = " << dir_.Join("pool") << "\n"
        << "tgt-control-port = " << tgtd_->control_port() << "\nportal = " << tgtd_->portal()
        << "\nreconcile-interval = 1h\ndefault = true\n\n"
        << "[backend ceph]\nkind = rbd\nceph-conf = " << env_.at("CEPH_CONF")
        << "\nceph-user = " << env_.at("BLOCKCSI_CEPH_USER") << "\nceph-keyring = " << env_.at("BLOCKCSI_CEPH_KEYRING")
        << "\nrbd-pool = " << env_.at("RBD_POOL") << "\n";
  }
  StartPlugin({"--backend-config", config});

  const std::string on_rbd = MakeVolume(Unique("r"), {{"backend", "ceph"}});
  const std::string on_local = MakeVolume(Unique("l"), {{"backend", "iscsi"}});
  const std::string on_default = MakeVolume(Unique("d"));
  EXPECT_TRUE(on_rbd.starts_with("ceph~rbd." + env_.at("RBD_POOL") + ".csi-vol-")) << on_rbd;
  EXPECT_TRUE(on_local.starts_with("iscsi~vol-")) << on_local;
  EXPECT_TRUE(on_default.starts_with("iscsi~vol-")) << on_default;
  csi::v1::CreateVolumeResponse resp;
  auto unknown = CreateRequest(Unique("u"));
  (*unknown.mutable_parameters())["backend"] = "nvme";
  EXPECT_REFUSED(Create(unknown, &resp), INVALID_ARGUMENT);

  csi::v1::ControllerPublishVolumeResponse rbd_ctx, local_ctx;
  ASSERT_TRUE(Publish(on_rbd, "n1", &rbd_ctx).ok()) << PluginLog();
  EXPECT_EQ(rbd_ctx.publish_context().at(publish_context::kTransport), "rbd");
  EXPECT_EQ(rbd_ctx.publish_context().at(publish_context::kRbdPool), env_.at("RBD_POOL"));
  ASSERT_TRUE(Publish(on_local, "n1", &local_ctx).ok()) << PluginLog();
  EXPECT_EQ(local_ctx.publish_context().at(publish_context::kTransport), "iscsi");
  EXPECT_NE(tgtd_->ShowTargets().find(local_ctx.publish_context().at(publish_context::kTargetIqn)), std::string::npos);

  ASSERT_TRUE(Unpublish(on_rbd, "n1").ok());
  ASSERT_TRUE(Unpublish(on_local, "n1").ok());

  // Snapshots and their restores stay on the volume's backend.
  csi::v1::CreateSnapshotResponse snap;
  ASSERT_TRUE(CreateSnapshot(on_rbd, Unique("s"), &snap).ok()) << PluginLog();
  EXPECT_TRUE(snap.snapshot().snapshot_id().starts_with("ceph~rbd.")) << snap.snapshot().snapshot_id();
  EXPECT_LE(snap.snapshot().snapshot_id().size(), 128u);
  auto restore = CreateRequest(Unique("restored"));
  restore.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(snap.snapshot().snapshot_id());
  csi::v1::CreateVolumeResponse restored;
  ASSERT_TRUE(Create(restore, &restored).ok()) << PluginLog();
  EXPECT_TRUE(restored.volume().volume_id().starts_with("ceph~")) << restored.volume().volume_id();

  // Paging walks both backends, each volume once.
  std::set<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    csi::v1::ListVolumesRequest r;
    r.set_max_entries(1);
    r.set_starting_token(token);
    csi::v1::ListVolumesResponse page;
    ASSERT_TRUE(Call(&csi::v1::Controller::Stub::ListVolumes, r, &page).ok());
    for (const auto& e : page.entries()) EXPECT_TRUE(seen.insert(e.volume().volume_id()).second);
    token = page.next_token();
    ASSERT_LT(++pages, 1000);
  } while (!token.empty());
  for (const auto& id : {on_rbd, on_local, on_default, restored.volume().volume_id()}) {
    EXPECT_TRUE(seen.contains(id)) << id;
  }

  // Capacity per backend: the pool directory's filesystem vs the Ceph pool.
  csi::v1::GetCapacityRequest capacity;
  csi::v1::GetCapacityResponse local_cap, rbd_cap;
  (*capacity.mutable_parameters())["backend"] = "iscsi";
  ASSERT_TRUE(Call(&csi::v1::Controller::Stub::GetCapacity, capacity, &local_cap).ok());
  (*capacity.mutable_parameters())["backend"] = "ceph";
  ASSERT_TRUE(Call(&csi::v1::Controller::Stub::GetCapacity, capacity, &rbd_cap).ok());
  EXPECT_GT(local_cap.available_capacity(), 0);
  EXPECT_GT(rbd_cap.available_capacity(), 0);
  EXPECT_NE(local_cap.available_capacity(), rbd_cap.available_capacity());

  // Ids of a backend this controller does not have.
  csi::v1::ControllerGetVolumeResponse got;
  EXPECT_CODE(GetVolume("gone~vol-0123456789abcdef", &got), NOT_FOUND);
  EXPECT_TRUE(Delete("gone~vol-0123456789abcdef").ok());

  ASSERT_TRUE(Delete(restored.volume().volume_id()).ok()) << PluginLog();
  ASSERT_TRUE(DeleteSnapshot(snap.snapshot().snapshot_id()).ok()) << PluginLog();
  for (const auto& id : {on_rbd, on_local, on_default}) EXPECT_TRUE(Delete(id).ok()) << id << "\n" << PluginLog();
  volumes_.clear();
  snapshots_.clear();
  StopPlugin();
}

}  // namespace
}  // namespace blockcsi
