// Issue #23: volumes of the userspace connector survive the plugin's
// container. The real plugin runs in a cgroup of its own under the cgroup v2
// hierarchy, as a container runtime would run it, with --bridge-cgroup
// naming a cgroup outside that one. Two volumes are staged and published on
// a private tgtd, and one I/O thread per volume writes (fsync) and reads back
// (O_DIRECT) file after file while 1 is written to the plugin's cgroup.kill
// (what the runtime does on a container restart or a DaemonSet update); not
// one of those may fail, during the kill or in the 10 s with no plugin at
// all. A new plugin in a fresh cgroup (the same binary, or another copy
// standing for a new version) adopts the bridges, and unstage + restage give
// back every byte. Nothing is left after teardown: processes, mounts, loop
// devices and the cgroups the test made. Needs root, cgroup v2 with
// cgroup.kill, tgtd and FUSE; skipped with the reason otherwise.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "attach/userspace_connector.h"
#include "bridge/bridge_cgroup.h"
#include "common/executor.h"
#include "common/host.h"
#include "csi.grpc.pb.h"
#include "support/block_io.h"
#include "support/leak_check.h"
#include "support/plugin_suite.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;

constexpr char kCgroupRoot[] = "/sys/fs/cgroup/unified";
// How long the volumes must keep working with no plugin running (issue #23).
constexpr auto kWithoutPlugin = 10s;
constexpr size_t kFileBytes = 256 * 1024;

using Volume = testing::CsiVolume;

// Deterministic contents per file name, so a restaged volume is checked
// against what was written without keeping every byte.
std::string Contents(const std::string& name) {
  std::string out(kFileBytes, '\0');
  uint64_t x = std::hash<std::string>{}(name) | 1;
  for (size_t i = 0; i < out.size(); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    out[i] = static_cast<char>(x);
  }
  return out;
}

// Written and fsync'd: the data goes through loop → FUSE → bridge → tgtd.
std::string WriteDurably(const std::string& path, const std::string& data) {
  int err = testing::WriteFileSynced(path, data);
  return err == 0 ? "" : "write " + path + ": " + std::strerror(err);
}

// Why this machine cannot run the test, or "".
std::string MissingCapability() {
  if (!testing::IsRoot()) return "needs root: tgtd, FUSE, loop devices, mount and cgroups";
  if (::access("/dev/fuse", R_OK | W_OK) != 0) return "needs /dev/fuse";
  struct statfs st {};
  if (::statfs(kCgroupRoot, &st) != 0 || st.f_type != CGROUP2_SUPER_MAGIC) {
    return std::string("needs the cgroup v2 hierarchy at ") + kCgroupRoot;
  }
  // cgroup.kill exists from Linux 5.14 on, in every non-root cgroup.
  std::string probe = std::string(kCgroupRoot) + "/blockcsi-probe-" + std::to_string(::getpid());
  if (::mkdir(probe.c_str(), 0755) != 0) return "cannot create a cgroup under " + std::string(kCgroupRoot);
  bool has_kill = ::access((probe + "/cgroup.kill").c_str(), W_OK) == 0;
  ::rmdir(probe.c_str());
  if (!has_kill) return "needs cgroup.kill (Linux 5.14 or later)";
  return "";
}

std::vector<pid_t> ProcsOf(const std::string& cgroup) {
  std::vector<pid_t> out;
  std::istringstream in(testing::ReadFileOrEmpty(cgroup + "/cgroup.procs"));
  pid_t pid = 0;
  while (in >> pid) out.push_back(pid);
  return out;
}

// Running and not a zombie (an exited bridge waits for init to reap it).
bool Running(pid_t pid) {
  std::string stat = testing::ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/stat");
  size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// The plugin as node "e2e-node" (support/plugin_suite.h: tgtd, plugin, leak
// check), started by each test in a cgroup of its own.
class PluginRestartTest : public testing::PluginSuiteTest {
 protected:
  PluginRestartTest() : PluginSuiteTest("e2e-node") {}

  void SetUp() override {
    if (std::string why = MissingCapability(); !why.empty()) GTEST_SKIP() << why;
    SetUpTgtdAndPlugin(dir_.path());
    if (IsSkipped() || HasFatalFailure()) return;
    prefix_ = std::string(kCgroupRoot) + "/blockcsi-test-" + std::to_string(::getpid()) + "-";
    bridge_cgroup_ = prefix_ + "bridges";
    baseline_ = testing::TakeLeakSnapshot(Scope());
  }

  void TearDown() override {
    if (!plugin_) return;
    PluginSuiteTest::TearDown();
    // Only what this test made: its cgroups (empty by now unless a check
    // above failed; their processes are this test's own).
    for (const auto& cg : made_cgroups_) {
      for (pid_t pid : ProcsOf(cg)) ::kill(pid, SIGKILL);
      for (int i = 0; i < 100 && !ProcsOf(cg).empty(); ++i) std::this_thread::sleep_for(20ms);
      ::rmdir(cg.c_str());
    }
  }

  std::string MakeCgroup(const std::string& name) {
    std::string cg = prefix_ + name;
    EXPECT_EQ(::mkdir(cg.c_str(), 0755), 0) << cg << ": " << std::strerror(errno);
    made_cgroups_.push_back(cg);
    return cg;
  }

  // `with_bridge_cgroup` false: the bridges stay in the plugin's cgroup (the
  // behaviour before issue #23, kept as the control experiment).
  bool StartPlugin(const std::string& cgroup, const std::string& binary, bool with_bridge_cgroup = true) {
    testing::PluginOptions options;
    options.cgroup = cgroup;
    options.binary = binary;
    if (with_bridge_cgroup) options.extra_args = {"--bridge-cgroup", bridge_cgroup_};
    return PluginSuiteTest::StartPlugin(options);
  }

  // What a container runtime does to the plugin's container.
  void KillCgroup(const std::string& cgroup) {
    std::ofstream kill(cgroup + "/cgroup.kill");
    kill << "1\n";
    kill.flush();
    ASSERT_TRUE(kill) << "cannot write " << cgroup << "/cgroup.kill";
  }

  Volume Create(const std::string& name) { return CreatePublished(name, 128LL << 20); }

  grpc::Status Delete(const Volume& v) {
    grpc::Status st = calls_.ControllerUnpublish(*plugin_, v);
    return st.ok() ? calls_.Delete(*plugin_, v) : st;
  }

  grpc::Status StageAndPublish(const Volume& v) {
    grpc::Status st = calls_.Stage(*plugin_, v);
    return st.ok() ? calls_.Publish(*plugin_, v) : st;
  }

  grpc::Status UnpublishAndUnstage(const Volume& v) {
    grpc::Status st = calls_.Unpublish(*plugin_, v);
    return st.ok() ? calls_.Unstage(*plugin_, v) : st;
  }

  // Writes file `name` on `v` and reads it back past the page cache;
  // "" or what failed.
  std::string WriteAndCheck(const Volume& v, const std::string& name) {
    std::string e = WriteAndReadBack(v, name);
    if (e.empty()) written_[v.id].push_back(name);
    return e;
  }

  // The same without bookkeeping: safe to call from an I/O thread.
  std::string WriteAndReadBack(const Volume& v, const std::string& name) const {
    std::string path = plugin_->target_path(v.id) + "/" + name;
    std::string data = Contents(v.id + "/" + name);
    if (std::string e = WriteDurably(path, data); !e.empty()) return e;
    std::string e;
    std::string back = testing::ReadDirect(path, 0, kFileBytes, &e);
    if (!e.empty()) return e;
    return back == data ? "" : path + " reads back different bytes";
  }

  // Every file written to `v` so far has its bytes.
  void ExpectAllIntact(const Volume& v) {
    for (const auto& name : written_[v.id]) {
      std::string path = plugin_->target_path(v.id) + "/" + name;
      std::string e;
      std::string back = testing::ReadDirect(path, 0, kFileBytes, &e);
      EXPECT_EQ(e, "");
      EXPECT_TRUE(back == Contents(v.id + "/" + name)) << path << " lost its bytes";
    }
  }

  // Bridge pids from the attach records.
  std::map<std::string, pid_t> BridgePids() {
    std::map<std::string, pid_t> out;
    for (const auto& [id, _] : written_) {
      auto pids = FindBridgePids(*MachineHost(), plugin_->state_dir() + "/bridges/" + id + "/ctl.sock");
      out[id] = pids.size() == 1 ? pids.front() : -1;
    }
    return out;
  }

  // `blockctl -o json <args>` on this node: exit code and parsed stdout.
  std::pair<int, nlohmann::json> Blockctl(std::vector<std::string> args) {
    args.insert(args.begin(),
                {"--state-dir", plugin_->state_dir(), "--endpoint", "unix://" + plugin_->socket(), "-o", "json"});
    auto r = MakeProcessExecutor()->Run(Command(testing::BinDir() + "/blockctl").Args(args).Timeout(120s));
    if (!r.ok()) return {-1, {}};
    try {
      return {r->exit_code, nlohmann::json::parse(r->stdout_text)};
    } catch (const nlohmann::json::exception&) {
      ADD_FAILURE() << "blockctl printed no JSON: " << r->stdout_text << r->stderr_text;
      return {r->exit_code, {}};
    }
  }

  // blockctl status: each volume's verdict and whose its bridge is.
  std::map<std::string, std::pair<std::string, std::string>> StatusOf() {
    std::map<std::string, std::pair<std::string, std::string>> out;
    auto [code, j] = Blockctl({"status"});
    for (const auto& v : j.value("volumes", nlohmann::json::array())) {
      out[v.value("subject", "")] = {v.value("verdict", ""), v.value("bridge", "")};
    }
    return out;
  }

  // A line of the plugin's log with `message` about volume `id`.
  bool Logged(const std::string& message, const std::string& id) {
    std::istringstream log(testing::ReadFileOrEmpty(plugin_->log_path()));
    std::string line;
    while (std::getline(log, line)) {
      if (line.find(message) != std::string::npos && line.find("volume_id=" + id) != std::string::npos) return true;
    }
    return false;
  }

  void Scenario(bool new_version);

  std::string prefix_;
  std::string bridge_cgroup_;
  std::vector<std::string> made_cgroups_;
  std::map<std::string, std::vector<std::string>> written_;
};

void PluginRestartTest::Scenario(bool new_version) {
  // Two "images" of the plugin for an update: copies of this build's binary.
  std::string old_binary, new_binary;
  if (new_version) {
    std::filesystem::create_directories(dir_.Join("v1"));
    std::filesystem::create_directories(dir_.Join("v2"));
    old_binary = dir_.Join("v1/blockcsi");
    new_binary = dir_.Join("v2/blockcsi");
    // Each image ships the plugin with its bridge programs beside it.
    for (const char* program : {"/blockcsi", "/blockcsi-bridge"}) {
      std::filesystem::copy_file(testing::BinDir() + program, dir_.Join("v1") + program);
      std::filesystem::copy_file(testing::BinDir() + program, dir_.Join("v2") + program);
    }
  }
  // The plugin creates --bridge-cgroup itself; the test removes it at the end.
  made_cgroups_.push_back(bridge_cgroup_);
  std::string first = MakeCgroup("plugin-a");
  ASSERT_TRUE(StartPlugin(first, old_binary));
  ASSERT_TRUE(std::filesystem::exists(bridge_cgroup_ + "/cgroup.procs")) << "the plugin did not create the cgroup";

  std::vector<Volume> volumes = {Create("restart-a"), Create("restart-b")};
  for (const auto& v : volumes) ASSERT_GRPC_OK(StageAndPublish(v));
  for (const auto& v : volumes) ASSERT_EQ(WriteAndCheck(v, "before-kill"), "");
  std::map<std::string, pid_t> bridges = BridgePids();
  for (const auto& [id, pid] : bridges) {
    ASSERT_GT(pid, 0) << "no single bridge for " << id;
    EXPECT_TRUE(InCgroup(*MachineHost(), bridge_cgroup_, pid)) << "bridge of " << id;
    EXPECT_FALSE(InCgroup(*MachineHost(), first, pid)) << "bridge of " << id;
    // No pipe, file or socket of the plugin's (its log included) stays open
    // in the bridge: stdin and stdout are /dev/null, stderr its own log.
    std::string fd = "/proc/" + std::to_string(pid) + "/fd/";
    std::error_code ec;
    EXPECT_EQ(std::filesystem::read_symlink(fd + "0", ec).string(), "/dev/null");
    EXPECT_EQ(std::filesystem::read_symlink(fd + "1", ec).string(), "/dev/null");
    EXPECT_EQ(std::filesystem::read_symlink(fd + "2", ec).string(),
              plugin_->state_dir() + "/bridges/" + id + "/bridge.log");
    for (const auto& entry : std::filesystem::directory_iterator(fd, ec)) {
      std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
      EXPECT_NE(target, plugin_->log_path()) << "bridge of " << id << " holds the plugin's log as " << entry.path();
    }
  }

  // I/O on both volumes runs through the kill and for kWithoutPlugin after
  // it: each round writes a file durably and reads it back past the cache.
  struct IoLoop {
    std::vector<std::string> names;
    std::string error;
    std::thread thread;
  };
  std::atomic<bool> stop{false};
  std::vector<IoLoop> loops(volumes.size());
  for (size_t i = 0; i < volumes.size(); ++i) {
    loops[i].thread = std::thread([this, &stop, &v = volumes[i], &loop = loops[i]] {
      for (int n = 0; !stop.load(); ++n) {
        std::string name = "io-" + std::to_string(n);
        loop.error = WriteAndReadBack(v, name);
        if (!loop.error.empty()) return;
        loop.names.push_back(name);
        std::this_thread::sleep_for(100ms);
      }
    });
  }
  auto join = [&] {
    stop = true;
    for (auto& loop : loops) {
      if (loop.thread.joinable()) loop.thread.join();
    }
  };
  std::this_thread::sleep_for(1s);  // I/O in flight when the kill comes

  // The runtime stops the container: every process in its cgroup dies.
  KillCgroup(first);
  bool killed = plugin_->WaitKilledByFaultPoint();
  auto dead_at = std::chrono::steady_clock::now();
  for (int i = 0; i < 100 && !ProcsOf(first).empty(); ++i) std::this_thread::sleep_for(20ms);
  bool emptied = ProcsOf(first).empty();
  if (!killed || !emptied) join();
  ASSERT_TRUE(killed) << "the plugin did not die by SIGKILL";
  ASSERT_TRUE(emptied) << "processes are left in " << first;
  if (new_version) std::filesystem::remove_all(dir_.Join("v1"));  // the old image is gone too

  // blockctl names the bridges of the dead plugin, and cleanup leaves them
  // serving (stopping one would fail the filesystem under the pods).
  for (const auto& v : volumes) {
    EXPECT_EQ(StatusOf()[v.id], std::make_pair(std::string("plugin gone"), std::string("plugin gone")));
  }
  auto [cleanup_code, cleanup] = Blockctl({"cleanup", "--apply"});
  EXPECT_EQ(cleanup_code, 1) << cleanup.dump();
  EXPECT_TRUE(cleanup.value("steps", nlohmann::json::array()).empty()) << cleanup.dump();
  EXPECT_EQ(cleanup.value("skipped", nlohmann::json::array()).size(), volumes.size()) << cleanup.dump();

  // No plugin at all: the volumes keep serving reads and writes.
  while (std::chrono::steady_clock::now() < dead_at + kWithoutPlugin && !stop) {
    bool failed = false;
    for (const auto& loop : loops) failed = failed || !loop.thread.joinable() || !loop.error.empty();
    if (failed) break;
    std::this_thread::sleep_for(200ms);
  }
  auto served = std::chrono::steady_clock::now() - dead_at;
  join();
  for (size_t i = 0; i < volumes.size(); ++i) {
    ASSERT_EQ(loops[i].error, "") << volumes[i].id << " after " << loops[i].names.size() << " rounds";
    written_[volumes[i].id].insert(written_[volumes[i].id].end(), loops[i].names.begin(), loops[i].names.end());
    std::cout << "[ INFO ] " << volumes[i].id << ": " << loops[i].names.size()
              << " durable write + direct read rounds, "
              << std::chrono::duration_cast<std::chrono::milliseconds>(served).count()
              << " ms of them after the plugin died\n";
  }
  EXPECT_EQ(BridgePids(), bridges) << "the bridges are not the ones from before the kill";

  // A new plugin (or version) in a fresh cgroup adopts the bridges.
  std::string second = MakeCgroup("plugin-b");
  ASSERT_TRUE(StartPlugin(second, new_binary));
  for (const auto& v : volumes) {
    EXPECT_TRUE(Logged("adopted running bridge", v.id)) << plugin_->LogTail();
    EXPECT_EQ(StatusOf()[v.id], std::make_pair(std::string("healthy"), std::string("adopted")));
    ASSERT_EQ(WriteAndCheck(v, "after-adoption"), "");
  }

  // Unstage and restage through the new plugin: every byte is there.
  for (const auto& v : volumes) ASSERT_GRPC_OK(UnpublishAndUnstage(v));
  for (const auto& [id, pid] : bridges) {
    // The bridge answers the shutdown, then exits: give the exit a moment.
    for (int i = 0; i < 250 && Running(pid); ++i) std::this_thread::sleep_for(20ms);
    EXPECT_FALSE(Running(pid)) << "old bridge of " << id << " still runs";
  }
  for (const auto& v : volumes) ASSERT_GRPC_OK(StageAndPublish(v));
  for (const auto& v : volumes) ExpectAllIntact(v);
  for (const auto& v : volumes) {
    EXPECT_EQ(StatusOf()[v.id], std::make_pair(std::string("healthy"), std::string("started")));
  }
  for (const auto& [id, pid] : BridgePids()) {
    ASSERT_GT(pid, 0);
    EXPECT_TRUE(InCgroup(*MachineHost(), bridge_cgroup_, pid));
    if (new_version) {
      std::error_code ec;
      EXPECT_EQ(std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec).string(),
                dir_.Join("v2/blockcsi-bridge"))
          << "a restaged bridge runs the new version";
    }
  }

  // Teardown through the plugin, then nothing may be left.
  for (const auto& v : volumes) EXPECT_GRPC_OK(UnpublishAndUnstage(v));
  for (const auto& v : volumes) EXPECT_GRPC_OK(Delete(v));
  plugin_->Stop();
  EXPECT_EQ(testing::MountsUnder(dir_.path()), std::vector<std::string>{});
  EXPECT_EQ(testing::LoopDevicesUnder(dir_.path()), std::vector<std::string>{});
  EXPECT_EQ(testing::ProcessesNaming(dir_.path()), std::vector<pid_t>{});
  for (const auto& cg : made_cgroups_) {
    EXPECT_EQ(ProcsOf(cg), std::vector<pid_t>{}) << cg;
    EXPECT_EQ(::rmdir(cg.c_str()), 0) << cg << ": " << std::strerror(errno);
  }
  made_cgroups_.clear();
}

TEST_F(PluginRestartTest, BridgesSurviveKillOfThePluginsCgroupAndAreAdopted) { Scenario(false); }

// The control experiment: without --bridge-cgroup the same kill takes the
// bridge down and the filesystem fails, so the scenario above would notice
// a bridge that stayed behind. The next plugin still cleans up after it.
TEST_F(PluginRestartTest, WithoutBridgeCgroupTheKillFailsTheFilesystem) {
  std::string first = MakeCgroup("plugin-a");
  ASSERT_TRUE(StartPlugin(first, "", /*with_bridge_cgroup=*/false));
  Volume v = Create("control");
  ASSERT_GRPC_OK(StageAndPublish(v));
  ASSERT_EQ(WriteAndCheck(v, "before-kill"), "");
  pid_t bridge = BridgePids()[v.id];
  ASSERT_GT(bridge, 0);
  EXPECT_TRUE(InCgroup(*MachineHost(), first, bridge)) << "the bridge left the plugin's cgroup";

  KillCgroup(first);
  ASSERT_TRUE(plugin_->WaitKilledByFaultPoint());
  for (int i = 0; i < 250 && Running(bridge); ++i) std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(Running(bridge)) << "the bridge survived the kill of its cgroup";
  EXPECT_NE(WriteAndCheck(v, "after-kill"), "") << "I/O worked with the bridge gone";

  // A new plugin unstages what is left (device gone, FUSE aborted).
  std::string second = MakeCgroup("plugin-b");
  ASSERT_TRUE(StartPlugin(second, "", /*with_bridge_cgroup=*/false));
  EXPECT_GRPC_OK(UnpublishAndUnstage(v));
  EXPECT_GRPC_OK(Delete(v));
  plugin_->Stop();
  EXPECT_EQ(testing::MountsUnder(dir_.path()), std::vector<std::string>{});
  EXPECT_EQ(testing::LoopDevicesUnder(dir_.path()), std::vector<std::string>{});
  EXPECT_EQ(testing::ProcessesNaming(dir_.path()), std::vector<pid_t>{});
}

TEST_F(PluginRestartTest, RollingUpdateAdoptsTheOldVersionsBridges) { Scenario(true); }

// A bridge that cannot leave the plugin's cgroup would die with the next
// restart of the container: it refuses to start, and the NodeStage fails
// with a final code (FAILED_PRECONDITION) that leaves nothing behind.
TEST_F(PluginRestartTest, ABridgeThatCannotMoveRefusesAndLeavesNothing) {
  std::string outer = MakeCgroup("outer");
  bridge_cgroup_ = outer + "/bridges";
  made_cgroups_.insert(made_cgroups_.begin(), bridge_cgroup_);  // removed before its parent
  ASSERT_TRUE(StartPlugin(MakeCgroup("plugin-a"), ""));
  ASSERT_TRUE(std::filesystem::exists(bridge_cgroup_ + "/cgroup.procs"));
  // The hierarchy changes under the running plugin (an admin, another tool).
  ASSERT_EQ(::rmdir(bridge_cgroup_.c_str()), 0);
  ASSERT_EQ(::rmdir(outer.c_str()), 0);

  Volume v = Create("no-cgroup");
  const testing::LeakSnapshot before_stage = testing::TakeLeakSnapshot(Scope(v.id));
  grpc::Status st = StageAndPublish(v);
  // Nothing left (bridge, FUSE mount, loop device, record, tgtd session):
  // the one leak checker, before anything could clean up.
  ExpectNothingLeftSince(before_stage, "the refused stage", v.id);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find(v.id), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find(bridge_cgroup_), std::string::npos) << st.error_message();
  // Nothing left: no bridge, FUSE mount, loop device, bridge dir or record.
  std::string bridge_dir = plugin_->state_dir() + "/bridges/" + v.id;
  EXPECT_EQ(FindBridgePids(*MachineHost(), bridge_dir + "/ctl.sock"), std::vector<int>{});
  EXPECT_EQ(testing::MountsUnder(dir_.path()), std::vector<std::string>{});
  EXPECT_EQ(testing::LoopDevicesUnder(dir_.path()), std::vector<std::string>{});
  EXPECT_FALSE(std::filesystem::exists(bridge_dir));
  EXPECT_FALSE(std::filesystem::exists(plugin_->state_dir() + "/attachments/" + v.id + ".json"));
  EXPECT_GRPC_OK(Delete(v));
}

// A --bridge-cgroup that cannot work fails the plugin's start, naming it,
// instead of every later NodeStage.
TEST_F(PluginRestartTest, ABridgeCgroupOutsideTheCgroupHierarchyFailsTheStart) {
  testing::PluginOptions options;
  std::string bad = dir_.Join("not-a-cgroup/bridges");
  options.extra_args = {"--bridge-cgroup", bad};
  std::string error;
  EXPECT_FALSE(plugin_->Start(options, &error));
  EXPECT_NE(error.find(bad + ": " + dir_.Join("not-a-cgroup") + " is not a cgroup v2 directory"), std::string::npos)
      << error;
  EXPECT_FALSE(std::filesystem::exists(bad));
}

}  // namespace
}  // namespace blockcsi
