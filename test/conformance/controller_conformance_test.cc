// Conformance of our own: the real `blockcsi --mode all --backend local`
// on a real tgtd, driven as a CSI client over its unix socket, one test per
// rule of the Identity and Controller services (codes the CSI spec names,
// idempotency, access modes, the ACLs tgtd ends up enforcing, CHAP secrecy).
// Every case deletes what it made; the fixture's TearDown asserts, before
// it cleans anything, that nothing is left on tgtd (targets, LUNs, ACLs,
// accounts), in the pool (records and images) or on the node (issue #22),
// and each refused call that could create something is checked right after
// the call. Needs root and tgt; skips with the reason otherwise.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <vector>

#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "csi.grpc.pb.h"
#include "integration/controller/tgt_acls.h"
#include "support/csi_requests.h"
#include "support/leak_check.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

using ::blockcsi::testing::PublishRequest;

using namespace std::chrono_literals;
using Mode = csi::v1::VolumeCapability::AccessMode;
using Code = grpc::StatusCode;
constexpr int64_t kMiB = 1 << 20;
constexpr char kChapPassword[] = "Conf0rmance-Secret-77";
constexpr char kChapMutualPassword[] = "Mutual-Conf-Secret-88";

std::string Describe(const grpc::Status& st) {
  return std::to_string(static_cast<int>(st.error_code())) + ": " + st.error_message();
}

class ControllerConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    tgtd_ = testing::TgtdHarness::Start(&error);
    BLOCKCSI_REQUIRE_TGTD(tgtd_, error);
    StartPlugin({});
    if (HasFatalFailure()) return;
    baseline_ = testing::TakeLeakSnapshot(Scope());
    have_baseline_ = true;
  }
  void TearDown() override {
    // The case's own deletes ran; what is new now is a leak of the plugin
    // (or a case that forgot its volume), and it is asserted before the
    // fallback below makes it disappear.
    if (have_baseline_) {
      EXPECT_TRUE(testing::NothingLeftSince(baseline_, Scope(), "the test's own deletes, before the fixture cleans"))
          << PluginLog();
    }
    if (plugin_ && plugin_->running()) CleanUpMade();
    StopPlugin();
  }

  // What the plugin can leave: its tgtd's targets, LUNs, ACLs and accounts,
  // its pool's records and images, and anything on the node under its dir.
  testing::LeakScope Scope() { return plugin_->LeakScopeFor(); }
  testing::LeakSnapshot Snapshot() { return testing::TakeLeakSnapshot(Scope()); }
  // Best effort after a failed case: unpublish from every node the tests use, delete.
  void CleanUpMade() {
    for (const auto& snap : snapshots_) {
      csi::v1::DeleteSnapshotRequest r;
      r.set_snapshot_id(snap);
      csi::v1::DeleteSnapshotResponse resp;
      (void)Call(&csi::v1::Controller::Stub::DeleteSnapshot, r, &resp);
    }
    for (const auto& id : volumes_) {
      for (const char* node : {"n1", "n2", "n3", "n4", "probe-node"}) (void)Unpublish(id, node);
      (void)Delete(id);
    }
  }
  // The case's own cleanup: unpublish from `nodes`, delete; each must succeed.
  void Retire(const std::string& id, std::initializer_list<const char*> nodes = {}) {
    for (const char* node : nodes) EXPECT_TRUE(Unpublish(id, node).ok()) << id << " on " << node;
    grpc::Status st = Delete(id);
    EXPECT_TRUE(st.ok()) << id << ": " << Describe(st);
  }
  void RetireSnapshot(const std::string& id) {
    csi::v1::DeleteSnapshotRequest r;
    r.set_snapshot_id(id);
    csi::v1::DeleteSnapshotResponse resp;
    grpc::Status st = Call(&csi::v1::Controller::Stub::DeleteSnapshot, r, &resp);
    EXPECT_TRUE(st.ok()) << id << ": " << Describe(st);
  }

  void StartPlugin(const std::vector<std::string>& extra) {
    if (!plugin_) plugin_ = std::make_unique<testing::PluginUnderTest>(dir_.path(), tgtd_.get());
    testing::PluginOptions options;
    options.node_id = "n1";
    // The tests change tgtd behind the backend's back.
    options.extra_args = {"--log-level", "debug", "--reconcile-interval", "1h",
                          // The nodes these tests publish to besides n1 (--mode all knows only its own).
                          "--known-node-ids", "n2,n3,n4,probe-node"};
    options.extra_args.insert(options.extra_args.end(), extra.begin(), extra.end());
    std::string error;
    ASSERT_TRUE(plugin_->Start(options, &error)) << "plugin did not come up: " << error;
  }
  void StopPlugin() {
    if (plugin_) plugin_->Stop();
  }
  std::string PluginLog() const { return testing::ReadFileOrEmpty(plugin_->log_path()); }

  template <typename Req, typename Resp, typename Method>
  grpc::Status Call(Method method, const Req& request, Resp* response) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    return (plugin_->controller().*method)(&ctx, request, response);
  }

  csi::v1::CreateVolumeRequest CreateRequest(const std::string& name, int64_t required = 8 * kMiB, int64_t limit = 0) {
    csi::v1::CreateVolumeRequest r;
    r.set_name(name);
    r.mutable_capacity_range()->set_required_bytes(required);
    r.mutable_capacity_range()->set_limit_bytes(limit);
    *r.add_volume_capabilities() = testing::MountCapability();
    return r;
  }
  grpc::Status Create(const csi::v1::CreateVolumeRequest& r, csi::v1::CreateVolumeResponse* resp) {
    grpc::Status st = Call(&csi::v1::Controller::Stub::CreateVolume, r, resp);
    if (st.ok()) Remember(volumes_, resp->volume().volume_id());
    return st;
  }
  grpc::Status CreateSnapshot(const std::string& source, const std::string& name,
                              csi::v1::CreateSnapshotResponse* resp) {
    csi::v1::CreateSnapshotRequest r;
    r.set_source_volume_id(source);
    r.set_name(name);
    grpc::Status st = Call(&csi::v1::Controller::Stub::CreateSnapshot, r, resp);
    if (st.ok()) Remember(snapshots_, resp->snapshot().snapshot_id());
    return st;
  }
  static void Remember(std::vector<std::string>& list, const std::string& id) {
    if (std::find(list.begin(), list.end(), id) == list.end()) list.push_back(id);
  }
  std::string MakeVolume(const std::string& name, std::map<std::string, std::string> params = {}) {
    auto r = CreateRequest(name);
    for (const auto& [k, v] : params) (*r.mutable_parameters())[k] = v;
    csi::v1::CreateVolumeResponse resp;
    grpc::Status st = Create(r, &resp);
    EXPECT_TRUE(st.ok()) << Describe(st);
    return resp.volume().volume_id();
  }
  grpc::Status Delete(const std::string& id) {
    csi::v1::DeleteVolumeRequest r;
    r.set_volume_id(id);
    csi::v1::DeleteVolumeResponse resp;
    return Call(&csi::v1::Controller::Stub::DeleteVolume, r, &resp);
  }
  grpc::Status Publish(const csi::v1::ControllerPublishVolumeRequest& r,
                       csi::v1::ControllerPublishVolumeResponse* resp = nullptr) {
    csi::v1::ControllerPublishVolumeResponse local;
    return Call(&csi::v1::Controller::Stub::ControllerPublishVolume, r, resp ? resp : &local);
  }
  grpc::Status Publish(const std::string& id, const std::string& node,
                       const csi::v1::VolumeCapability& cap = testing::MountCapability(), bool readonly = false) {
    return Publish(PublishRequest(id, node, cap, readonly));
  }
  grpc::Status Unpublish(const std::string& id, const std::string& node) {
    csi::v1::ControllerUnpublishVolumeResponse resp;
    return Call(&csi::v1::Controller::Stub::ControllerUnpublishVolume, testing::UnpublishRequest(id, node), &resp);
  }
  grpc::Status GetVolume(const std::string& id, csi::v1::ControllerGetVolumeResponse* resp) {
    csi::v1::ControllerGetVolumeRequest r;
    r.set_volume_id(id);
    return Call(&csi::v1::Controller::Stub::ControllerGetVolume, r, resp);
  }
  // The target of a volume, from a publish_context obtained on a scratch
  // node (then unpublished): the only place a CSI client learns the IQN.
  std::string TargetOf(const std::string& id) {
    csi::v1::ControllerPublishVolumeResponse resp;
    EXPECT_TRUE(
        Publish(PublishRequest(id, "probe-node", testing::BlockCapability(Mode::MULTI_NODE_READER_ONLY)), &resp).ok());
    EXPECT_TRUE(Unpublish(id, "probe-node").ok());
    return resp.publish_context().at(publish_context::kTargetIqn);
  }
  std::set<std::string> AclOf(const std::string& target_iqn) {
    auto acls = testing::ParseTgtAcls(tgtd_->ShowTargets());
    EXPECT_TRUE(acls.contains(target_iqn)) << "target " << target_iqn << " missing on tgtd";
    return acls[target_iqn];
  }
  static std::set<std::string> Initiators(std::initializer_list<const char*> nodes) {
    std::set<std::string> out;
    for (const char* n : nodes) out.insert(InitiatorIqnForNode(n));
    return out;
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::TgtdHarness> tgtd_;
  std::unique_ptr<testing::PluginUnderTest> plugin_;
  testing::LeakSnapshot baseline_;
  bool have_baseline_ = false;
  std::vector<std::string> volumes_, snapshots_;  // made by the case: the fallback cleanup's list
};

#define EXPECT_CODE(expr, code)                               \
  do {                                                        \
    grpc::Status _st = (expr);                                \
    EXPECT_EQ(_st.error_code(), Code::code) << Describe(_st); \
  } while (0)
#define EXPECT_CODE_NAMING(expr, code, name)                                       \
  do {                                                                             \
    grpc::Status _st = (expr);                                                     \
    EXPECT_EQ(_st.error_code(), Code::code) << Describe(_st);                      \
    EXPECT_NE(_st.error_message().find(name), std::string::npos) << Describe(_st); \
  } while (0)
// A refused call that could have made something: its code, and right after
// it, before anything cleans, nothing new on tgtd, in the pool or the node.
#define EXPECT_REFUSED(expr, code)                                                  \
  do {                                                                              \
    testing::LeakSnapshot _before = Snapshot();                                     \
    EXPECT_CODE(expr, code);                                                        \
    EXPECT_TRUE(testing::NothingLeftSince(_before, Scope(), "the refused " #expr)); \
  } while (0)
#define EXPECT_REFUSED_NAMING(expr, code, name)                                     \
  do {                                                                              \
    testing::LeakSnapshot _before = Snapshot();                                     \
    EXPECT_CODE_NAMING(expr, code, name);                                           \
    EXPECT_TRUE(testing::NothingLeftSince(_before, Scope(), "the refused " #expr)); \
  } while (0)

// ---- Identity -----------------------------------------------------------

TEST_F(ControllerConformanceTest, IdentityNamesTheDriverAdvertisesTheControllerAndIsReady) {
  grpc::ClientContext c1, c2, c3;
  csi::v1::GetPluginInfoResponse info;
  ASSERT_TRUE(plugin_->identity().GetPluginInfo(&c1, {}, &info).ok());
  EXPECT_EQ(info.name(), "blockcsi.io");
  csi::v1::GetPluginCapabilitiesResponse caps;
  ASSERT_TRUE(plugin_->identity().GetPluginCapabilities(&c2, {}, &caps).ok());
  bool controller = false;
  for (const auto& c : caps.capabilities()) {
    controller |= c.service().type() == csi::v1::PluginCapability::Service::CONTROLLER_SERVICE;
  }
  EXPECT_TRUE(controller);
  csi::v1::ProbeResponse probe;
  ASSERT_TRUE(plugin_->identity().Probe(&c3, {}, &probe).ok());
  EXPECT_TRUE(probe.ready().value()) << PluginLog();
}

TEST_F(ControllerConformanceTest, ProbeIsNotReadyWhenTgtdIsGone) {
  tgtd_->Kill9();
  grpc::ClientContext ctx;
  csi::v1::ProbeResponse probe;
  ASSERT_TRUE(plugin_->identity().Probe(&ctx, {}, &probe).ok());
  EXPECT_FALSE(probe.ready().value()) << "the backend's health check must see tgtd gone";
  std::string error;
  ASSERT_TRUE(tgtd_->Restart(&error)) << error;
}

TEST_F(ControllerConformanceTest, ControllerCapabilities) {
  using Rpc = csi::v1::ControllerServiceCapability::RPC;
  csi::v1::ControllerGetCapabilitiesResponse resp;
  ASSERT_TRUE(
      Call(&csi::v1::Controller::Stub::ControllerGetCapabilities, csi::v1::ControllerGetCapabilitiesRequest{}, &resp)
          .ok());
  std::set<int> got;
  for (const auto& c : resp.capabilities()) got.insert(c.rpc().type());
  EXPECT_EQ(got, (std::set<int>{Rpc::CREATE_DELETE_VOLUME, Rpc::PUBLISH_UNPUBLISH_VOLUME, Rpc::LIST_VOLUMES,
                                Rpc::LIST_VOLUMES_PUBLISHED_NODES, Rpc::GET_CAPACITY, Rpc::CREATE_DELETE_SNAPSHOT,
                                Rpc::LIST_SNAPSHOTS, Rpc::CLONE_VOLUME, Rpc::EXPAND_VOLUME, Rpc::PUBLISH_READONLY,
                                Rpc::GET_VOLUME, Rpc::VOLUME_CONDITION, Rpc::SINGLE_NODE_MULTI_WRITER}));
}

// ---- CreateVolume / DeleteVolume ----------------------------------------

TEST_F(ControllerConformanceTest, CreateVolumeCapacityRules) {
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(CreateRequest("cap-round", 5 * kMiB + 1), &resp).ok());
  const int64_t got = resp.volume().capacity_bytes();
  EXPECT_GE(got, 5 * kMiB + 1);
  EXPECT_EQ(got % kMiB, 0) << "rounded to the backend's granularity";
  const std::string id = resp.volume().volume_id();
  EXPECT_REFUSED_NAMING(Create(CreateRequest("cap-limit", 5 * kMiB + 1, 5 * kMiB + 2), &resp), OUT_OF_RANGE,
                        "cap-limit");
  EXPECT_REFUSED(Create(CreateRequest("cap-inverted", 8 * kMiB, 4 * kMiB), &resp), OUT_OF_RANGE);
  EXPECT_REFUSED(Create(CreateRequest("cap-negative", -1), &resp), INVALID_ARGUMENT);
  EXPECT_REFUSED(Create(CreateRequest(""), &resp), INVALID_ARGUMENT);
  auto no_caps = CreateRequest("cap-nocaps");
  no_caps.clear_volume_capabilities();
  EXPECT_REFUSED_NAMING(Create(no_caps, &resp), INVALID_ARGUMENT, "cap-nocaps");
  Retire(id);
}

TEST_F(ControllerConformanceTest, CreateVolumeParametersAndVolumeContext) {
  csi::v1::CreateVolumeResponse resp;
  auto bad = CreateRequest("param-bad");
  (*bad.mutable_parameters())["replicas"] = "3";
  EXPECT_REFUSED_NAMING(Create(bad, &resp), INVALID_ARGUMENT, "replicas");

  auto good = CreateRequest("param-good");
  (*good.mutable_parameters())["csi.storage.k8s.io/fstype"] = "xfs";
  (*good.mutable_parameters())["csi.storage.k8s.io/pvc/name"] = "data";
  (*good.mutable_parameters())["csi.storage.k8s.io/pvc/namespace"] = "default";
  (*good.mutable_parameters())["csi.storage.k8s.io/pv/name"] = "pv-1";
  (*good.mutable_parameters())["mkfsOptions"] = "-K";
  ASSERT_TRUE(Create(good, &resp).ok()) << PluginLog();
  EXPECT_EQ(resp.volume().volume_context().at("fsType"), "xfs");
  EXPECT_EQ(resp.volume().volume_context().at("mkfsOptions"), "-K");

  // ControllerGetVolume rebuilds the same context from the backend alone.
  csi::v1::ControllerGetVolumeResponse got;
  ASSERT_TRUE(GetVolume(resp.volume().volume_id(), &got).ok());
  EXPECT_EQ(got.volume().volume_context().at("fsType"), "xfs");
  // Topology is whatever the backend reports, the same on every read.
  ASSERT_EQ(got.volume().accessible_topology_size(), resp.volume().accessible_topology_size());
  for (int i = 0; i < got.volume().accessible_topology_size(); ++i) {
    EXPECT_EQ(got.volume().accessible_topology(i).segments().size(),
              resp.volume().accessible_topology(i).segments().size());
  }
  Retire(resp.volume().volume_id());
}

TEST_F(ControllerConformanceTest, CreateVolumeIsIdempotentByName) {
  csi::v1::CreateVolumeResponse first, second;
  ASSERT_TRUE(Create(CreateRequest("idem"), &first).ok());
  ASSERT_TRUE(Create(CreateRequest("idem"), &second).ok());
  EXPECT_EQ(first.volume().volume_id(), second.volume().volume_id());
  EXPECT_REFUSED_NAMING(Create(CreateRequest("idem", 64 * kMiB), &second), ALREADY_EXISTS, "idem");
  Retire(first.volume().volume_id());
}

TEST_F(ControllerConformanceTest, CreateVolumeFromSnapshotAndVolume) {
  std::string source = MakeVolume("src");
  csi::v1::CreateSnapshotResponse snap;
  ASSERT_TRUE(CreateSnapshot(source, "src-snap", &snap).ok());

  csi::v1::CreateVolumeResponse resp;
  auto restore = CreateRequest("restored");
  restore.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(snap.snapshot().snapshot_id());
  ASSERT_TRUE(Create(restore, &resp).ok()) << PluginLog();
  EXPECT_EQ(resp.volume().content_source().snapshot().snapshot_id(), snap.snapshot().snapshot_id());
  const std::string restored = resp.volume().volume_id();
  auto clone = CreateRequest("cloned");
  clone.mutable_volume_content_source()->mutable_volume()->set_volume_id(source);
  ASSERT_TRUE(Create(clone, &resp).ok());
  EXPECT_EQ(resp.volume().content_source().volume().volume_id(), source);
  const std::string cloned = resp.volume().volume_id();

  auto missing_snap = CreateRequest("restore-missing");
  missing_snap.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id("snap-0000000000000000");
  EXPECT_REFUSED_NAMING(Create(missing_snap, &resp), NOT_FOUND, "snap-0000000000000000");
  auto missing_vol = CreateRequest("clone-missing");
  missing_vol.mutable_volume_content_source()->mutable_volume()->set_volume_id("no-such-volume");
  EXPECT_REFUSED_NAMING(Create(missing_vol, &resp), NOT_FOUND, "no-such-volume");
  Retire(restored);
  Retire(cloned);
  RetireSnapshot(snap.snapshot().snapshot_id());
  Retire(source);
}

TEST_F(ControllerConformanceTest, DeleteVolumeRules) {
  EXPECT_TRUE(Delete("vol-0000000000000000").ok());
  EXPECT_TRUE(Delete("not-even-our-format").ok());
  EXPECT_CODE(Delete(""), INVALID_ARGUMENT);
  std::string id = MakeVolume("del");
  std::string target = TargetOf(id);
  ASSERT_TRUE(Publish(id, "n1").ok());
  EXPECT_REFUSED_NAMING(Delete(id), FAILED_PRECONDITION, "n1");
  ASSERT_TRUE(Unpublish(id, "n1").ok());
  ASSERT_TRUE(Delete(id).ok());
  EXPECT_FALSE(testing::ParseTgtAcls(tgtd_->ShowTargets()).contains(target)) << "target left on tgtd";
  EXPECT_TRUE(Delete(id).ok());
}

// ---- ControllerPublishVolume / Unpublish --------------------------------

TEST_F(ControllerConformanceTest, PublishGrantsExactlyTheNodeInitiatorAndReturnsTheContext) {
  std::string id = MakeVolume("pub");
  std::string target = TargetOf(id);
  EXPECT_TRUE(AclOf(target).empty()) << "nobody may log in before a publish";
  csi::v1::ControllerPublishVolumeResponse resp;
  ASSERT_TRUE(Publish(PublishRequest(id, "n1"), &resp).ok());
  EXPECT_EQ(AclOf(target), Initiators({"n1"}));
  const auto& ctx = resp.publish_context();
  EXPECT_EQ(ctx.at(publish_context::kPortals), tgtd_->portal());
  EXPECT_EQ(ctx.at(publish_context::kTargetIqn), target);
  EXPECT_FALSE(ctx.at(publish_context::kLun).empty());
  EXPECT_FALSE(ctx.at(publish_context::kSerial).empty());
  EXPECT_FALSE(ctx.at(publish_context::kWwn).empty());
  EXPECT_EQ(ctx.at(publish_context::kChapRequired), "false");
  EXPECT_EQ(ctx.at(publish_context::kReadOnly), "false");
  // The serial in the context is the one tgtd reports for the LUN.
  EXPECT_NE(tgtd_->ShowTargets().find("SCSI SN: " + ctx.at(publish_context::kSerial)), std::string::npos)
      << tgtd_->ShowTargets();

  csi::v1::ControllerPublishVolumeResponse again;
  ASSERT_TRUE(Publish(PublishRequest(id, "n1"), &again).ok());
  using Context = std::map<std::string, std::string>;
  EXPECT_EQ(Context(again.publish_context().begin(), again.publish_context().end()), Context(ctx.begin(), ctx.end()));
  EXPECT_EQ(AclOf(target), Initiators({"n1"}));
  Retire(id, {"n1"});
}

TEST_F(ControllerConformanceTest, PublishAccessModeRules) {
  std::string id = MakeVolume("modes");
  std::string target = TargetOf(id);
  ASSERT_TRUE(Publish(id, "n1").ok());
  EXPECT_REFUSED_NAMING(Publish(id, "n1", testing::BlockCapability()), ALREADY_EXISTS, id);
  EXPECT_REFUSED(Publish(id, "n1", testing::MountCapability(), /*readonly=*/true), ALREADY_EXISTS);
  EXPECT_REFUSED_NAMING(Publish(id, "n2"), FAILED_PRECONDITION, "n1");
  EXPECT_EQ(AclOf(target), Initiators({"n1"}));
  ASSERT_TRUE(Unpublish(id, "n1").ok());

  ASSERT_TRUE(Publish(id, "n1", testing::BlockCapability(Mode::MULTI_NODE_MULTI_WRITER)).ok());
  ASSERT_TRUE(Publish(id, "n2", testing::BlockCapability(Mode::MULTI_NODE_MULTI_WRITER)).ok());
  EXPECT_EQ(AclOf(target), Initiators({"n1", "n2"}));
  EXPECT_REFUSED(Publish(id, "n3", testing::MountCapability("", Mode::MULTI_NODE_MULTI_WRITER)), INVALID_ARGUMENT);
  EXPECT_EQ(AclOf(target), Initiators({"n1", "n2"}));
  Retire(id, {"n1", "n2"});
}

TEST_F(ControllerConformanceTest, PublishReadOnly) {
  std::string id = MakeVolume("ro");
  csi::v1::ControllerPublishVolumeResponse resp;
  ASSERT_TRUE(Publish(PublishRequest(id, "n1", testing::MountCapability(), /*readonly=*/true), &resp).ok());
  EXPECT_EQ(resp.publish_context().at(publish_context::kReadOnly), "true");
  Retire(id, {"n1"});
}

TEST_F(ControllerConformanceTest, PublishArgumentAndExistenceErrors) {
  std::string id = MakeVolume("errs");
  EXPECT_REFUSED_NAMING(Publish("vol-0000000000000000", "n1"), NOT_FOUND, "vol-0000000000000000");
  EXPECT_REFUSED_NAMING(Publish("foreign-volume-id", "n1"), NOT_FOUND, "foreign-volume-id");
  EXPECT_REFUSED_NAMING(Publish(id, "Bad_Node"), INVALID_ARGUMENT, "Bad_Node");
  // A node the plugin cannot know (neither its own nor --known-node-ids):
  // NOT_FOUND, and no ACL for it on the target.
  EXPECT_REFUSED_NAMING(Publish(id, "some-fake-node-id"), NOT_FOUND, "some-fake-node-id");
  EXPECT_EQ(tgtd_->ShowTargets().find(InitiatorIqnForNode("some-fake-node-id")), std::string::npos);
  EXPECT_REFUSED(Publish(id, ""), INVALID_ARGUMENT);
  EXPECT_REFUSED(Publish("", "n1"), INVALID_ARGUMENT);
  auto no_cap = PublishRequest(id, "n1");
  no_cap.clear_volume_capability();
  EXPECT_REFUSED(Publish(no_cap), INVALID_ARGUMENT);
  Retire(id);
}

TEST_F(ControllerConformanceTest, UnpublishIsIdempotentAndRevokes) {
  std::string id = MakeVolume("unpub");
  std::string target = TargetOf(id);
  ASSERT_TRUE(Publish(id, "n1").ok());
  ASSERT_TRUE(Unpublish(id, "n1").ok());
  EXPECT_TRUE(AclOf(target).empty());
  EXPECT_TRUE(Unpublish(id, "n1").ok());
  EXPECT_TRUE(Unpublish(id, "gone-node").ok());
  EXPECT_TRUE(Unpublish("vol-0000000000000000", "n1").ok());
  EXPECT_TRUE(Unpublish("foreign-volume-id", "n1").ok());
  EXPECT_CODE(Unpublish("", "n1"), INVALID_ARGUMENT);
  Retire(id);
}

TEST_F(ControllerConformanceTest, ChapSecretsReachTgtdButNeverTheContextOrTheLog) {
  std::string id = MakeVolume("chap", {{"chap", "true"}});
  auto r = PublishRequest(id, "n1");
  EXPECT_REFUSED_NAMING(Publish(r), INVALID_ARGUMENT, "chap-username");
  (*r.mutable_secrets())["chap-username"] = "conf-user";
  (*r.mutable_secrets())["chap-password"] = kChapPassword;
  (*r.mutable_secrets())["chap-mutual-username"] = "conf-target";
  (*r.mutable_secrets())["chap-mutual-password"] = kChapMutualPassword;
  csi::v1::ControllerPublishVolumeResponse resp;
  grpc::Status st = Publish(r, &resp);
  ASSERT_TRUE(st.ok()) << Describe(st) << PluginLog();
  EXPECT_EQ(resp.publish_context().at(publish_context::kChapRequired), "true");
  for (const auto& [k, v] : resp.publish_context()) {
    EXPECT_EQ(v.find(kChapPassword), std::string::npos) << k;
    EXPECT_EQ(v.find(kChapMutualPassword), std::string::npos) << k;
  }
  std::string shown = tgtd_->Tgtadm({"--op", "show", "--mode", "account"});
  EXPECT_NE(shown.find("conf-user"), std::string::npos) << "CHAP account not on tgtd:\n" << shown;
  ASSERT_TRUE(Unpublish(id, "n1").ok());
  std::string log = PluginLog();
  EXPECT_NE(log.find(id), std::string::npos) << "the plugin log should show the calls";
  EXPECT_EQ(log.find(kChapPassword), std::string::npos) << "CHAP password in the plugin log";
  EXPECT_EQ(log.find(kChapMutualPassword), std::string::npos) << "mutual CHAP password in the plugin log";
  Retire(id);
}

TEST_F(ControllerConformanceTest, NodeMaximumIsResourceExhausted) {
  StopPlugin();
  StartPlugin({"--max-volumes-per-node", "2"});
  std::string a = MakeVolume("max-a"), b = MakeVolume("max-b"), c = MakeVolume("max-c");
  ASSERT_TRUE(Publish(a, "n1").ok());
  ASSERT_TRUE(Publish(b, "n1").ok());
  EXPECT_REFUSED_NAMING(Publish(c, "n1"), RESOURCE_EXHAUSTED, "n1");
  EXPECT_TRUE(Publish(c, "n2").ok());
  Retire(a, {"n1"});
  Retire(b, {"n1"});
  Retire(c, {"n2"});
}

// ---- Validate, List, Capacity, Get, Expand ------------------------------

TEST_F(ControllerConformanceTest, ValidateVolumeCapabilities) {
  std::string id = MakeVolume("validate");
  csi::v1::ValidateVolumeCapabilitiesRequest r;
  r.set_volume_id(id);
  *r.add_volume_capabilities() = testing::MountCapability();
  csi::v1::ValidateVolumeCapabilitiesResponse resp;
  ASSERT_TRUE(Call(&csi::v1::Controller::Stub::ValidateVolumeCapabilities, r, &resp).ok());
  EXPECT_TRUE(resp.has_confirmed());
  *r.mutable_volume_capabilities(0) = testing::MountCapability("", Mode::MULTI_NODE_MULTI_WRITER);
  resp.Clear();
  ASSERT_TRUE(Call(&csi::v1::Controller::Stub::ValidateVolumeCapabilities, r, &resp).ok());
  EXPECT_FALSE(resp.has_confirmed());
  r.set_volume_id("vol-0000000000000000");
  EXPECT_CODE(Call(&csi::v1::Controller::Stub::ValidateVolumeCapabilities, r, &resp), NOT_FOUND);
  r.clear_volume_capabilities();
  EXPECT_CODE(Call(&csi::v1::Controller::Stub::ValidateVolumeCapabilities, r, &resp), INVALID_ARGUMENT);
  Retire(id);
}

TEST_F(ControllerConformanceTest, ListVolumesPagesWithPublishedNodes) {
  std::set<std::string> made;
  for (int i = 0; i < 5; ++i) made.insert(MakeVolume("list-" + std::to_string(i)));
  std::string published = *made.begin();
  ASSERT_TRUE(Publish(published, "n4").ok());
  std::set<std::string> seen;
  auto pages = testing::ListVolumePages(
      [this](const auto& r, auto* resp) { return Call(&csi::v1::Controller::Stub::ListVolumes, r, resp); }, 2, 10);
  for (const auto& resp : pages) {
    for (const auto& e : resp.entries()) {
      seen.insert(e.volume().volume_id());
      EXPECT_TRUE(e.status().has_volume_condition());
      if (e.volume().volume_id() == published) {
        ASSERT_EQ(e.status().published_node_ids_size(), 1);
        EXPECT_EQ(e.status().published_node_ids(0), "n4");
      }
    }
  }
  EXPECT_EQ(seen, made);
  EXPECT_EQ(pages.size(), 3u);
  csi::v1::ListVolumesRequest bad;
  bad.set_starting_token("no-such-token");
  csi::v1::ListVolumesResponse resp;
  EXPECT_CODE(Call(&csi::v1::Controller::Stub::ListVolumes, bad, &resp), ABORTED);
  Retire(published, {"n4"});
  for (const auto& id : made) {
    if (id != published) Retire(id);
  }
}

TEST_F(ControllerConformanceTest, GetCapacity) {
  csi::v1::GetCapacityRequest r;
  *r.add_volume_capabilities() = testing::MountCapability();
  csi::v1::GetCapacityResponse resp;
  ASSERT_TRUE(Call(&csi::v1::Controller::Stub::GetCapacity, r, &resp).ok());
  EXPECT_GT(resp.available_capacity(), 0);
  (*r.mutable_parameters())["bogus"] = "1";
  EXPECT_CODE_NAMING(Call(&csi::v1::Controller::Stub::GetCapacity, r, &resp), INVALID_ARGUMENT, "bogus");
}

TEST_F(ControllerConformanceTest, ControllerGetVolumeReportsNodesAndCondition) {
  std::string id = MakeVolume("get");
  std::string target = TargetOf(id);
  ASSERT_TRUE(Publish(id, "n1").ok());
  csi::v1::ControllerGetVolumeResponse resp;
  ASSERT_TRUE(GetVolume(id, &resp).ok());
  ASSERT_EQ(resp.status().published_node_ids_size(), 1);
  EXPECT_EQ(resp.status().published_node_ids(0), "n1");
  EXPECT_FALSE(resp.status().volume_condition().abnormal()) << resp.status().volume_condition().message();
  EXPECT_CODE_NAMING(GetVolume("vol-0000000000000000", &resp), NOT_FOUND, "vol-0000000000000000");

  // tgtd restarts and forgets the export: the backend's check puts it back
  // (with the grant) and says so; the volume stays usable.
  tgtd_->Kill9();
  std::string error;
  ASSERT_TRUE(tgtd_->Restart(&error)) << error;
  resp.Clear();
  ASSERT_TRUE(GetVolume(id, &resp).ok());
  EXPECT_FALSE(resp.status().volume_condition().abnormal()) << resp.status().volume_condition().message();
  EXPECT_NE(resp.status().volume_condition().message().find("repaired"), std::string::npos)
      << resp.status().volume_condition().message();
  EXPECT_EQ(AclOf(target), Initiators({"n1"}));

  // The image disappears from the pool: that cannot be repaired.
  ASSERT_EQ(::unlink(dir_.Join("pool/images/" + id + ".img").c_str()), 0);
  resp.Clear();
  ASSERT_TRUE(GetVolume(id, &resp).ok());
  EXPECT_TRUE(resp.status().volume_condition().abnormal());
  EXPECT_NE(resp.status().volume_condition().message().find(id), std::string::npos)
      << resp.status().volume_condition().message();
  // A volume whose image is gone still goes whole: grant, target, record.
  Retire(id, {"n1"});
}

TEST_F(ControllerConformanceTest, ExpandVolume) {
  std::string id = MakeVolume("grow");
  const auto cap = testing::MountCapability();
  auto r = testing::ExpandRequest(id, 32 * kMiB, &cap);
  csi::v1::ControllerExpandVolumeResponse resp;
  ASSERT_TRUE(Call(&csi::v1::Controller::Stub::ControllerExpandVolume, r, &resp).ok()) << PluginLog();
  EXPECT_GE(resp.capacity_bytes(), 32 * kMiB);
  EXPECT_TRUE(resp.node_expansion_required());
  csi::v1::ControllerGetVolumeResponse got;
  ASSERT_TRUE(GetVolume(id, &got).ok());
  EXPECT_EQ(got.volume().capacity_bytes(), resp.capacity_bytes());
  EXPECT_NE(tgtd_->ShowTargets().find("Size: 34 MB"), std::string::npos)
      << "tgtd's LUN was not refreshed (32 MiB = 34 MB):\n"
      << tgtd_->ShowTargets();

  r.mutable_capacity_range()->set_required_bytes(40 * kMiB);
  *r.mutable_volume_capability() = testing::BlockCapability();
  ASSERT_TRUE(Call(&csi::v1::Controller::Stub::ControllerExpandVolume, r, &resp).ok());
  EXPECT_FALSE(resp.node_expansion_required());

  r.mutable_capacity_range()->set_required_bytes(4 * kMiB);
  r.mutable_capacity_range()->set_limit_bytes(8 * kMiB);
  EXPECT_REFUSED_NAMING(Call(&csi::v1::Controller::Stub::ControllerExpandVolume, r, &resp), OUT_OF_RANGE, id);
  r.set_volume_id("vol-0000000000000000");
  r.mutable_capacity_range()->set_limit_bytes(0);
  EXPECT_REFUSED(Call(&csi::v1::Controller::Stub::ControllerExpandVolume, r, &resp), NOT_FOUND);
  Retire(id);
}

// ---- Snapshots ----------------------------------------------------------

TEST_F(ControllerConformanceTest, SnapshotRules) {
  std::string a = MakeVolume("snap-src-a"), b = MakeVolume("snap-src-b");
  auto create = [&](const std::string& source, const std::string& name, csi::v1::CreateSnapshotResponse* resp) {
    return CreateSnapshot(source, name, resp);
  };
  csi::v1::CreateSnapshotResponse s1, s1_again, s2, s3;
  ASSERT_TRUE(create(a, "s1", &s1).ok()) << PluginLog();
  EXPECT_TRUE(s1.snapshot().ready_to_use());
  EXPECT_GT(s1.snapshot().creation_time().seconds(), 0);
  EXPECT_EQ(s1.snapshot().size_bytes(), 8 * kMiB);
  ASSERT_TRUE(create(a, "s1", &s1_again).ok());
  EXPECT_EQ(s1.snapshot().snapshot_id(), s1_again.snapshot().snapshot_id());
  EXPECT_REFUSED_NAMING(create(b, "s1", &s2), ALREADY_EXISTS, "s1");
  EXPECT_REFUSED_NAMING(create("vol-0000000000000000", "s-missing", &s2), NOT_FOUND, "vol-0000000000000000");
  ASSERT_TRUE(create(a, "s2", &s2).ok());
  ASSERT_TRUE(create(b, "s3", &s3).ok());

  auto list = [&](const std::string& id, const std::string& source, int max, const std::string& token,
                  csi::v1::ListSnapshotsResponse* resp) {
    csi::v1::ListSnapshotsRequest r;
    r.set_snapshot_id(id);
    r.set_source_volume_id(source);
    r.set_max_entries(max);
    r.set_starting_token(token);
    return Call(&csi::v1::Controller::Stub::ListSnapshots, r, resp);
  };
  csi::v1::ListSnapshotsResponse resp;
  ASSERT_TRUE(list(s3.snapshot().snapshot_id(), "", 0, "", &resp).ok());
  ASSERT_EQ(resp.entries_size(), 1);
  EXPECT_EQ(resp.entries(0).snapshot().source_volume_id(), b);
  resp.Clear();
  ASSERT_TRUE(list("", a, 0, "", &resp).ok());
  EXPECT_EQ(resp.entries_size(), 2);
  resp.Clear();
  ASSERT_TRUE(list("", "", 1, "", &resp).ok());
  EXPECT_EQ(resp.entries_size(), 1);
  EXPECT_FALSE(resp.next_token().empty());
  resp.Clear();
  ASSERT_TRUE(list("snap-0000000000000000", "", 0, "", &resp).ok());
  EXPECT_EQ(resp.entries_size(), 0);
  EXPECT_CODE(list("", "", 0, "bad-token", &resp), ABORTED);

  csi::v1::DeleteSnapshotRequest d;
  d.set_snapshot_id(s2.snapshot().snapshot_id());
  csi::v1::DeleteSnapshotResponse dresp;
  EXPECT_TRUE(Call(&csi::v1::Controller::Stub::DeleteSnapshot, d, &dresp).ok());
  EXPECT_TRUE(Call(&csi::v1::Controller::Stub::DeleteSnapshot, d, &dresp).ok());
  d.set_snapshot_id("snap-0000000000000000");
  EXPECT_TRUE(Call(&csi::v1::Controller::Stub::DeleteSnapshot, d, &dresp).ok());
  RetireSnapshot(s1.snapshot().snapshot_id());
  RetireSnapshot(s3.snapshot().snapshot_id());
  Retire(a);
  Retire(b);
}

}  // namespace
}  // namespace blockcsi
