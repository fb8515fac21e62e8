// Fencing a node on the local backend over a real tgtd, with libiscsi
// logging in as the nodes: its sessions end and its writes fail at once,
// it cannot log in again, no grant and no reconcile lets it back in, and the
// fence survives a restart of the backend (and of tgtd). The same through
// the controller (ControllerPublish/Unpublish) and the agent (remote).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "agent/agent_service.h"
#include "backend/local/local_backend.h"
#include "backend/local/tgtadm_parser.h"
#include "backend/remote/remote_backend.h"
#include "controller/controller_service.h"
#include "controller/fencing.h"
#include "integration/target/iscsi_client.h"
#include "support/test_util.h"
#include "support/tgtd_backend.h"
#include "support/tgtd_harness.h"
#include "support/tgtd_test.h"

namespace blockcsi {
namespace {

using testing::IscsiClient;
using testing::IscsiLogin;
using testing::TempDir;

constexpr uint64_t kMiB = 1024 * 1024;
constexpr char kPrefix[] = "iqn.2026-11.io.blockcsi";
constexpr char kNodeA[] = "iqn.2026-11.io.blockcsi:node:node-a";
constexpr char kNodeB[] = "iqn.2026-11.io.blockcsi:node:node-b";

CreateVolumeSpec Spec(const std::string& name, uint64_t size) {
  CreateVolumeSpec spec;
  spec.name = name;
  spec.size_bytes = size;
  return spec;
}

class FenceTest : public testing::TgtdTest {
 protected:
  void SetUp() override {
    TgtdTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    backend_ = Open();
    ASSERT_NE(backend_, nullptr);
  }

  std::shared_ptr<LocalBackend> Open(FaultHook hook = nullptr) {
    LocalBackendOptions options;
    options.iqn_prefix = kPrefix;
    options.reconcile_interval = std::chrono::milliseconds(0);
    options.fault_hook = std::move(hook);
    auto backend = testing::OpenBackendOnTgtd(*tgtd_, pool_.path(), options, testing::TgtdDriven::kBySocket);
    EXPECT_TRUE(backend.ok()) << backend.status().ToString();
    return backend.ok() ? *backend : nullptr;
  }

  std::optional<TgtTarget> LiveTarget(const std::string& iqn) {
    auto parsed = ParseTgtadmTargets(tgtd_->ShowTargets());
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    if (!parsed.ok()) return std::nullopt;
    for (auto& t : *parsed) {
      if (t.iqn == iqn) return t;
    }
    return std::nullopt;
  }

  IscsiLogin LoginAs(const VolumeRecord& v, const std::string& initiator) {
    return {tgtd_->portal(), v.target_iqn, initiator, "", "", "", ""};
  }

  // A volume granted to node-a with a session of node-a that has written.
  std::unique_ptr<IscsiClient> GrantedAndWriting(const std::string& name, VolumeRecord* volume) {
    auto v = backend_->CreateVolume(Spec(name, 8 * kMiB));
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    if (!v.ok()) return nullptr;
    *volume = *v;
    EXPECT_TRUE(backend_->GrantAccess(v->id, {kNodeA, "node-a", false, "SINGLE_NODE_WRITER/mount", {}}).ok());
    std::string error;
    auto session = IscsiClient::Login(LoginAs(*v, kNodeA), &error);
    EXPECT_NE(session, nullptr) << error;
    if (session) {
      EXPECT_TRUE(session->Write(0, std::string(512, 'a'), &error)) << error;
    }
    return session;
  }

  TempDir pool_;
  std::shared_ptr<LocalBackend> backend_;
};

TEST_F(FenceTest, FenceEndsSessionsRefusesLoginsAndGrantsAndRecordsWhatItHeld) {
  VolumeRecord v1, v2, other;
  auto s1 = GrantedAndWriting("pvc-f1", &v1);
  auto s2 = GrantedAndWriting("pvc-f2", &v2);
  ASSERT_NE(s1, nullptr);
  ASSERT_NE(s2, nullptr);
  // A volume of another node is left alone.
  auto o = backend_->CreateVolume(Spec("pvc-other", 8 * kMiB));
  ASSERT_TRUE(o.ok());
  other = *o;
  ASSERT_TRUE(backend_->GrantAccess(other.id, {kNodeB, "node-b", false, "SINGLE_NODE_WRITER/mount", {}}).ok());
  std::string error;
  auto b = IscsiClient::Login(LoginAs(other, kNodeB), &error);
  ASSERT_NE(b, nullptr) << error;

  auto answers = backend_->FenceNode("node-a", kNodeA);
  ASSERT_EQ(answers.size(), 1u);
  ASSERT_TRUE(answers[0].status.ok()) << answers[0].status.ToString();
  ASSERT_EQ(answers[0].fences.size(), 1u);
  const FenceRecord& record = answers[0].fences[0];
  EXPECT_EQ(record.node_id, "node-a");
  EXPECT_GT(record.since_unix_seconds, 0);
  std::vector<std::string> held;
  for (const auto& h : record.held) held.push_back(h.volume_id);
  std::sort(held.begin(), held.end());
  std::vector<std::string> want{v1.id, v2.id};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(held, want);

  // Its sessions are gone and its writes fail; it cannot come back.
  EXPECT_FALSE(s1->Write(1, std::string(512, 'b'), &error)) << "a fenced session could still write";
  EXPECT_FALSE(s2->Write(1, std::string(512, 'b'), &error)) << "a fenced session could still write";
  EXPECT_EQ(IscsiClient::Login(LoginAs(v1, kNodeA), &error), nullptr) << "login after the fence accepted";
  for (const auto& v : {v1, v2}) {
    auto live = LiveTarget(v.target_iqn);
    ASSERT_TRUE(live.has_value());
    EXPECT_TRUE(live->acls.empty()) << v.id;
    EXPECT_TRUE(live->sessions.empty()) << v.id;
    auto now = backend_->GetVolume(v.id);
    ASSERT_TRUE(now.ok());
    EXPECT_TRUE(now->grants.empty()) << v.id;
  }
  // The other node keeps writing.
  EXPECT_TRUE(b->Write(2, std::string(512, 'c'), &error)) << error;
  // A grant to the fenced node is refused, naming the fence.
  auto regrant = backend_->GrantAccess(v1.id, {kNodeA, "node-a", false, "SINGLE_NODE_WRITER/mount", {}});
  EXPECT_EQ(regrant.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(regrant.status().message().find("node \"node-a\" is fenced since"), std::string::npos)
      << regrant.status().ToString();
  // Other nodes may take the fenced node's volumes.
  EXPECT_TRUE(backend_->GrantAccess(v1.id, {kNodeB, "node-b", false, "SINGLE_NODE_WRITER/mount", {}}).ok());
  // Fencing again changes nothing and keeps the first time and what was held.
  auto again = backend_->FenceNode("node-a", kNodeA);
  ASSERT_TRUE(again[0].status.ok());
  EXPECT_EQ(again[0].fences[0].since_unix_seconds, record.since_unix_seconds);
  EXPECT_EQ(again[0].fences[0].held.size(), 2u);
}

TEST_F(FenceTest, FenceSurvivesARestartAndReconcileNeverRestoresTheAcl) {
  VolumeRecord v;
  auto session = GrantedAndWriting("pvc-restart", &v);
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(backend_->FenceNode("node-a", kNodeA)[0].status.ok());
  backend_.reset();
  // tgtd loses everything too: the reconcile of the reopened pool rebuilds.
  tgtd_->Kill9();
  std::string restart_error;
  ASSERT_TRUE(tgtd_->Restart(&restart_error)) << restart_error;
  backend_ = Open();
  ASSERT_NE(backend_, nullptr);
  auto reconciled = backend_->ReconcileNow();
  ASSERT_TRUE(reconciled.ok()) << reconciled.status().ToString();
  auto live = LiveTarget(v.target_iqn);
  ASSERT_TRUE(live.has_value());
  EXPECT_TRUE(live->acls.empty());
  auto fences = backend_->ListFences();
  ASSERT_EQ(fences.size(), 1u);
  ASSERT_EQ(fences[0].fences.size(), 1u);
  EXPECT_EQ(fences[0].fences[0].node_id, "node-a");
  EXPECT_EQ(backend_->GrantAccess(v.id, {kNodeA, "node-a", false, "SINGLE_NODE_WRITER/mount", {}}).status().code(),
            StatusCode::kFailedPrecondition);
  // Unfenced, the node may be published again (by the CO).
  ASSERT_TRUE(backend_->UnfenceNode("node-a")[0].status.ok());
  EXPECT_TRUE(backend_->ListFences()[0].fences.empty());
  EXPECT_TRUE(backend_->GrantAccess(v.id, {kNodeA, "node-a", false, "SINGLE_NODE_WRITER/mount", {}}).ok());
  std::string error;
  EXPECT_NE(IscsiClient::Login(LoginAs(v, kNodeA), &error), nullptr) << error;
}

TEST_F(FenceTest, AGrantACrashLeftInTheRecordNeverReachesTheAcl) {
  VolumeRecord v;
  auto session = GrantedAndWriting("pvc-crash", &v);
  ASSERT_NE(session, nullptr);
  // The fence is recorded, then the process dies before it revokes anything.
  backend_.reset();
  auto faulty = Open(
      [](std::string_view s) { return s == "controller.fence.after-record" ? Aborted("injected crash") : OkStatus(); });
  ASSERT_NE(faulty, nullptr);
  EXPECT_EQ(faulty->FenceNode("node-a", kNodeA)[0].status.code(), StatusCode::kAborted);
  faulty.reset();
  backend_ = Open();  // the restart: one reconcile pass from the records
  ASSERT_NE(backend_, nullptr);
  auto record = backend_->GetVolume(v.id);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->grants.size(), 1u) << "the crash left the grant in the record";
  auto live = LiveTarget(v.target_iqn);
  ASSERT_TRUE(live.has_value());
  EXPECT_TRUE(live->acls.empty()) << "reconcile put a fenced node back in an ACL";
  std::string error;
  EXPECT_EQ(IscsiClient::Login(LoginAs(v, kNodeA), &error), nullptr);
  // The retried fence completes: grant gone, held recorded.
  auto answers = backend_->FenceNode("node-a", kNodeA);
  ASSERT_TRUE(answers[0].status.ok()) << answers[0].status.ToString();
  ASSERT_EQ(answers[0].fences[0].held.size(), 1u);
  EXPECT_EQ(answers[0].fences[0].held[0].volume_id, v.id);
  EXPECT_TRUE(backend_->GetVolume(v.id)->grants.empty());
}

// The controller's side: ControllerPublish to the fenced node is refused
// naming the fence, ControllerUnpublish from it is OK at once, and the fence
// is lifted only after the node's cleanup report (or by force).
TEST_F(FenceTest, ControllerRefusesPublishToAFencedNodeAndUnfencesOnlyAfterItsReport) {
  auto fencer = std::make_shared<NodeFencer>(backend_);
  ControllerOptions options;
  options.fencer = fencer;
  ControllerService controller(backend_, options);
  auto v = backend_->CreateVolume(Spec("pvc-ctl", 8 * kMiB));
  ASSERT_TRUE(v.ok());
  auto publish = [&](const std::string& node) {
    csi::v1::ControllerPublishVolumeRequest request;
    request.set_volume_id(v->id);
    request.set_node_id(node);
    request.mutable_volume_capability()->mutable_mount()->set_fs_type("ext4");
    request.mutable_volume_capability()->mutable_access_mode()->set_mode(
        csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    csi::v1::ControllerPublishVolumeResponse response;
    grpc::ServerContext ctx;
    return controller.ControllerPublishVolume(&ctx, &request, &response);
  };
  auto unpublish = [&](const std::string& node) {
    csi::v1::ControllerUnpublishVolumeRequest request;
    request.set_volume_id(v->id);
    request.set_node_id(node);
    csi::v1::ControllerUnpublishVolumeResponse response;
    grpc::ServerContext ctx;
    return controller.ControllerUnpublishVolume(&ctx, &request, &response);
  };
  ASSERT_TRUE(publish("node-a").ok());
  std::string error;
  auto session = IscsiClient::Login(LoginAs(*v, kNodeA), &error);
  ASSERT_NE(session, nullptr) << error;

  auto fence = fencer->Fence("node-a");
  ASSERT_TRUE(fence.ok());
  EXPECT_TRUE(fence->complete());
  ASSERT_EQ(fence->held.size(), 1u);
  EXPECT_FALSE(session->Write(3, std::string(512, 'x'), &error));

  grpc::Status refused = publish("node-a");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("is fenced since " + fence->id()), std::string::npos)
      << refused.error_message();
  EXPECT_TRUE(unpublish("node-a").ok());
  // Another node takes the volume over.
  ASSERT_TRUE(publish("node-b").ok());

  EXPECT_EQ(fencer->Unfence("node-a", false).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fencer->ReportCleanedUp("node-a", "1970-01-01T00:00:01Z")) << "a report for another fence counted";
  EXPECT_EQ(fencer->Unfence("node-a", false).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fencer->ReportCleanedUp("node-a", fence->id()));
  ASSERT_TRUE(fencer->Unfence("node-a", false).ok());
  EXPECT_FALSE(fencer->Get("node-a").has_value());
  EXPECT_TRUE(backend_->ListFences()[0].fences.empty());
  ASSERT_TRUE(unpublish("node-b").ok());
  EXPECT_TRUE(publish("node-a").ok());
}

TEST_F(FenceTest, ARestartedControllerCompletesAFenceFromTheHostsRecords) {
  VolumeRecord v;
  auto session = GrantedAndWriting("pvc-load", &v);
  ASSERT_NE(session, nullptr);
  // What a controller killed mid-fence leaves: the host's record, with the
  // grant not revoked yet.
  backend_.reset();
  auto faulty = Open(
      [](std::string_view s) { return s == "controller.fence.after-record" ? Aborted("injected crash") : OkStatus(); });
  ASSERT_NE(faulty, nullptr);
  (void)faulty->FenceNode("node-a", kNodeA);
  faulty.reset();
  backend_ = Open();
  ASSERT_NE(backend_, nullptr);
  auto fencer = std::make_shared<NodeFencer>(backend_);
  EXPECT_TRUE(fencer->Load().empty());
  auto fence = fencer->Get("node-a");
  ASSERT_TRUE(fence.has_value());
  EXPECT_TRUE(fence->complete());
  ASSERT_EQ(fence->held.size(), 1u);
  EXPECT_TRUE(backend_->GetVolume(v.id)->grants.empty());
  std::string error;
  EXPECT_FALSE(session->Write(4, std::string(512, 'y'), &error)) << "the old session survived the restart";
}

// Through the agent: the controller's remote backend fences on the storage
// host, and the record lives there.
TEST_F(FenceTest, TheAgentFencesOnItsHostAndKeepsTheRecord) {
  TempDir sockets;
  const std::string socket = sockets.Join("agent.sock");
  TargetAgentService service(backend_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  RemoteBackendOptions remote_options;
  remote_options.target = "unix://" + socket;
  auto remote = MakeRemoteBackend(remote_options);
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  VolumeRecord v;
  auto session = GrantedAndWriting("pvc-agent", &v);
  ASSERT_NE(session, nullptr);
  auto answers = (*remote)->FenceNode("node-a", kNodeA);
  ASSERT_EQ(answers.size(), 1u);
  ASSERT_TRUE(answers[0].status.ok()) << answers[0].status.ToString();
  ASSERT_EQ(answers[0].fences.size(), 1u);
  ASSERT_EQ(answers[0].fences[0].held.size(), 1u);
  EXPECT_EQ(answers[0].fences[0].held[0].volume_id, v.id);
  std::string error;
  EXPECT_FALSE(session->Write(5, std::string(512, 'z'), &error));
  auto listed = (*remote)->ListFences();
  ASSERT_TRUE(listed[0].status.ok());
  ASSERT_EQ(listed[0].fences.size(), 1u);
  EXPECT_EQ((*remote)->GrantAccess(v.id, {kNodeA, "node-a", false, "SINGLE_NODE_WRITER/mount", {}}).status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*remote)->UnfenceNode("node-a")[0].status.ok());
  EXPECT_TRUE(backend_->ListFences()[0].fences.empty());
  server->Shutdown();
}

}  // namespace
}  // namespace blockcsi
