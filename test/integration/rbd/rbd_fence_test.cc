// Fencing a node on the RBD backend against a real single-node Ceph
// (hack/ceph-cluster.sh; root and the ceph packages, else skipped with the
// reason). The "nodes" are librados/librbd clients of the test's own, as in
// rbd_backend_test.cc: node-a writes its image, is fenced, and its next write
// fails (its client is blocklisted); the fence is recorded in the pool with
// what it held, refuses node-a's grants until it is lifted, and node-b takes
// the image over. The pool is left as found (the shared leak checker).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/rbd/rbd_backend.h"
#include "contract/initiator.h"
#include "support/ceph_client.h"
#include "support/ceph_test_cluster.h"
#include "support/rbd_backend_env.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using Client = testing::CephClient;

class RbdFenceTest : public testing::CephSuiteTest {
 protected:
  void SetUp() override {
    CephSuiteTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto backend = MakeRbdBackend(testing::RbdBackendOptionsFor(env_));
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = *backend;
    baseline_ = testing::TakeLeakSnapshot(PoolLeakScope());
    have_baseline_ = true;
  }

  void TearDown() override {
    if (have_baseline_) {
      EXPECT_TRUE(testing::NothingLeftSince(baseline_, PoolLeakScope(), "the test's own deletes"));
    }
    if (backend_ == nullptr) return;
    (void)backend_->UnfenceNode("node-a");
    if (!volume_.empty()) {
      for (const char* node : {"node-a", "node-b"}) (void)backend_->RevokeAccess(volume_, InitiatorIqnForNode(node));
      (void)backend_->DeleteVolume(volume_);
    }
  }

  std::unique_ptr<Client> NodeClient() {
    return std::make_unique<Client>(env_["CEPH_CONF"], "admin", env_["CEPH_KEYRING"], env_["RBD_POOL"]);
  }

  // An 8 MiB ext4 volume (named `name` and this process's pid), kept in
  // volume_ for TearDown; returns its RBD image's name, or "" on failure.
  std::string CreateVolumeImage(const std::string& name) {
    CreateVolumeSpec spec;
    spec.name = name + "-" + std::to_string(::getpid());
    spec.size_bytes = 8 << 20;
    spec.parameters = {{"fsType", "ext4"}};
    auto vol = backend_->CreateVolume(spec);
    EXPECT_TRUE(vol.ok()) << vol.status().ToString();
    if (!vol.ok()) return "";
    volume_ = vol->id;
    return vol->transport_params.at(rbd_params::kImage);
  }

  static AccessGrant GrantFor(const std::string& node) {
    AccessGrant grant;
    grant.node_id = node;
    grant.initiator_iqn = InitiatorIqnForNode(node);
    grant.capability = "SINGLE_NODE_WRITER/block";
    return grant;
  }

  testing::LeakSnapshot baseline_;
  bool have_baseline_ = false;
  std::shared_ptr<VolumeBackend> backend_;
  std::string volume_;
};

TEST_F(RbdFenceTest, AFencedNodesClientCannotWriteItsGrantsAreRefusedAndAnotherNodeTakesOver) {
  const std::string image = CreateVolumeImage("fence");
  ASSERT_FALSE(image.empty());

  ASSERT_TRUE(backend_->GrantAccess(volume_, GrantFor("node-a")).ok());
  auto node_a = NodeClient();
  ASSERT_EQ(node_a->error(), 0);
  ASSERT_EQ(node_a->OpenImage(image), 0);
  ASSERT_EQ(node_a->Write(0, std::string(4096, 'a')), 0) << "node-a should write while published";
  auto a_addrs = node_a->Watchers();
  ASSERT_EQ(a_addrs.size(), 1u);

  auto answers = backend_->FenceNode("node-a", InitiatorIqnForNode("node-a"));
  ASSERT_EQ(answers.size(), 1u);
  ASSERT_TRUE(answers[0].status.ok()) << answers[0].status.ToString();
  ASSERT_EQ(answers[0].fences.size(), 1u);
  ASSERT_EQ(answers[0].fences[0].held.size(), 1u);
  EXPECT_EQ(answers[0].fences[0].held[0].volume_id, volume_);

  auto admin = NodeClient();
  EXPECT_TRUE(admin->Blocklist().contains(a_addrs[0])) << a_addrs[0] << " not blocklisted";
  EXPECT_LT(node_a->Write(0, std::string(4096, 'x')), 0) << "a fenced node's client wrote";

  // Recorded: listed, and every grant to node-a refused naming the fence.
  auto listed = backend_->ListFences();
  ASSERT_EQ(listed.size(), 1u);
  ASSERT_EQ(listed[0].fences.size(), 1u);
  EXPECT_EQ(listed[0].fences[0].node_id, "node-a");
  auto refused = backend_->GrantAccess(volume_, GrantFor("node-a"));
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("fenced"), std::string::npos) << refused.status().ToString();

  // node-b takes over: what node-a wrote before the fence, not after.
  ASSERT_TRUE(backend_->GrantAccess(volume_, GrantFor("node-b")).ok());
  auto node_b = NodeClient();
  ASSERT_EQ(node_b->OpenImage(image), 0);
  EXPECT_EQ(node_b->Read(0, 4096), std::string(4096, 'a'));
  ASSERT_EQ(node_b->Write(4096, std::string(4096, 'b')), 0);
  node_b->CloseImage();
  node_a.reset();  // the fenced client goes, as its node's plugin lets go

  ASSERT_TRUE(backend_->UnfenceNode("node-a")[0].status.ok());
  EXPECT_TRUE(backend_->ListFences()[0].fences.empty());
  ASSERT_TRUE(backend_->RevokeAccess(volume_, InitiatorIqnForNode("node-b")).ok());
  ASSERT_TRUE(backend_->GrantAccess(volume_, GrantFor("node-a")).ok()) << "unfenced, node-a is granted again";
  ASSERT_TRUE(backend_->RevokeAccess(volume_, InitiatorIqnForNode("node-a")).ok());
  ASSERT_TRUE(backend_->DeleteVolume(volume_).ok());
  volume_.clear();
}

// An image granted to two nodes (a volume moving, or shared): fencing one
// blocklists its client only. Node-a registered no client (a reader, an
// older bridge); node-b did: node-a's client is the watcher no other granted
// node claims, and node-b's goes on writing.
TEST_F(RbdFenceTest, FencingOneOfTwoGrantedNodesCutsOffItsClientOnly) {
  const std::string image = CreateVolumeImage("fence-shared");
  ASSERT_FALSE(image.empty());
  ASSERT_TRUE(backend_->GrantAccess(volume_, GrantFor("node-a")).ok());
  ASSERT_TRUE(backend_->GrantAccess(volume_, GrantFor("node-b")).ok());

  auto node_b = NodeClient();
  ASSERT_EQ(node_b->OpenImage(image), 0);
  auto b_addrs = node_b->Watchers();
  ASSERT_EQ(b_addrs.size(), 1u);
  ASSERT_EQ(node_b->SetMetadata("blockcsi.client.node-b", b_addrs[0]), 0);
  auto node_a = NodeClient();
  ASSERT_EQ(node_a->OpenImage(image), 0);
  ASSERT_EQ(node_a->Write(0, std::string(4096, 'a')), 0);
  std::string a_addr;
  for (const auto& w : node_a->Watchers()) {
    if (w != b_addrs[0]) a_addr = w;
  }
  ASSERT_FALSE(a_addr.empty());

  auto answers = backend_->FenceNode("node-a", InitiatorIqnForNode("node-a"));
  ASSERT_EQ(answers.size(), 1u);
  ASSERT_TRUE(answers[0].status.ok()) << answers[0].status.ToString();
  auto admin = NodeClient();
  auto blocklist = admin->Blocklist();
  EXPECT_TRUE(blocklist.contains(a_addr)) << "node-a's client " << a_addr << " was not blocklisted";
  EXPECT_FALSE(blocklist.contains(b_addrs[0])) << "node-b's client was blocklisted with node-a's fence";
  EXPECT_LT(node_a->Write(0, std::string(4096, 'x')), 0) << "a fenced node's client wrote";
  EXPECT_EQ(node_b->Write(4096, std::string(4096, 'b')), 0) << "node-b lost the image with node-a's fence";
  EXPECT_EQ(node_b->Read(0, 4096), std::string(4096, 'a'));
  node_b->CloseImage();
  node_a.reset();

  ASSERT_TRUE(backend_->UnfenceNode("node-a")[0].status.ok());
  ASSERT_TRUE(backend_->RevokeAccess(volume_, InitiatorIqnForNode("node-b")).ok());
  // Granted again, node-a's blocklist entry is lifted (its client is gone).
  ASSERT_TRUE(backend_->GrantAccess(volume_, GrantFor("node-a")).ok());
  ASSERT_TRUE(backend_->RevokeAccess(volume_, InitiatorIqnForNode("node-a")).ok());
  ASSERT_TRUE(backend_->DeleteVolume(volume_).ok());
  volume_.clear();
}

}  // namespace
}  // namespace blockcsi
