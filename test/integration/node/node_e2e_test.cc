// The whole plugin, for real: a private tgtd (TgtdHarness), the `blockcsi`
// binary in --mode all --backend local --connector userspace (libiscsi
// bridge → FUSE file → loop device), driven over its CSI socket as the
// sidecars and kubelet would. The plugin is kill -9'd at named steps
// (BLOCKCSI_FAULT_POINT) and restarted; retries must converge without a
// second format. Needs root, tgtd and FUSE; skipped with the reason otherwise.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "common/block_probe.h"
#include "common/executor.h"
#include "csi.grpc.pb.h"
#include "support/block_io.h"
#include "support/csi_requests.h"
#include "support/leak_check.h"
#include "support/plugin_suite.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;
using AccessMode = csi::v1::VolumeCapability::AccessMode;

using Volume = testing::CsiVolume;

// The plugin as node "e2e-node" (support/plugin_suite.h: tgtd, plugin, leak
// check). A failed RPC shows its code, its message and the end of the
// plugin's log.
class PluginE2ETest : public testing::PluginSuiteTest {
 protected:
  PluginE2ETest() : PluginSuiteTest("e2e-node") {}

  std::string Log() { return testing::ReadFileOrEmpty(plugin_->log_path()); }

  csi::v1::Controller::Stub& Controller() { return plugin_->controller(); }
  csi::v1::Node::Stub& Node() { return plugin_->node(); }
  std::string Image(const std::string& id) { return plugin_->pool_dir() + "/images/" + id + ".img"; }

  template <typename Call>
  static grpc::Status WithContext(Call call) {
    return call(testing::Deadline().get());
  }

  // `fs`: a filesystem type, or "block" for a raw block volume.
  testing::CsiCalls CallsFor(const std::string& fs) const { return testing::CsiCalls(node_id_, fs); }
  Volume Create(const std::string& name, const std::string& fs, int64_t bytes = 512LL << 20) {
    return CreatePublished(name, bytes, CallsFor(fs));
  }
  void Delete(const Volume& v) { UnpublishAndDelete(v); }
  grpc::Status Stage(const Volume& v, const std::string& fs) { return CallsFor(fs).Stage(*plugin_, v); }
  grpc::Status Publish(const Volume& v, const std::string& fs, bool readonly = false) {
    return CallsFor(fs).Publish(*plugin_, v, readonly);
  }
  grpc::Status Unpublish(const Volume& v) { return calls_.Unpublish(*plugin_, v); }
  grpc::Status Unstage(const Volume& v) { return calls_.Unstage(*plugin_, v); }

  csi::v1::NodeGetVolumeStatsResponse Stats(const Volume& v, const std::string& path) {
    csi::v1::NodeGetVolumeStatsRequest req;
    req.set_volume_id(v.id);
    req.set_volume_path(path);
    csi::v1::NodeGetVolumeStatsResponse resp;
    grpc::Status st = WithContext([&](auto* c) { return Node().NodeGetVolumeStats(c, req, &resp); });
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  // The filesystem UUID read from the pool's image file: a reformat changes it.
  std::string Uuid(const Volume& v) {
    auto probe = MakeBlkidProbe()->Probe(Image(v.id));
    if (!probe.ok() || probe->signatures.empty()) return "";
    return probe->signatures.front().uuid;
  }

  int FormatsLogged(const Volume& v) {
    std::istringstream log(Log());
    std::string line;
    int n = 0;
    while (std::getline(log, line)) {
      n += line.find("formatting") != std::string::npos && line.find("volume_id=" + v.id) != std::string::npos;
    }
    return n;
  }

  // The pids of the blockcsi-bridge processes serving `volume_id` (their
  // command line names the volume's control socket).
  static std::set<pid_t> BridgePids(const std::string& volume_id) {
    std::set<pid_t> out;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      std::string name = entry.path().filename();
      if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
      std::string cmdline = testing::ReadFileOrEmpty(entry.path() / "cmdline");
      std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
      bool bridge =
          cmdline.find("/blockcsi-bridge ") != std::string::npos || cmdline.find(" bridge ") != std::string::npos;
      if (bridge && cmdline.find(volume_id) != std::string::npos) {
        out.insert(static_cast<pid_t>(std::stol(name)));
      }
    }
    return out;
  }

  static void WriteFile(const std::string& path, const std::string& data) {
    std::ofstream out(path);
    out << data;
    out.close();
    ASSERT_TRUE(out.good()) << "write " << path;
  }

  // Fatal failures end the caller: wrap in ASSERT_NO_FATAL_FAILURE.
  void StageAndPublish(const Volume& v, const std::string& fs) {
    ASSERT_GRPC_OK(Stage(v, fs));
    ASSERT_GRPC_OK(Publish(v, fs));
  }
  // A test's last step for a staged volume.
  void UnstageAndDelete(const Volume& v) {
    ASSERT_GRPC_OK(Unstage(v));
    Delete(v);
  }
  // NodeGetVolumeStats on `path` reports the volume healthy.
  void ExpectHealthy(const Volume& v, const std::string& path) {
    auto stats = Stats(v, path);
    EXPECT_FALSE(stats.volume_condition().abnormal()) << stats.volume_condition().message();
  }

  // Runs a program on the host (mkfs, sfdisk) for a test's setup.
  static void Run(Command cmd) {
    auto r = RunChecked(*MakeProcessExecutor(), cmd);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
};

class PluginLifecycleTest : public PluginE2ETest, public ::testing::WithParamInterface<std::string> {};

TEST_P(PluginLifecycleTest, FullLifecycleKeepsDataAcrossRestage) {
  const std::string fs = GetParam();
  Volume v = Create("life-" + fs, fs);
  ASSERT_FALSE(v.id.empty());
  grpc::Status st = Stage(v, fs);
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << Log();
  ASSERT_GRPC_OK(Stage(v, fs)) << "NodeStage must be idempotent";
  ASSERT_TRUE((st = Publish(v, fs)).ok()) << st.error_message();
  ASSERT_GRPC_OK(Publish(v, fs)) << "NodePublish must be idempotent";
  std::string data = "data of " + v.id;
  // Raw block: bytes that differ per sector, written and read back with
  // O_DIRECT through the device the node published (not the page cache,
  // not the pool's image file): the restaged device must serve them.
  const std::string block = testing::Pattern(64 * 1024, 'Z');
  constexpr uint64_t kBlockOffset = 8192;
  if (fs == "block") {
    ASSERT_EQ(testing::WriteDirect(Target(v.id), kBlockOffset, block), 0);
  } else {
    WriteFile(Target(v.id) + "/file", data);
  }
  std::string uuid = Uuid(v);
  ExpectHealthy(v, Target(v.id));
  EXPECT_EQ(Unstage(v).error_code(), grpc::StatusCode::FAILED_PRECONDITION) << "unstage while published";

  ASSERT_GRPC_OK(Unpublish(v));
  ASSERT_GRPC_OK(Unpublish(v)) << "NodeUnpublish must be idempotent";
  ASSERT_GRPC_OK(Unstage(v));
  ASSERT_GRPC_OK(Unstage(v)) << "NodeUnstage must be idempotent";

  ASSERT_GRPC_OK(Stage(v, fs));
  ASSERT_GRPC_OK(Publish(v, fs));
  if (fs == "block") {
    std::string error;
    EXPECT_TRUE(testing::ReadDirect(Target(v.id), kBlockOffset, block.size(), &error) == block)
        << "the restaged device does not serve the bytes written before the unstage " << error;
  } else {
    EXPECT_EQ(testing::ReadFileOrEmpty(Target(v.id) + "/file"), data);
    EXPECT_EQ(Uuid(v), uuid);
    EXPECT_EQ(FormatsLogged(v), 1);
  }
  ASSERT_GRPC_OK(Unpublish(v));
  UnstageAndDelete(v);
}

INSTANTIATE_TEST_SUITE_P(Filesystems, PluginLifecycleTest, ::testing::Values("ext4", "xfs", "block"));

TEST_F(PluginE2ETest, ForeignFilesystemAndPartitionTableAreRefusedUnchanged) {
  for (const std::string kind : {"xfs", "dos"}) {
    Volume v = Create("foreign-" + kind, "ext4", 320LL << 20);
    if (kind == "xfs") {
      Run(std::move(Command("mkfs.xfs").Arg("-q").Arg(Image(v.id))));
    } else {
      Run(std::move(Command("sfdisk").Arg("--quiet").Arg(Image(v.id)).Stdin("label: dos\n,,L\n")));
    }
    std::string before = testing::ReadFileOrEmpty(Image(v.id));
    testing::LeakSnapshot before_stage = testing::TakeLeakSnapshot(Scope(v.id));
    grpc::Status st = Stage(v, "ext4");
    // A final failure leaves nothing: checked before Unstage could clean it.
    ExpectNothingLeftSince(before_stage, "the refused stage of " + kind, v.id);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
    EXPECT_NE(st.error_message().find(kind), std::string::npos) << st.error_message();
    EXPECT_NE(st.error_message().find(v.id), std::string::npos) << st.error_message();
    ASSERT_GRPC_OK(Unstage(v));
    EXPECT_TRUE(testing::ReadFileOrEmpty(Image(v.id)) == before) << kind << ": the refused volume changed";
    Delete(v);
  }
}

TEST_F(PluginE2ETest, XfsOnlineGrowIsVisibleInStats) {
  Volume v = Create("grow", "xfs", 320LL << 20);
  ASSERT_NO_FATAL_FAILURE(StageAndPublish(v, "xfs"));
  WriteFile(Target(v.id) + "/keep", "grown");
  auto before = Stats(v, Target(v.id));
  ASSERT_GE(before.usage_size(), 1);

  auto cexp = testing::ExpandRequest(v.id, 1LL << 30);
  csi::v1::ControllerExpandVolumeResponse cresp;
  grpc::Status st = WithContext([&](auto* c) { return Controller().ControllerExpandVolume(c, cexp, &cresp); });
  ASSERT_TRUE(st.ok()) << st.error_message();

  csi::v1::NodeExpandVolumeRequest nexp;
  nexp.set_volume_id(v.id);
  nexp.set_volume_path(Target(v.id));
  nexp.mutable_capacity_range()->set_required_bytes(1LL << 30);
  csi::v1::NodeExpandVolumeResponse nresp;
  st = WithContext([&](auto* c) { return Node().NodeExpandVolume(c, nexp, &nresp); });
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << Log();
  EXPECT_GE(nresp.capacity_bytes(), 1LL << 30);
  auto after = Stats(v, Target(v.id));
  EXPECT_GT(after.usage(0).total(), before.usage(0).total() + (512LL << 20));
  EXPECT_EQ(testing::ReadFileOrEmpty(Target(v.id) + "/keep"), "grown");
  ASSERT_GRPC_OK(Unpublish(v));
  UnstageAndDelete(v);
}

TEST_F(PluginE2ETest, ReadOnlyPublishRefusesWrites) {
  Volume v = Create("ro", "ext4");
  ASSERT_GRPC_OK(Stage(v, "ext4"));
  ASSERT_GRPC_OK(Publish(v, "ext4", true));
  int fd = ::open((Target(v.id) + "/x").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  int err = errno;
  EXPECT_LT(fd, 0);
  EXPECT_EQ(err, EROFS);
  if (fd >= 0) ::close(fd);
  ASSERT_GRPC_OK(Unpublish(v));
  UnstageAndDelete(v);
}

TEST_F(PluginE2ETest, KillBetweenAttachAndMkfsThenRetryFormatsOnce) {
  Volume v = Create("kill-attach", "ext4");
  StopPlugin();
  ASSERT_TRUE(StartPlugin("node.stage.after-attach"));
  EXPECT_FALSE(Stage(v, "ext4").ok());
  ASSERT_TRUE(PluginKilledItself()) << Log();
  EXPECT_EQ(Uuid(v), "") << "killed before mkfs: still blank";
  ASSERT_TRUE(StartPlugin(""));
  grpc::Status st = Stage(v, "ext4");
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << Log();
  EXPECT_FALSE(Uuid(v).empty());
  EXPECT_EQ(FormatsLogged(v), 1);
  UnstageAndDelete(v);
}

TEST_F(PluginE2ETest, KillBetweenMkfsAndMountThenRetryNeverReformats) {
  Volume v = Create("kill-mkfs", "xfs", 320LL << 20);
  StopPlugin();
  ASSERT_TRUE(StartPlugin("node.stage.after-mkfs"));
  EXPECT_FALSE(Stage(v, "xfs").ok());
  ASSERT_TRUE(PluginKilledItself()) << Log();
  std::string uuid = Uuid(v);
  ASSERT_FALSE(uuid.empty());
  ASSERT_TRUE(StartPlugin(""));
  grpc::Status st = Stage(v, "xfs");
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << Log();
  EXPECT_EQ(Uuid(v), uuid);
  EXPECT_EQ(FormatsLogged(v), 1) << "one format in the whole log: the killed run's";

  // Data written now survives a later crash (after the unstage's unmount,
  // before detach) and the restart that follows.
  ASSERT_GRPC_OK(Publish(v, "xfs"));
  WriteFile(Target(v.id) + "/precious", "intact");
  ASSERT_GRPC_OK(Unpublish(v));
  StopPlugin();
  ASSERT_TRUE(StartPlugin("node.unstage.after-unmount"));
  EXPECT_FALSE(Unstage(v).ok());
  ASSERT_TRUE(PluginKilledItself());
  ASSERT_TRUE(StartPlugin(""));
  ASSERT_TRUE((st = Unstage(v)).ok()) << st.error_message();
  ASSERT_TRUE((st = Stage(v, "xfs")).ok()) << st.error_message();
  EXPECT_EQ(testing::ReadFileOrEmpty(Staging(v.id) + "/precious"), "intact");
  EXPECT_EQ(Uuid(v), uuid);
  UnstageAndDelete(v);
}

TEST_F(PluginE2ETest, RestartedPluginKeepsServingStagedVolumes) {
  Volume v = Create("restart", "ext4");
  ASSERT_NO_FATAL_FAILURE(StageAndPublish(v, "ext4"));
  WriteFile(Target(v.id) + "/f", "before restart");
  StopPlugin();
  ASSERT_TRUE(StartPlugin(""));
  EXPECT_EQ(testing::ReadFileOrEmpty(Target(v.id) + "/f"), "before restart");
  ASSERT_NO_FATAL_FAILURE(StageAndPublish(v, "ext4"));
  ExpectHealthy(v, Target(v.id));
  WriteFile(Target(v.id) + "/g", "after restart");
  ASSERT_GRPC_OK(Unpublish(v));
  ASSERT_GRPC_OK(Unstage(v));
  ASSERT_GRPC_OK(Stage(v, "ext4"));
  EXPECT_EQ(testing::ReadFileOrEmpty(Staging(v.id) + "/g"), "after restart");
  UnstageAndDelete(v);
}

// The real blockcsi killed with SIGKILL while a volume is staged, published
// and in use: its bridge lives on, the pod's filesystem keeps taking writes
// with no plugin at all, and a restarted plugin adopts the bridge (no second
// bridge, no second login) and unstages cleanly.
TEST_F(PluginE2ETest, PluginSigkillKeepsThePublishedVolumeWorking) {
  Volume v = Create("sigkill", "ext4");
  ASSERT_NO_FATAL_FAILURE(StageAndPublish(v, "ext4"));
  WriteFile(Target(v.id) + "/before", "written before the kill");
  const pid_t killed = plugin_->pid();
  plugin_->Kill9();
  ASSERT_FALSE(plugin_->running());
  EXPECT_NE(::kill(killed, 0), 0) << "blockcsi " << killed << " survived SIGKILL";
  std::set<pid_t> bridges_before = BridgePids(v.id);
  ASSERT_EQ(bridges_before.size(), 1u) << "the bridge died with the plugin";

  // No plugin at all: the published filesystem still takes writes, durably.
  WriteFile(Target(v.id) + "/after", "written with no plugin");
  int fd = ::open((Target(v.id) + "/after").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::fsync(fd), 0) << "an fsync with no plugin failed: " << std::strerror(errno);
  ::close(fd);

  ASSERT_TRUE(StartPlugin(""));
  ExpectHealthy(v, Target(v.id));
  EXPECT_EQ(BridgePids(v.id), bridges_before) << "the restarted plugin did not adopt the bridge";
  ASSERT_GRPC_OK(Unpublish(v));
  ASSERT_GRPC_OK(Unstage(v));
  EXPECT_TRUE(BridgePids(v.id).empty()) << "unstage left the adopted bridge running";
  ASSERT_GRPC_OK(Stage(v, "ext4"));
  EXPECT_EQ(testing::ReadFileOrEmpty(Staging(v.id) + "/before"), "written before the kill");
  EXPECT_EQ(testing::ReadFileOrEmpty(Staging(v.id) + "/after"), "written with no plugin");
  UnstageAndDelete(v);
}

TEST_F(PluginE2ETest, ConditionTurnsAbnormalWhenTheBridgeDies) {
  Volume v = Create("bridge-dies", "ext4");
  ASSERT_NO_FATAL_FAILURE(StageAndPublish(v, "ext4"));
  EXPECT_FALSE(Stats(v, Target(v.id)).volume_condition().abnormal());
  // The attach record names the bridge's pid (connector_state.bridge_pid).
  std::string record = testing::ReadFileOrEmpty(plugin_->state_dir() + "/attachments/" + v.id + ".json");
  size_t at = record.find("\"bridge_pid\"");
  ASSERT_NE(at, std::string::npos) << record;
  at = record.find_first_of("0123456789", at);
  pid_t bridge = static_cast<pid_t>(std::stol(record.substr(at)));
  ASSERT_GT(bridge, 1);
  ASSERT_EQ(::kill(bridge, SIGKILL), 0);
  bool abnormal = false;
  std::string message;
  // The plugin notices on its own schedule; poll (no timing assertion).
  for (int i = 0; i < 100 && !abnormal; ++i) {
    auto stats = Stats(v, Target(v.id));
    abnormal = stats.volume_condition().abnormal();
    message = stats.volume_condition().message();
    if (!abnormal) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(abnormal) << message;
  EXPECT_NE(message.find(v.id), std::string::npos) << message;
  // Teardown still works with the bridge gone.
  EXPECT_GRPC_OK(Unpublish(v));
  EXPECT_GRPC_OK(Unstage(v));
  Delete(v);
}

TEST_F(PluginE2ETest, ConcurrentStageOfOneVolumeFormatsOnce) {
  Volume v = Create("race", "ext4");
  std::vector<std::future<grpc::Status>> calls;
  for (int i = 0; i < 4; ++i) calls.push_back(std::async(std::launch::async, [&] { return Stage(v, "ext4"); }));
  int ok = 0;
  for (auto& c : calls) {
    grpc::Status st = c.get();
    EXPECT_TRUE(st.ok() || st.error_code() == grpc::StatusCode::ABORTED) << st.error_message();
    ok += st.ok();
  }
  EXPECT_GE(ok, 1);
  ASSERT_GRPC_OK(Stage(v, "ext4"));
  EXPECT_EQ(FormatsLogged(v), 1);
  UnstageAndDelete(v);
}

TEST_F(PluginE2ETest, SixteenVolumesStageConcurrently) {
  std::vector<Volume> volumes;
  for (int i = 0; i < 16; ++i) volumes.push_back(Create("many-" + std::to_string(i), "ext4", 256LL << 20));
  std::vector<std::future<grpc::Status>> calls;
  for (const auto& v : volumes) calls.push_back(std::async(std::launch::async, [&] { return Stage(v, "ext4"); }));
  for (size_t i = 0; i < calls.size(); ++i) {
    grpc::Status st = calls[i].get();
    EXPECT_TRUE(st.ok()) << volumes[i].id << ": " << st.error_message();
  }
  for (const auto& v : volumes) {
    auto stats = Stats(v, Staging(v.id));
    EXPECT_FALSE(stats.volume_condition().abnormal()) << v.id << ": " << stats.volume_condition().message();
    EXPECT_GRPC_OK(Unstage(v)) << v.id;
    Delete(v);
  }
}

}  // namespace
}  // namespace blockcsi
