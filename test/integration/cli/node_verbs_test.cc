// blockctl volumes/status/cleanup against the whole plugin, for real: a
// private tgtd, the `blockcsi` binary with the userspace connector (bridge →
// FUSE → loop), driven over its CSI socket like the node e2e tests. The
// plugin is kill -9'd mid-stage; blockctl must name the stale volume with
// the plugin down, list the steps, and --apply must leave the node clean so
// a retried NodeStage succeeds. Needs root, tgtd and FUSE.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/executor.h"
#include "csi.grpc.pb.h"
#include "support/leak_check.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;

struct Volume {
  std::string id;
  std::map<std::string, std::string> context;
  std::map<std::string, std::string> publish_context;
};

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

class BlockctlNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::IsRoot()) GTEST_SKIP() << "needs root: tgtd, FUSE, loop devices and mount";
    if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "needs /dev/fuse";
    std::string error;
    tgtd_ = testing::TgtdHarness::Start(&error);
    BLOCKCSI_REQUIRE_TGTD(tgtd_, error);
    plugin_ = std::make_unique<testing::PluginUnderTest>(dir_.path(), tgtd_.get());
    ASSERT_TRUE(StartPlugin(""));
    baseline_ = testing::TakeLeakSnapshot(Scope());
  }

  // What the plugin can leave, in the one leak checker's terms: processes,
  // mounts and loop devices under dir_, attach records, pool files, tgtd's
  // targets, ACLs and sessions. The test's own daemons are not leaks.
  testing::LeakScope Scope() { return plugin_->LeakScopeFor(); }

  void TearDown() override {
    if (!testing::IsRoot()) return;
    // Before anything is cleaned: a test that passed must have left nothing.
    if (plugin_ && tgtd_ && !HasFailure()) {
      auto left = testing::NewItemsAfterSettling(baseline_, Scope());
      EXPECT_TRUE(left.empty()) << "left behind by the test (before the fixture cleans):\n"
                                << testing::DescribeItems(left);
    }
    if (plugin_) plugin_->Stop();
    // Whatever is left under our directory: mounts, loop devices, bridges.
    testing::CleanUpUnder(dir_.path());
  }

  std::vector<std::string> MountsUnderDir() { return testing::MountsUnder(dir_.path()); }
  std::vector<std::string> LoopsUnderDir() { return testing::LoopDevicesUnder(dir_.path()); }
  std::vector<pid_t> ProcessesUnderDir() { return testing::ProcessesNaming(dir_.path()); }

  bool StartPlugin(const std::string& fault_point) {
    testing::PluginOptions options;
    options.node_id = "n1";
    options.fault_point = fault_point;
    std::string error;
    if (!plugin_->Start(options, &error)) {
      ADD_FAILURE() << "plugin did not start: " << error;
      return false;
    }
    return true;
  }

  void StopPlugin() { plugin_->Stop(); }

  bool PluginKilledItself() { return plugin_->WaitKilledByFaultPoint(); }

  CliResult Blockctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"--state-dir", StateDir(), "--endpoint", "unix://" + plugin_->socket()});
    auto r = MakeProcessExecutor()->Run(Command(testing::BinDir() + "/blockctl").Args(args).Timeout(120s));
    if (!r.ok()) return {-1, "", r.status().ToString()};
    return {r->exit_code, r->stdout_text, r->stderr_text};
  }

  std::string StateDir() { return plugin_->state_dir(); }
  std::string Staging(const std::string& id) { return plugin_->staging_path(id); }
  std::string Target(const std::string& id) { return plugin_->target_path(id); }
  std::string LogTail() { return plugin_->LogTail(); }

  static csi::v1::VolumeCapability Capability(const std::string& fs) { return testing::MountCapability(fs); }

  template <typename Call>
  static grpc::Status WithContext(Call call) {
    return call(testing::Deadline().get());
  }

  Volume Create(const std::string& name) {
    csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(64LL << 20);
    *req.add_volume_capabilities() = Capability("ext4");
    csi::v1::CreateVolumeResponse resp;
    grpc::Status st = WithContext([&](auto* c) { return plugin_->controller().CreateVolume(c, req, &resp); });
    EXPECT_TRUE(st.ok()) << "CreateVolume " << name << ": " << st.error_message() << "\n" << LogTail();
    Volume v;
    v.id = resp.volume().volume_id();
    v.context = {resp.volume().volume_context().begin(), resp.volume().volume_context().end()};
    csi::v1::ControllerPublishVolumeRequest pub;
    pub.set_volume_id(v.id);
    pub.set_node_id("n1");
    *pub.mutable_volume_capability() = Capability("ext4");
    csi::v1::ControllerPublishVolumeResponse presp;
    st = WithContext([&](auto* c) { return plugin_->controller().ControllerPublishVolume(c, pub, &presp); });
    EXPECT_TRUE(st.ok()) << "ControllerPublishVolume " << name << ": " << st.error_message();
    v.publish_context = {presp.publish_context().begin(), presp.publish_context().end()};
    return v;
  }

  void Delete(const Volume& v) {
    csi::v1::ControllerUnpublishVolumeRequest unpub;
    unpub.set_volume_id(v.id);
    unpub.set_node_id("n1");
    csi::v1::ControllerUnpublishVolumeResponse uresp;
    EXPECT_TRUE(
        WithContext([&](auto* c) { return plugin_->controller().ControllerUnpublishVolume(c, unpub, &uresp); }).ok());
    csi::v1::DeleteVolumeRequest del;
    del.set_volume_id(v.id);
    csi::v1::DeleteVolumeResponse dresp;
    EXPECT_TRUE(WithContext([&](auto* c) { return plugin_->controller().DeleteVolume(c, del, &dresp); }).ok());
  }

  grpc::Status Stage(const Volume& v) {
    csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_staging_target_path(Staging(v.id));
    *req.mutable_volume_capability() = Capability("ext4");
    for (const auto& [k, val] : v.publish_context) (*req.mutable_publish_context())[k] = val;
    for (const auto& [k, val] : v.context) (*req.mutable_volume_context())[k] = val;
    std::filesystem::create_directories(Staging(v.id));
    csi::v1::NodeStageVolumeResponse resp;
    return WithContext([&](auto* c) { return plugin_->node().NodeStageVolume(c, req, &resp); });
  }

  grpc::Status Publish(const Volume& v) {
    csi::v1::NodePublishVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_staging_target_path(Staging(v.id));
    req.set_target_path(Target(v.id));
    *req.mutable_volume_capability() = Capability("ext4");
    for (const auto& [k, val] : v.publish_context) (*req.mutable_publish_context())[k] = val;
    csi::v1::NodePublishVolumeResponse resp;
    return WithContext([&](auto* c) { return plugin_->node().NodePublishVolume(c, req, &resp); });
  }

  grpc::Status Unpublish(const Volume& v) {
    csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_target_path(Target(v.id));
    csi::v1::NodeUnpublishVolumeResponse resp;
    return WithContext([&](auto* c) { return plugin_->node().NodeUnpublishVolume(c, req, &resp); });
  }

  grpc::Status Unstage(const Volume& v) {
    csi::v1::NodeUnstageVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_staging_target_path(Staging(v.id));
    csi::v1::NodeUnstageVolumeResponse resp;
    return WithContext([&](auto* c) { return plugin_->node().NodeUnstageVolume(c, req, &resp); });
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::TgtdHarness> tgtd_;
  std::unique_ptr<testing::PluginUnderTest> plugin_;
  testing::LeakSnapshot baseline_;  // at SetUp
};

TEST_F(BlockctlNodeTest, VolumesAndStatusShowAStagedAndPublishedVolume) {
  Volume v = Create("cli-vol");
  ASSERT_FALSE(v.id.empty());
  grpc::Status st = Stage(v);
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << LogTail();
  ASSERT_TRUE((st = Publish(v)).ok()) << st.error_message();

  std::cout << "blockctl volumes:\n" << Blockctl({"volumes"}).out;
  CliResult r = Blockctl({"-o", "json", "volumes"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u) << r.out;
  EXPECT_EQ(j[0]["volume"], v.id);
  EXPECT_EQ(j[0]["state"], "attached");
  EXPECT_EQ(j[0]["device"].get<std::string>().rfind("/dev/loop", 0), 0u) << r.out;
  EXPECT_EQ(j[0]["staging_path"], Staging(v.id));
  EXPECT_EQ(j[0]["publish_paths"], Target(v.id));
  EXPECT_EQ(j[0]["fs_type"], "ext4");
  EXPECT_FALSE(j[0]["used"].get<std::string>().empty()) << r.out;
  EXPECT_NE(j[0]["attachment"].get<std::string>().find("running"), std::string::npos) << r.out;

  r = Blockctl({"status"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("unreachable"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("healthy"), std::string::npos) << r.out;

  r = Blockctl({"-o", "json", "sessions"});
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u) << r.out;
  EXPECT_EQ(j[0]["kind"], "bridge");
  EXPECT_EQ(j[0]["volumes"], v.id);

  r = Blockctl({"cleanup"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("nothing to clean up"), std::string::npos) << r.out;

  ASSERT_TRUE(Unpublish(v).ok());
  ASSERT_TRUE(Unstage(v).ok());
  Delete(v);
}

TEST_F(BlockctlNodeTest, KilledMidStageIsNamedListedAndCleanedThenRestageWorks) {
  Volume v = Create("cli-kill");
  ASSERT_FALSE(v.id.empty());
  StopPlugin();
  ASSERT_TRUE(StartPlugin("node.stage.after-attach"));
  EXPECT_FALSE(Stage(v).ok());
  ASSERT_TRUE(PluginKilledItself()) << LogTail();
  ASSERT_FALSE(ProcessesUnderDir().empty()) << "the bridge outlives the plugin";
  ASSERT_FALSE(LoopsUnderDir().empty());

  CliResult r = Blockctl({"status"});
  std::cout << "blockctl status:\n" << r.out;
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("unreachable"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(v.id), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stale record"), std::string::npos) << r.out;

  std::cout << "blockctl cleanup:\n" << Blockctl({"cleanup"}).out;
  r = Blockctl({"-o", "json", "cleanup"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["applied"].get<bool>());
  ASSERT_EQ(j["steps"].size(), 1u) << r.out;
  EXPECT_EQ(j["steps"][0]["action"], "detach-volume");
  EXPECT_EQ(j["steps"][0]["subject"], v.id);
  std::string description = j["steps"][0]["description"];
  EXPECT_NE(description.find("stop bridge pid"), std::string::npos) << description;
  EXPECT_NE(description.find("detach loop device /dev/loop"), std::string::npos) << description;
  EXPECT_NE(description.find("unmount FUSE"), std::string::npos) << description;
  EXPECT_NE(description.find("remove record"), std::string::npos) << description;
  // The dry run changed nothing.
  EXPECT_FALSE(ProcessesUnderDir().empty());
  EXPECT_FALSE(LoopsUnderDir().empty());
  EXPECT_FALSE(std::filesystem::is_empty(StateDir() + "/attachments"));

  r = Blockctl({"cleanup", "--apply"});
  std::cout << "blockctl cleanup --apply:\n" << r.out;
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(ProcessesUnderDir().empty()) << "bridge still running";
  EXPECT_TRUE(LoopsUnderDir().empty()) << "loop device left";
  EXPECT_TRUE(MountsUnderDir().empty()) << "FUSE mount left";
  EXPECT_TRUE(std::filesystem::is_empty(StateDir() + "/attachments")) << "record left";

  r = Blockctl({"status"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = Blockctl({"cleanup"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;

  ASSERT_TRUE(StartPlugin(""));
  grpc::Status st = Stage(v);
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << LogTail();
  r = Blockctl({"status"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  ASSERT_TRUE(Unstage(v).ok());
  Delete(v);
}

}  // namespace
}  // namespace blockcsi
