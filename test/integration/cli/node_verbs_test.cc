// blockctl volumes/status/cleanup against the whole plugin, for real: a
// private tgtd, the `blockcsi` binary with the userspace connector (bridge →
// FUSE → loop), driven over its CSI socket like the node e2e tests. The
// plugin is kill -9'd mid-stage; blockctl must name the stale volume with
// the plugin down, list the steps, and --apply must leave the node clean so
// a retried NodeStage succeeds. Needs root, tgtd and FUSE.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/executor.h"
#include "common/mounter.h"
#include "csi.grpc.pb.h"
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
    if (!tgtd_) GTEST_SKIP() << "cannot start tgtd: " << error;
    ASSERT_TRUE(StartPlugin(""));
  }

  void TearDown() override {
    if (!testing::IsRoot()) return;
    StopPlugin();
    // Whatever is left under our directory: mounts, loop devices, bridges.
    auto exec = MakeProcessExecutor();
    for (int pid : ProcessesUnderDir()) ::kill(pid, SIGKILL);
    std::vector<std::string> targets = MountsUnderDir();
    for (auto it = targets.rbegin(); it != targets.rend(); ++it) {
      if (::umount2(it->c_str(), 0) != 0) ::umount2(it->c_str(), MNT_DETACH);
    }
    for (const auto& loop : LoopsUnderDir()) (void)exec->Run(Command("losetup").Arg("-d").Arg(loop));
  }

  std::vector<std::string> MountsUnderDir() {
    std::vector<std::string> out;
    for (const auto& e : ParseMountInfo(testing::ReadFileOrEmpty("/proc/self/mountinfo"))) {
      if (e.target.rfind(dir_.path(), 0) == 0) out.push_back(e.target);
    }
    return out;
  }

  std::vector<std::string> LoopsUnderDir() {
    std::vector<std::string> out;
    auto r = MakeProcessExecutor()->Run(Command("losetup").Arg("-l").Arg("-n").Arg("-O").Arg("NAME,BACK-FILE"));
    if (!r.ok()) return out;
    std::istringstream lines(r->stdout_text);
    std::string name, file;
    while (lines >> name >> file) {
      if (file.rfind(dir_.path(), 0) == 0) out.push_back(name);
    }
    return out;
  }

  std::vector<int> ProcessesUnderDir() {
    std::vector<int> out;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      std::string pid = entry.path().filename();
      if (pid.empty() || !std::all_of(pid.begin(), pid.end(), ::isdigit)) continue;
      std::string cmdline = testing::ReadFileOrEmpty(entry.path() / "cmdline");
      if (cmdline.find(dir_.path() + "/") != std::string::npos && std::stoi(pid) != ::getpid()) {
        out.push_back(std::stoi(pid));
      }
    }
    return out;
  }

  bool StartPlugin(const std::string& fault_point) {
    // A socket left by a killed plugin must not pass for the new one's.
    std::filesystem::remove(Socket());
    if (!fault_point.empty()) ::setenv("BLOCKCSI_FAULT_POINT", fault_point.c_str(), 1);
    plugin_ = std::make_unique<testing::ChildProcess>(
        std::vector<std::string>{testing::BinDir() + "/blockcsi", "--mode", "all", "--backend", "local", "--connector",
                                 "userspace", "--endpoint", "unix://" + Socket(), "--node-id", "n1", "--state-dir",
                                 StateDir(), "--pool", dir_.Join("pool"), "--tgt-control-port",
                                 std::to_string(tgtd_->control_port()), "--portal", tgtd_->portal()},
        dir_.Join("plugin.log"));
    ::unsetenv("BLOCKCSI_FAULT_POINT");
    if (!testing::WaitForSocket(Socket(), 20s)) {
      ADD_FAILURE() << "plugin did not start:\n" << testing::ReadFileOrEmpty(dir_.Join("plugin.log"));
      return false;
    }
    auto channel = grpc::CreateChannel("unix:" + Socket(), grpc::InsecureChannelCredentials());
    controller_ = csi::v1::Controller::NewStub(channel);
    node_ = csi::v1::Node::NewStub(channel);
    return true;
  }

  void StopPlugin() {
    if (!plugin_) return;
    plugin_->Signal(SIGTERM);
    if (plugin_->Wait(15s) < 0) plugin_->Signal(SIGKILL);
    plugin_.reset();
  }

  bool PluginKilledItself() {
    int code = plugin_->Wait(30s);
    plugin_.reset();
    return code == 128 + SIGKILL;
  }

  CliResult Blockctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"--state-dir", StateDir(), "--endpoint", "unix://" + Socket()});
    auto r = MakeProcessExecutor()->Run(Command(testing::BinDir() + "/blockctl").Args(args).Timeout(120s));
    if (!r.ok()) return {-1, "", r.status().ToString()};
    return {r->exit_code, r->stdout_text, r->stderr_text};
  }

  std::string Socket() { return dir_.Join("csi.sock"); }
  std::string StateDir() { return dir_.Join("state"); }
  std::string Staging(const std::string& id) { return dir_.Join("staging/" + id); }
  std::string Target(const std::string& id) { return dir_.Join("pods/" + id + "/mount"); }
  std::string LogTail() {
    std::string log = testing::ReadFileOrEmpty(dir_.Join("plugin.log"));
    return log.size() > 3000 ? "...\n" + log.substr(log.size() - 3000) : log;
  }

  static csi::v1::VolumeCapability Capability(const std::string& fs) {
    csi::v1::VolumeCapability cap;
    cap.mutable_access_mode()->set_mode(csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    cap.mutable_mount()->set_fs_type(fs);
    return cap;
  }

  template <typename Call>
  static grpc::Status WithContext(Call call) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 120s);
    return call(&ctx);
  }

  Volume Create(const std::string& name) {
    csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(64LL << 20);
    *req.add_volume_capabilities() = Capability("ext4");
    csi::v1::CreateVolumeResponse resp;
    grpc::Status st = WithContext([&](auto* c) { return controller_->CreateVolume(c, req, &resp); });
    EXPECT_TRUE(st.ok()) << "CreateVolume " << name << ": " << st.error_message() << "\n" << LogTail();
    Volume v;
    v.id = resp.volume().volume_id();
    v.context = {resp.volume().volume_context().begin(), resp.volume().volume_context().end()};
    csi::v1::ControllerPublishVolumeRequest pub;
    pub.set_volume_id(v.id);
    pub.set_node_id("n1");
    *pub.mutable_volume_capability() = Capability("ext4");
    csi::v1::ControllerPublishVolumeResponse presp;
    st = WithContext([&](auto* c) { return controller_->ControllerPublishVolume(c, pub, &presp); });
    EXPECT_TRUE(st.ok()) << "ControllerPublishVolume " << name << ": " << st.error_message();
    v.publish_context = {presp.publish_context().begin(), presp.publish_context().end()};
    return v;
  }

  void Delete(const Volume& v) {
    csi::v1::ControllerUnpublishVolumeRequest unpub;
    unpub.set_volume_id(v.id);
    unpub.set_node_id("n1");
    csi::v1::ControllerUnpublishVolumeResponse uresp;
    EXPECT_TRUE(WithContext([&](auto* c) { return controller_->ControllerUnpublishVolume(c, unpub, &uresp); }).ok());
    csi::v1::DeleteVolumeRequest del;
    del.set_volume_id(v.id);
    csi::v1::DeleteVolumeResponse dresp;
    EXPECT_TRUE(WithContext([&](auto* c) { return controller_->DeleteVolume(c, del, &dresp); }).ok());
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
    return WithContext([&](auto* c) { return node_->NodeStageVolume(c, req, &resp); });
  }

  grpc::Status Publish(const Volume& v) {
    csi::v1::NodePublishVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_staging_target_path(Staging(v.id));
    req.set_target_path(Target(v.id));
    *req.mutable_volume_capability() = Capability("ext4");
    for (const auto& [k, val] : v.publish_context) (*req.mutable_publish_context())[k] = val;
    csi::v1::NodePublishVolumeResponse resp;
    return WithContext([&](auto* c) { return node_->NodePublishVolume(c, req, &resp); });
  }

  grpc::Status Unpublish(const Volume& v) {
    csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_target_path(Target(v.id));
    csi::v1::NodeUnpublishVolumeResponse resp;
    return WithContext([&](auto* c) { return node_->NodeUnpublishVolume(c, req, &resp); });
  }

  grpc::Status Unstage(const Volume& v) {
    csi::v1::NodeUnstageVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_staging_target_path(Staging(v.id));
    csi::v1::NodeUnstageVolumeResponse resp;
    return WithContext([&](auto* c) { return node_->NodeUnstageVolume(c, req, &resp); });
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::TgtdHarness> tgtd_;
  std::unique_ptr<testing::ChildProcess> plugin_;
  std::unique_ptr<csi::v1::Controller::Stub> controller_;
  std::unique_ptr<csi::v1::Node::Stub> node_;
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
  ASSERT_TRUE(StartPlugin("after-attach"));
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
