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
#include "support/plugin_suite.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;

using Volume = testing::CsiVolume;

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

// The plugin as node "n1" (support/plugin_suite.h: tgtd, plugin, leak check).
class BlockctlNodeTest : public testing::PluginSuiteTest {
 protected:
  BlockctlNodeTest() : PluginSuiteTest("n1") {}

  std::vector<std::string> MountsUnderDir() { return testing::MountsUnder(dir_.path()); }
  std::vector<std::string> LoopsUnderDir() { return testing::LoopDevicesUnder(dir_.path()); }
  std::vector<pid_t> ProcessesUnderDir() { return testing::ProcessesNaming(dir_.path()); }

  CliResult Blockctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"--state-dir", StateDir(), "--endpoint", "unix://" + plugin_->socket()});
    auto r = MakeProcessExecutor()->Run(Command(testing::BinDir() + "/blockctl").Args(args).Timeout(120s));
    if (!r.ok()) return {-1, "", r.status().ToString()};
    return {r->exit_code, r->stdout_text, r->stderr_text};
  }

  std::string StateDir() { return plugin_->state_dir(); }
  std::string LogTail() { return plugin_->LogTail(); }

  Volume Create(const std::string& name) { return CreatePublished(name, 64LL << 20); }
  void Delete(const Volume& v) { UnpublishAndDelete(v); }
  grpc::Status Stage(const Volume& v) { return calls_.Stage(*plugin_, v); }
  grpc::Status Publish(const Volume& v) { return calls_.Publish(*plugin_, v); }
  grpc::Status Unpublish(const Volume& v) { return calls_.Unpublish(*plugin_, v); }
  grpc::Status Unstage(const Volume& v) { return calls_.Unstage(*plugin_, v); }
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
