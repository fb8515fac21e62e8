// The VolumeAttachment flow as the external-attacher plays it, against the
// controller service over gRPC, the real local backend and a real tgtd:
// one VolumeAttachment per volume×node, ControllerPublish retried on
// ABORTED/UNAVAILABLE, a pod moving between nodes, a node leaving the
// cluster. After every step the ACLs tgtd enforces must be exactly the
// attached VolumeAttachments. Each case deletes what it made; TearDown
// asserts, before it cleans, that nothing is left on tgtd or in the pool,
// and a refused call is checked right after it (issue #22). Needs root and
// tgt (skips otherwise).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "backend/backend_factory.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "controller/controller_service.h"
#include "csi.grpc.pb.h"
#include "integration/controller/tgt_acls.h"
#include "support/csi_capabilities.h"
#include "support/leak_check.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;
using Mode = csi::v1::VolumeCapability::AccessMode;

// What the external-attacher keeps: VolumeAttachment objects, each
// attached or not, and the publish_context it copied into the status.
class Attacher {
 public:
  explicit Attacher(csi::v1::Controller::Stub* stub) : stub_(stub) {}

  // A VolumeAttachment volume→node is created: publish, retrying the
  // transient codes as the attacher's workqueue does. Returns the final code.
  grpc::Status Attach(const std::string& volume, const std::string& node, const csi::v1::VolumeCapability& cap) {
    attachments_.emplace(std::pair{volume, node}, false);
    csi::v1::ControllerPublishVolumeRequest r;
    r.set_volume_id(volume);
    r.set_node_id(node);
    *r.mutable_volume_capability() = cap;
    csi::v1::ControllerPublishVolumeResponse resp;
    grpc::Status st = RetryTransient(500, [&](grpc::ClientContext* ctx) {
      grpc::Status s = stub_->ControllerPublishVolume(ctx, r, &resp);
      ++publish_attempts_;
      if (s.error_code() == grpc::StatusCode::ABORTED) ++aborted_retries_;
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE) ++unavailable_retries_;
      return s;
    });
    if (st.ok()) {
      attachments_[{volume, node}] = true;
      metadata_[{volume, node}] = {resp.publish_context().begin(), resp.publish_context().end()};
    }
    return st;
  }

  // The VolumeAttachment is deleted: unpublish (retrying transient codes);
  // the object goes away only once that succeeded.
  grpc::Status Detach(const std::string& volume, const std::string& node) {
    csi::v1::ControllerUnpublishVolumeRequest r;
    r.set_volume_id(volume);
    r.set_node_id(node);
    grpc::Status st = RetryTransient(50, [&](grpc::ClientContext* ctx) {
      csi::v1::ControllerUnpublishVolumeResponse resp;
      return stub_->ControllerUnpublishVolume(ctx, r, &resp);
    });
    if (st.ok()) {
      attachments_.erase({volume, node});
      metadata_.erase({volume, node});
    }
    return st;
  }

  // Initiators that must be in `volume`'s ACL: the attached attachments.
  std::set<std::string> ExpectedInitiators(const std::string& volume) const {
    std::set<std::string> out;
    for (const auto& [key, attached] : attachments_) {
      if (key.first == volume && attached) out.insert(InitiatorIqnForNode(key.second));
    }
    return out;
  }
  const std::map<std::string, std::string>& Metadata(const std::string& volume, const std::string& node) {
    return metadata_.at({volume, node});
  }
  int aborted_retries() const { return aborted_retries_; }
  int unavailable_retries() const { return unavailable_retries_; }
  int publish_attempts() const { return publish_attempts_; }

 private:
  // The workqueue's retries: `call` (a fresh 30 s deadline each time) again
  // 20 ms later while it answers ABORTED or UNAVAILABLE, at most `attempts`
  // times; the last answer.
  template <typename Call>
  static grpc::Status RetryTransient(int attempts, Call call) {
    grpc::Status st;
    for (int attempt = 0; attempt < attempts; ++attempt) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 30s);
      st = call(&ctx);
      if (st.error_code() != grpc::StatusCode::ABORTED && st.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      std::this_thread::sleep_for(20ms);
    }
    return st;
  }

  csi::v1::Controller::Stub* stub_;
  std::map<std::pair<std::string, std::string>, bool> attachments_;
  std::map<std::pair<std::string, std::string>, std::map<std::string, std::string>> metadata_;
  int aborted_retries_ = 0;
  int unavailable_retries_ = 0;
  std::atomic<int> publish_attempts_{0};
};

class VolumeAttachmentFlowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    tgtd_ = testing::TgtdHarness::Start(&error);
    BLOCKCSI_REQUIRE_TGTD(tgtd_, error);
    BackendOptions options;
    options.kind = "local";
    options.pool_dir = dir_.Join("pool");
    options.tgt_control_port = tgtd_->control_port();
    options.portals = {tgtd_->portal()};
    auto backend = MakeBackend(options, MachineHost());
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = *backend;
    service_ = std::make_unique<ControllerService>(backend_, ControllerOptions{});
    socket_ = dir_.Join("controller.sock");
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = csi::v1::Controller::NewStub(grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));
    baseline_ = testing::TakeLeakSnapshot(Scope());
    have_baseline_ = true;
  }
  void TearDown() override {
    // Asserted before the fallback below removes what a failed case left.
    if (have_baseline_) {
      EXPECT_TRUE(testing::NothingLeftSince(baseline_, Scope(), "the test's own deletes, before the fixture cleans"));
    }
    if (backend_) {
      for (const auto& id : made_) {
        auto record = backend_->GetVolume(id);
        if (record.ok()) {
          for (const auto& g : record->grants) (void)backend_->RevokeAccess(id, g.initiator_iqn);
        }
        (void)backend_->DeleteVolume(id);
      }
    }
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 5s);
    server_.reset();
    service_.reset();
    backend_.reset();  // stops the backend's reconcile loop before tgtd goes
    tgtd_.reset();
  }

  // What the controller can leave: tgtd's targets, LUNs, ACLs and
  // accounts, and the pool's records and images.
  testing::LeakScope Scope() const {
    testing::LeakScope scope;
    scope.pool_dir = dir_.Join("pool");
    scope.tgtd = tgtd_.get();
    return scope;
  }
  grpc::Status DeleteVolume(const std::string& volume) {
    grpc::ClientContext ctx;
    csi::v1::DeleteVolumeRequest r;
    r.set_volume_id(volume);
    csi::v1::DeleteVolumeResponse resp;
    return stub_->DeleteVolume(&ctx, r, &resp);
  }

  std::string CreateVolume(const std::string& name) {
    grpc::ClientContext ctx;
    csi::v1::CreateVolumeRequest r;
    r.set_name(name);
    r.mutable_capacity_range()->set_required_bytes(8 << 20);
    *r.add_volume_capabilities() = testing::MountCapability("ext4", Mode::SINGLE_NODE_WRITER);
    csi::v1::CreateVolumeResponse resp;
    grpc::Status st = stub_->CreateVolume(&ctx, r, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    if (st.ok()) made_.push_back(resp.volume().volume_id());
    return resp.volume().volume_id();
  }
  std::string TargetOf(const std::string& volume) {
    auto record = backend_->GetVolume(volume);
    EXPECT_TRUE(record.ok()) << record.status().ToString();
    return record.ok() ? record->target_iqn : "";
  }
  // The ACL tgtd enforces for each volume equals the attached
  // VolumeAttachments, nothing more and nothing less.
  void ExpectAclsMatch(const Attacher& attacher, const std::vector<std::string>& volumes, const std::string& step) {
    auto acls = testing::ParseTgtAcls(tgtd_->ShowTargets());
    for (const auto& volume : volumes) {
      std::string target = TargetOf(volume);
      ASSERT_TRUE(acls.contains(target)) << step << ": target " << target << " of " << volume << " not on tgtd";
      EXPECT_EQ(acls[target], attacher.ExpectedInitiators(volume)) << step << ": volume " << volume;
    }
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::TgtdHarness> tgtd_;
  std::shared_ptr<VolumeBackend> backend_;
  std::unique_ptr<ControllerService> service_;
  std::string socket_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<csi::v1::Controller::Stub> stub_;
  testing::LeakSnapshot baseline_;
  bool have_baseline_ = false;
  std::vector<std::string> made_;  // the fallback cleanup's list
};

TEST_F(VolumeAttachmentFlowTest, PodMovesBetweenNodesAndANodeLeaves) {
  const auto rwo = testing::MountCapability("ext4", Mode::SINGLE_NODE_WRITER);
  Attacher attacher(stub_.get());
  std::string a = CreateVolume("pvc-flow-a");
  std::string b = CreateVolume("pvc-flow-b");
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  std::vector<std::string> volumes{a, b};
  ExpectAclsMatch(attacher, volumes, "after create: nobody may log in");

  // VolumeAttachment A→n1. Two workers racing on it (a resync while the
  // first call is still running) meet ABORTED and retry; both end attached.
  {
    Attacher racer(stub_.get());
    auto other = std::async(std::launch::async, [&] { return racer.Attach(a, "n1", rwo); });
    grpc::Status st = attacher.Attach(a, "n1", rwo);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_TRUE(other.get().ok());
  }
  ExpectAclsMatch(attacher, volumes, "A→n1 attached");
  const auto& meta = attacher.Metadata(a, "n1");
  EXPECT_EQ(meta.at(publish_context::kTargetIqn), TargetOf(a));
  EXPECT_EQ(meta.at(publish_context::kPortals), tgtd_->portal());
  EXPECT_EQ(meta.at(publish_context::kChapRequired), "false");
  EXPECT_FALSE(meta.at(publish_context::kSerial).empty());

  // B→n1 too: n1 now holds two volumes.
  ASSERT_TRUE(attacher.Attach(b, "n1", rwo).ok());
  ExpectAclsMatch(attacher, volumes, "B→n1 attached");

  // The pod moves to n2: A→n2 is created while A→n1 still exists. Refused,
  // and right after the call nothing of it is on tgtd (no ACL for n2).
  testing::LeakSnapshot before = testing::TakeLeakSnapshot(Scope());
  grpc::Status st = attacher.Attach(a, "n2", rwo);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("n1"), std::string::npos) << st.error_message();
  EXPECT_TRUE(testing::NothingLeftSince(before, Scope(), "the refused publish A→n2"));
  ExpectAclsMatch(attacher, volumes, "A→n2 refused while A→n1 exists");

  // A→n1 deleted (the pod left n1): unpublish; then the attacher's retry of
  // A→n2 succeeds.
  ASSERT_TRUE(attacher.Detach(a, "n1").ok());
  ExpectAclsMatch(attacher, volumes, "A→n1 detached");
  st = attacher.Attach(a, "n2", rwo);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ExpectAclsMatch(attacher, volumes, "A→n2 attached");

  // Node n1 is deleted from the cluster: the attach-detach controller
  // deletes its VolumeAttachments and the attacher unpublishes with n1's id.
  ASSERT_TRUE(attacher.Detach(b, "n1").ok());
  ExpectAclsMatch(attacher, volumes, "n1 deleted: B→n1 detached");
  EXPECT_TRUE(attacher.Detach(a, "n1").ok()) << "an already-revoked grant of a gone node";
  ExpectAclsMatch(attacher, volumes, "n1 deleted: A→n1 again");

  // The PVC of A is deleted while A→n2 exists: refused until detached.
  EXPECT_EQ(DeleteVolume(a).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(attacher.Detach(a, "n2").ok());
  ExpectAclsMatch(attacher, volumes, "A→n2 detached");
  for (const auto& volume : volumes) {
    std::string target = TargetOf(volume);
    ASSERT_TRUE(DeleteVolume(volume).ok());
    EXPECT_FALSE(testing::ParseTgtAcls(tgtd_->ShowTargets()).contains(target)) << "target of " << volume << " left";
  }
}

// tgtd dies while a VolumeAttachment is being attached: the publish fails
// with a transient code, the attacher retries, and once tgtd is back the
// grant lands and the ACL is exactly that attachment.
TEST_F(VolumeAttachmentFlowTest, PublishRetriesThroughATgtdRestart) {
  const auto rwo = testing::MountCapability("ext4", Mode::SINGLE_NODE_WRITER);
  Attacher attacher(stub_.get());
  std::string a = CreateVolume("pvc-restart");
  ASSERT_FALSE(a.empty());
  std::string target = TargetOf(a);
  tgtd_->Kill9();
  auto attach = std::async(std::launch::async, [&] { return attacher.Attach(a, "n1", rwo); });
  // Bring tgtd back only once the attacher has met it down at least once.
  for (int i = 0; i < 1000 && attacher.publish_attempts() == 0; ++i) std::this_thread::sleep_for(5ms);
  std::string error;
  ASSERT_TRUE(tgtd_->Restart(&error)) << error;
  grpc::Status st = attach.get();
  ASSERT_TRUE(st.ok()) << st.error_code() << ": " << st.error_message();
  EXPECT_GE(attacher.unavailable_retries(), 1) << "the first publish ran while tgtd was down";
  auto acls = testing::ParseTgtAcls(tgtd_->ShowTargets());
  ASSERT_TRUE(acls.contains(target)) << tgtd_->ShowTargets();
  EXPECT_EQ(acls[target], attacher.ExpectedInitiators(a));
  ASSERT_TRUE(attacher.Detach(a, "n1").ok());
  ASSERT_TRUE(DeleteVolume(a).ok());
}

// The ACL reader itself, on tgtadm output captured from tgt 1.0.
TEST(TgtAclsTest, ReadsInitiatorNamesPerTarget) {
  const std::string show =
      "Target 1: iqn.2026-11.io.blockcsi:probe\n"
      "    System information:\n"
      "        Driver: iscsi\n"
      "    LUN information:\n"
      "        LUN: 0\n"
      "            Type: controller\n"
      "    Account information:\n"
      "    ACL information:\n"
      "        iqn.2026-11.io.blockcsi:node:n1\n"
      "        iqn.2026-11.io.blockcsi:node:n2\n"
      "Target 2: iqn.2026-11.io.blockcsi:empty\n"
      "    Account information:\n"
      "        chapuser\n"
      "    ACL information:\n";
  auto acls = testing::ParseTgtAcls(show);
  ASSERT_EQ(acls.size(), 2u);
  EXPECT_EQ(acls["iqn.2026-11.io.blockcsi:probe"],
            (std::set<std::string>{"iqn.2026-11.io.blockcsi:node:n1", "iqn.2026-11.io.blockcsi:node:n2"}));
  EXPECT_TRUE(acls["iqn.2026-11.io.blockcsi:empty"].empty()) << "account names are not ACL entries";
}

}  // namespace
}  // namespace blockcsi
