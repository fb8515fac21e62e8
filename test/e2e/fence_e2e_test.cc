// Fencing end to end, with real processes: a private tgtd, a real kube-apiserver
// (the fence's Lease is how a node hears of its fence and reports its cleanup),
// `blockcsi --mode controller --backend local` and two `blockcsi --mode node
// --connector userspace` plugins, n1 and n2, on this machine (each its own
// initiator name, state directory and bridges). A volume is staged,
// published and written on n1; n1's plugin is frozen (SIGSTOP, a hung node)
// and n1 is fenced with `blockctl fence` on the controller's socket. Then:
// n1's session is gone from tgtd and its writes fail; ControllerPublish to n1
// is refused naming the fence; unfence is refused (no report); the volume is
// published to n2, which reads what n1 wrote before the fence and nothing of
// what it tried after. n1's plugin is resumed: it lets go of everything by
// itself and reports on the Lease; unfence succeeds only then, and nothing
// is left (the shared leak checker, on both nodes, the pool and tgtd).
//
// Needs root, tgtd, /dev/fuse, etcd, kubectl and the peer kube-apiserver
// (../shared/peers); skips with the reason otherwise.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/executor.h"
#include "controller/fence_leases.h"
#include "k8s/kube_cluster.h"
#include "support/block_io.h"
#include "support/csi_calls.h"
#include "support/leak_check.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;
using testing::CsiCalls;
using testing::CsiVolume;
using testing::KubeCluster;
using testing::PluginOptions;
using testing::PluginUnderTest;

constexpr char kNamespace[] = "kube-system";
constexpr size_t kBytes = 256 << 10;

struct Ran {
  int code = -1;
  std::string out;
};

class FenceE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::IsRoot()) GTEST_SKIP() << "needs root (tgtd, FUSE, loop devices, mounts)";
    if (!testing::HaveProgram("tgtd")) GTEST_SKIP() << "needs tgtd (apt-get install tgt)";
    if (!std::filesystem::exists("/dev/fuse")) GTEST_SKIP() << "needs /dev/fuse";
    if (std::string why = KubeCluster::MissingCapability(); !why.empty()) GTEST_SKIP() << why;
    std::string error;
    tgtd_ = testing::TgtdHarness::Start(&error);
    ASSERT_TRUE(tgtd_) << error;
    std::filesystem::create_directories(dir_.Join("cluster"));
    cluster_ = KubeCluster::Start(dir_.Join("cluster"), &error);
    ASSERT_TRUE(cluster_) << error;

    const std::vector<std::string> fencing = {"--kubeconfig", cluster_->kubeconfig(), "--fence-namespace", kNamespace};
    controller_ = Plugin("controller", tgtd_.get());
    PluginOptions c;
    c.mode = "controller";
    c.node_id = "e2e-controller";
    c.extra_args = fencing;
    c.extra_args.insert(c.extra_args.end(), {"--known-node-ids", "n1,n2"});
    ASSERT_TRUE(controller_->Start(c, &error)) << error;
    for (const char* node : {"n1", "n2"}) {
      auto plugin = Plugin(node, nullptr);
      PluginOptions n;
      n.mode = "node";
      n.node_id = node;
      n.extra_args = fencing;
      // A short check so the test does not wait; a short bridge timeout so
      // n1's I/O fails within seconds once the target turned it away.
      n.extra_args.insert(n.extra_args.end(), {"--fence-check-interval", "1s", "--bridge-io-timeout", "5s"});
      ASSERT_TRUE(plugin->Start(n, &error)) << error;
      (std::string(node) == "n1" ? n1_ : n2_) = std::move(plugin);
    }
  }

  void TearDown() override {
    if (n1_ && n1_->running()) kill(n1_->pid(), SIGCONT);
    for (auto* p : {&n1_, &n2_, &controller_}) {
      if (*p) (*p)->Stop();
    }
    testing::CleanUpUnder(dir_.path());
    cluster_.reset();
    tgtd_.reset();
  }

  std::unique_ptr<PluginUnderTest> Plugin(const std::string& name, const testing::TgtdHarness* tgtd) {
    std::filesystem::create_directories(dir_.Join(name));
    return std::make_unique<PluginUnderTest>(dir_.Join(name), tgtd);
  }

  std::string GrpcLogTail() {
    return "controller:\n" + controller_->LogTail() + "\nn1:\n" + n1_->LogTail() + "\nn2:\n" + n2_->LogTail();
  }

  Ran Blockctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {testing::BinDir() + "/blockctl", "--endpoint", "unix://" + controller_->socket()};
    argv.insert(argv.end(), args.begin(), args.end());
    Ran ran;
    ran.code = testing::RunProgram(argv, &ran.out, std::chrono::seconds(120));
    return ran;
  }

  // The Lease's annotations (empty object when there is no Lease).
  nlohmann::json LeaseAnnotations() {
    auto lease = cluster_->Get("lease", FenceLeaseName("n1"), kNamespace);
    if (!lease) return nlohmann::json::object();
    return lease->value("/metadata/annotations"_json_pointer, nlohmann::json::object());
  }

  // tgtd's connections of n1's initiator, as the leak checker sees sessions.
  std::vector<std::string> N1Sessions() {
    std::vector<std::string> out;
    for (const auto& item : testing::TakeLeakSnapshot(Scope(*controller_)).items) {
      if (item.find("session") != std::string::npos && item.find(":node:n1") != std::string::npos) out.push_back(item);
    }
    return out;
  }

  testing::LeakScope Scope(PluginUnderTest& p, const std::string& volume_id = "") {
    testing::LeakScope scope = p.LeakScopeFor(volume_id);
    scope.ignore_pids = {controller_->pid(), n1_->pid(), n2_->pid()};
    for (pid_t pid : cluster_->Pids()) scope.ignore_pids.push_back(pid);
    return scope;
  }
  std::vector<testing::LeakScope> Scopes(const std::string& volume_id = "") {
    return {Scope(*controller_, volume_id), Scope(*n1_, volume_id), Scope(*n2_, volume_id)};
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::TgtdHarness> tgtd_;
  std::unique_ptr<KubeCluster> cluster_;
  std::unique_ptr<PluginUnderTest> controller_, n1_, n2_;
};

TEST_F(FenceE2eTest, AFencedNodeCannotWriteItsVolumeMovesAndItIsUnfencedOnlyAfterItCleanedUp) {
  const testing::LeakSnapshot baseline = testing::TakeLeakSnapshot(Scopes());
  CsiCalls on_n1("n1"), on_n2("n2");
  CsiVolume v;
  ASSERT_GRPC_OK(on_n1.Create(*controller_, "fenced", 64 << 20, &v));
  ASSERT_GRPC_OK(on_n1.ControllerPublish(*controller_, &v));
  ASSERT_GRPC_OK(on_n1.Stage(*n1_, v));
  ASSERT_GRPC_OK(on_n1.Publish(*n1_, v));
  const std::string before = testing::Pattern(kBytes, 'a');
  const std::string on_n1_path = n1_->target_path(v.id);
  ASSERT_EQ(testing::WriteFileSynced(on_n1_path + "/before", before), 0);
  ASSERT_FALSE(N1Sessions().empty()) << "no session of n1 to end";

  // n1 hangs: its plugin cannot clean up nor report; its bridge still serves.
  kill(n1_->pid(), SIGSTOP);
  Ran fenced = Blockctl({"fence", "n1"});
  ASSERT_EQ(fenced.code, 0) << fenced.out << GrpcLogTail();
  EXPECT_TRUE(N1Sessions().empty()) << "the fence returned with n1's session still open:\n"
                                    << testing::DescribeItems(N1Sessions());
  // Told through the Lease, whoever fenced.
  const std::string fence_id = LeaseAnnotations().value(fence_annotations::kFenceId, "");
  EXPECT_FALSE(fence_id.empty()) << "no Lease told n1 of its fence";

  // n1's writes fail (its bridge's reconnects are refused by the ACL).
  const auto write_started = std::chrono::steady_clock::now();
  int written = testing::WriteFileSynced(on_n1_path + "/after", testing::Pattern(kBytes, 'z'));
  const double write_failed_after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - write_started).count();
  EXPECT_NE(written, 0) << "a fenced node's fsync succeeded";
  std::cout << "fence: n1's write+fsync failed with errno " << written << " after " << write_failed_after << " s\n";

  // The controller refuses n1 and lets the volume go.
  CsiVolume again = v;
  grpc::Status refused = on_n1.ControllerPublish(*controller_, &again);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.error_message();
  EXPECT_NE(refused.error_message().find("fenced"), std::string::npos) << refused.error_message();
  ASSERT_GRPC_OK(on_n1.ControllerUnpublish(*controller_, v));
  // Unfencing now would let a node back that holds the volume mounted.
  Ran early = Blockctl({"unfence", "n1"});
  EXPECT_NE(early.code, 0) << "unfenced before n1 reported its cleanup: " << early.out;
  EXPECT_NE(early.out.find("has not reported"), std::string::npos) << early.out;

  // n2 gets the volume: what n1 wrote before the fence, nothing after.
  CsiVolume moved = v;
  ASSERT_GRPC_OK(on_n2.ControllerPublish(*controller_, &moved));
  ASSERT_GRPC_OK(on_n2.Stage(*n2_, moved));
  ASSERT_GRPC_OK(on_n2.Publish(*n2_, moved));
  EXPECT_EQ(testing::ReadFileOrEmpty(n2_->target_path(v.id) + "/before"), before);
  EXPECT_FALSE(std::filesystem::exists(n2_->target_path(v.id) + "/after"))
      << "a file n1 wrote after its fence reached the volume";

  // n1 comes back: it lets go of everything by itself and reports.
  kill(n1_->pid(), SIGCONT);
  const auto resumed = std::chrono::steady_clock::now();
  ASSERT_TRUE(KubeCluster::WaitFor(
      [&] { return LeaseAnnotations().value(fence_annotations::kCleanedUp, "") == fence_id; }, 120s))
      << "n1 did not report its cleanup\n"
      << n1_->LogTail();
  std::cout << "fence: n1 cleaned up and reported "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - resumed).count()
            << " s after it was resumed\n";
  EXPECT_TRUE(testing::MountsUnder(n1_->dir()).empty()) << "n1 reported with mounts left";
  EXPECT_TRUE(testing::LoopDevicesUnder(n1_->dir()).empty()) << "n1 reported with loop devices left";
  EXPECT_TRUE(std::filesystem::is_empty(n1_->state_dir() + "/attachments")) << "n1 reported with records left";
  // Fenced, n1 refuses to stage anything.
  grpc::Status stage = on_n1.Stage(*n1_, v);
  EXPECT_EQ(stage.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << stage.error_message();

  Ran listed = Blockctl({"-o", "json", "fences"});
  ASSERT_EQ(listed.code, 0) << listed.out;
  auto rows = nlohmann::json::parse(listed.out, nullptr, false);
  ASSERT_TRUE(rows.is_array() && rows.size() == 1) << listed.out;
  EXPECT_EQ(rows[0].value("node", ""), "n1");
  EXPECT_EQ(rows[0].value("cleaned_up", ""), "yes") << "blockctl fences does not show n1's report: " << listed.out;
  Ran unfenced = Blockctl({"unfence", "n1"});
  ASSERT_EQ(unfenced.code, 0) << unfenced.out << GrpcLogTail();
  EXPECT_FALSE(cluster_->Get("lease", FenceLeaseName("n1"), kNamespace).has_value()) << "the Lease stayed";

  // The volume's life ends on n2; nothing is left anywhere.
  ASSERT_GRPC_OK(on_n2.Unpublish(*n2_, moved));
  ASSERT_GRPC_OK(on_n2.Unstage(*n2_, moved));
  ASSERT_GRPC_OK(on_n2.ControllerUnpublish(*controller_, moved));
  ASSERT_GRPC_OK(on_n2.Delete(*controller_, moved));
  std::vector<std::string> left = testing::NewItemsAfterSettling(baseline, Scopes(v.id));
  EXPECT_TRUE(left.empty()) << testing::DescribeItems(left);
}

// Where fencing is not deployed (no watcher, no --fence-namespace: the base
// manifests, whose RBAC grants no Leases), a fence made by hand is recorded
// on the storage hosts only: no Lease is made in any namespace, so none is
// left that nobody may delete, and the fence is lifted with --force.
TEST_F(FenceE2eTest, WithoutFencingDeployedAFenceMakesNoLease) {
  PluginOptions c;
  c.mode = "controller";
  c.node_id = "e2e-controller";
  c.extra_args = {"--kubeconfig", cluster_->kubeconfig(), "--known-node-ids", "n1,n2"};
  std::string error;
  ASSERT_TRUE(controller_->Start(c, &error)) << error;
  auto fence_leases = [&] {
    std::vector<std::string> names;
    for (const auto& lease : cluster_->List("leases", "*")) {
      std::string name = lease.value("/metadata/name"_json_pointer, "");
      if (name.rfind("blockcsi-fence-", 0) == 0)
        names.push_back(lease.value("/metadata/namespace"_json_pointer, "") + "/" + name);
    }
    return names;
  };
  Ran fenced = Blockctl({"fence", "n1"});
  ASSERT_EQ(fenced.code, 0) << fenced.out << GrpcLogTail();
  EXPECT_EQ(fence_leases(), std::vector<std::string>{}) << "a fence made a Lease where fencing is not deployed";
  Ran listed = Blockctl({"fences"});
  EXPECT_NE(listed.out.find("n1"), std::string::npos) << "the fence was not recorded: " << listed.out;
  Ran unfenced = Blockctl({"unfence", "n1", "--force"});
  ASSERT_EQ(unfenced.code, 0) << unfenced.out << GrpcLogTail();
  EXPECT_EQ(fence_leases(), std::vector<std::string>{});
}

}  // namespace
}  // namespace blockcsi
