// End to end, two nodes (issue #7): a storage host and two nodes, each its
// own network namespace joined by a bridge in the storage namespace. On the
// storage host a real tgtd and the real blockcsi-target agent (mTLS, with a
// throw-away CA made by openssl here); a real `blockcsi --mode controller
// --backend remote` in a namespace of its own; one real `blockcsi --mode
// node --connector userspace` per node namespace. Our CO simulator drives
// them as external-provisioner, external-attacher and kubelet would. Only
// the network is namespaced (nsenter --net), so the nodes' FUSE files, loop
// devices and mounts are visible to the test.
//
// Needs root, tgtd, /dev/fuse, ip netns, nsenter and openssl; each test
// skips with the reason otherwise. Everything started is stopped by its pid
// and every mount, loop device and namespace is removed, also on failure.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/atomic_file.h"
#include "common/executor.h"
#include "contract/publish_context.h"
#include "e2e/co_simulator.h"
#include "e2e/e2e_env.h"
#include "e2e/netns_topology.h"
#include "support/block_io.h"
#include "support/leak_check.h"
#include "support/node_clean.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi::e2e {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::Pattern;
using testing::PluginOptions;
using testing::PluginUnderTest;
using testing::TempDir;
using testing::TgtdHarness;

constexpr size_t kDataBytes = 1 << 20;
constexpr size_t kIoChunk = 64 << 10;

// Writes `data` to `path` and fsyncs the file and its directory, as a
// database would before it reports a commit.
::testing::AssertionResult WriteDurably(const std::string& path, const std::string& data) {
  int err = testing::WriteFileSynced(path, data);
  if (err == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "write " << path << ": " << std::strerror(err);
}

// A pod's workload: O_DIRECT writes of 64 KiB, each followed by fdatasync,
// round and round an 8 MiB file, until stopped. Records what completed and
// what failed; never asserts (it runs on its own thread).
class Writer {
 public:
  explicit Writer(std::string path) : path_(std::move(path)) {}
  ~Writer() { Stop(); }
  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }
  // Joins: a write stuck in the kernel finishes (or fails) first, which
  // the bridge's I/O timeout bounds.
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t completed() const { return completed_; }
  uint64_t failed() const { return failed_; }
  std::string first_error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return first_error_;
  }
  std::string last_error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_error_;
  }
  // Waits until `pred` holds or `timeout` passes.
  bool WaitFor(const std::function<bool()>& pred, std::chrono::seconds timeout) const {
    auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (pred()) return true;
      std::this_thread::sleep_for(100ms);
    }
    return pred();
  }

 private:
  void Note(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.empty()) first_error_ = what;
    last_error_ = what;
    ++failed_;
  }
  void Loop() {
    int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
    if (fd < 0) {
      Note("open: " + std::string(std::strerror(errno)));
      return;
    }
    void* buf = nullptr;
    if (::posix_memalign(&buf, 4096, kIoChunk) != 0) {
      ::close(fd);
      return;
    }
    std::memset(buf, 0x5a, kIoChunk);
    for (uint64_t i = 0; !stop_; ++i) {
      off_t offset = static_cast<off_t>((i % 128) * kIoChunk);
      if (::pwrite(fd, buf, kIoChunk, offset) != static_cast<ssize_t>(kIoChunk)) {
        Note("write: " + std::string(std::strerror(errno)));
        std::this_thread::sleep_for(200ms);
        continue;
      }
      if (::fdatasync(fd) != 0) {
        Note("fdatasync: " + std::string(std::strerror(errno)));
        std::this_thread::sleep_for(200ms);
        continue;
      }
      ++completed_;
      std::this_thread::sleep_for(20ms);
    }
    std::free(buf);
    ::close(fd);
  }

  std::string path_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> completed_{0};
  std::atomic<uint64_t> failed_{0};
  mutable std::mutex mu_;
  std::string first_error_;
  std::string last_error_;
};

// A CA, the agent's certificate for the storage address and the
// controller's client certificate, made by openssl in `dir`.
bool MakePki(const std::string& dir, const std::string& server_ip, std::string* error) {
  std::string ext = dir + "/san.ext";
  if (!WriteFileAtomically(ext, "subjectAltName=IP:" + server_ip + "\n").ok()) {
    *error = "cannot write " + ext;
    return false;
  }
  auto run = [&](const std::vector<std::string>& argv) {
    std::string out;
    int code = testing::RunProgram(argv, &out);
    if (code != 0) *error = argv[0] + " " + argv[1] + ": " + out;
    return code == 0;
  };
  if (!run({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=e2e-ca", "-keyout",
            dir + "/ca.key", "-out", dir + "/ca.crt"})) {
    return false;
  }
  for (const std::string name : {"server", "client"}) {
    std::vector<std::string> sign = {"openssl",
                                     "x509",
                                     "-req",
                                     "-in",
                                     dir + "/" + name + ".csr",
                                     "-CA",
                                     dir + "/ca.crt",
                                     "-CAkey",
                                     dir + "/ca.key",
                                     "-CAcreateserial",
                                     "-days",
                                     "2",
                                     "-out",
                                     dir + "/" + name + ".crt"};
    if (name == "server") sign.insert(sign.end(), {"-extfile", ext});
    if (!run({"openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=e2e-" + name, "-keyout",
              dir + "/" + name + ".key", "-out", dir + "/" + name + ".csr"}) ||
        !run(sign)) {
      return false;
    }
  }
  return true;
}

class TwoNodeE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = Clock::now();
    if (std::string why = MissingNetnsE2eCapability(); !why.empty()) GTEST_SKIP() << why;

    prefix_ = FreshNamespacePrefix("bcsi");
    std::string error;
    net_ = NetnsTopology::Create(prefix_, {"ctl", "n1", "n2"}, &error);
    // `ip netns` works here (checked above): a topology that will not build is a failed setup.
    ASSERT_TRUE(net_) << "cannot build the network namespaces: " << error;

    std::filesystem::create_directories(root_.Join("pki"));
    std::filesystem::create_directories(root_.Join("store"));
    ASSERT_TRUE(MakePki(root_.Join("pki"), net_->store_address(), &error)) << error;

    testing::TgtdOptions tgtd_options;
    tgtd_options.address = net_->store_address();
    tgtd_options.port = kIscsiPort;
    tgtd_options.command_prefix = net_->StorePrefix();
    tgtd_ = TgtdHarness::Start(tgtd_options, &error);
    ASSERT_TRUE(tgtd_) << "tgtd in " << net_->store_namespace() << ": " << error;

    StartAgent();
    if (HasFatalFailure()) return;

    controller_ = std::make_unique<PluginUnderTest>(root_.Join("ctl"), nullptr);
    PluginOptions c;
    c.mode = "controller";
    c.backend = "remote";
    c.node_id = "ctl";
    c.command_prefix = net_->HostPrefix("ctl");
    c.extra_args = {"--target-agent", agent_address(), "--tls-cert", root_.Join("pki/client.crt"), "--tls-key",
                    root_.Join("pki/client.key"), "--tls-ca", root_.Join("pki/ca.crt"), "--log-level", "debug",
                    // With the test's channel still open, gRPC's Shutdown waits out the
                    // whole grace (10 s by default) on every stop.
                    "--shutdown-grace", "2s"};
    ASSERT_TRUE(controller_->Start(c, &error)) << error;

    co_ = std::make_unique<CoSimulator>(&controller_->controller());
    for (const std::string node : {"n1", "n2"}) {
      std::vector<std::string> extra;
      if (!node_io_timeout_.empty()) extra = {"--bridge-io-timeout", node_io_timeout_};
      auto plugin = StartNodePlugin(*net_, node, root_.Join(node + "/plugin"), extra, &error);
      ASSERT_TRUE(plugin) << node << ": " << error;
      co_->AddNode(node, &plugin->node(), root_.Join(node + "/kubelet"));
      nodes_[node] = std::move(plugin);
    }
    baseline_ = testing::TakeLeakSnapshot(Scopes());
    have_baseline_ = true;
    std::cout << "[e2e] set-up (namespaces, certificates, tgtd, agent, controller, 2 nodes): "
              << Seconds(Clock::now() - started) << " s\n";
  }

  void TearDown() override {
    auto started = Clock::now();
    // Before anything is cleaned: a test that passed went through the CO's
    // whole teardown and must have left nothing since SetUp.
    if (have_baseline_ && !HasFailure()) ExpectNothingLeftSince(baseline_, "the test (before the fixture cleans)");
    // Whatever a test left: links up again (a cut link would make every
    // unmount below wait for I/O timeouts), then the nodes' mounts, loop
    // devices and bridges, then the processes, then the namespaces.
    if (net_) {
      net_->SetHostLink("n1", true, nullptr);
      net_->SetHostLink("n2", true, nullptr);
    }
    if (HasFailure()) DumpLogs();
    for (auto& [name, plugin] : nodes_) plugin->Stop();
    std::cout << "[e2e] tear-down: nodes stopped after " << Seconds(Clock::now() - started) << " s\n";
    for (auto& [name, plugin] : nodes_) ForceCleanNode(name);
    if (controller_) controller_->Stop();
    std::cout << "[e2e] tear-down: controller stopped after " << Seconds(Clock::now() - started) << " s\n";
    StopAgent();
    tgtd_.reset();
    std::cout << "[e2e] tear-down: agent, tgtd stopped after " << Seconds(Clock::now() - started) << " s\n";
    // Every process ran inside a namespace: none may be left before the
    // namespaces go (a live process would keep its namespace alive).
    testing::CleanUpAndExpectNothingUnder(root_.path());
    net_.reset();
    if (!prefix_.empty()) {
      EXPECT_TRUE(NetnsTopology::ListedNamespaces(prefix_).empty()) << "network namespaces left: " << prefix_ << "-*";
    }
    std::cout << "[e2e] tear-down: " << Seconds(Clock::now() - started) << " s\n";
  }

  // Everything the daemons can leave, in the one leak checker's terms:
  // processes, mounts and loop devices under the test's root, both nodes'
  // attach records, the agent's pool files, tgtd's targets, LUNs, ACLs and
  // sessions. The daemons themselves (tgtd, agent, controller, node plugins)
  // are not leaks; a bridge is.
  std::vector<testing::LeakScope> Scopes(const std::string& volume_id = "") {
    std::vector<pid_t> daemons;
    if (tgtd_) daemons.push_back(tgtd_->pid());
    if (agent_) daemons.push_back(agent_->pid());
    if (controller_ && controller_->running()) daemons.push_back(controller_->pid());
    for (auto& [name, plugin] : nodes_) {
      if (plugin->running()) daemons.push_back(plugin->pid());
    }
    std::vector<testing::LeakScope> scopes(1);
    scopes[0].dir = root_.path();
    scopes[0].volume_id = volume_id;
    scopes[0].pool_dir = pool_dir();
    scopes[0].tgtd = tgtd_.get();
    scopes[0].ignore_pids = daemons;
    for (auto& [name, plugin] : nodes_) {
      testing::LeakScope records;
      records.state_dir = plugin->state_dir();
      scopes.push_back(records);
    }
    return scopes;
  }
  void ExpectNothingLeftSince(const testing::LeakSnapshot& before, const std::string& after,
                              const std::string& volume_id = "") {
    auto left = testing::NewItemsAfterSettling(before, Scopes(volume_id));
    EXPECT_TRUE(left.empty()) << "left behind after " << after << ":\n" << testing::DescribeItems(left);
  }

  std::string agent_address() const { return net_->store_address() + ":" + std::to_string(kAgentPort); }
  std::string agent_log() const { return root_.Join("store/agent.log"); }
  std::string pool_dir() const { return root_.Join("store/pool"); }
  std::string image_path(const std::string& volume_id) const { return pool_dir() + "/images/" + volume_id + ".img"; }
  PluginUnderTest& node(const std::string& name) { return *nodes_.at(name); }

  void StartAgent() {
    std::vector<std::string> argv = net_->StorePrefix();
    argv.insert(argv.end(), {testing::BinDir() + "/blockcsi-target", "--pool", pool_dir(), "--tgt-control-port",
                             std::to_string(tgtd_->control_port()), "--portal", tgtd_->portal(), "--listen",
                             agent_address(), "--tls-cert", root_.Join("pki/server.crt"), "--tls-key",
                             root_.Join("pki/server.key"), "--tls-ca", root_.Join("pki/ca.crt"),
                             // Short, so that a tgtd restart is repaired within the test.
                             "--reconcile-interval", "1s", "--log-level", "debug"});
    agent_ = std::make_unique<ChildProcess>(argv, agent_log());
    auto deadline = Clock::now() + 20s;
    while (Clock::now() < deadline) {
      if (testing::ReadFileOrEmpty(agent_log()).find("serving") != std::string::npos) return;
      if (!agent_->running()) break;
      std::this_thread::sleep_for(50ms);
    }
    FAIL() << "blockcsi-target did not serve on " << agent_address() << ":\n" << testing::ReadFileOrEmpty(agent_log());
  }
  void StopAgent() {
    if (!agent_) return;
    agent_->Signal(SIGTERM);
    if (agent_->Wait(15s) < 0) agent_->Signal(SIGKILL);
    agent_.reset();  // SIGKILL by pid and reaped
  }

  // What a node admin does to a node whose bridge no longer answers, and
  // what the tear-down does to a node a test left: bridges first (a hung
  // one would block every unmount below), then the pods' and staging
  // mounts, then the loop devices while their FUSE files still have a
  // path, then the rest. CleanUpUnder alone unmounts the FUSE file first,
  // lazily when a loop device still holds it, which hides that loop device
  // from it (its backing file turns into "/lun").
  void ForceCleanNode(const std::string& node_id) {
    KillBridges(node_id);
    auto exec = MakeProcessExecutor();
    for (const auto& m : testing::MountsUnder(root_.Join(node_id + "/kubelet"))) {
      (void)exec->Run(Command("umount").Arg(m).Timeout(30s));
    }
    for (const auto& loop : testing::LoopDevicesUnder(root_.Join(node_id))) {
      (void)exec->Run(Command("losetup").Arg("-d").Arg(loop).Timeout(30s));
    }
    testing::CleanUpUnder(root_.Join(node_id));
  }
  // SIGKILLs the node's bridge processes by pid; how many there were.
  size_t KillBridges(const std::string& node_id) {
    auto pids = testing::ProcessesNaming(root_.Join(node_id + "/plugin/state/bridges"));
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    for (int i = 0; i < 100 && !testing::ProcessesNaming(root_.Join(node_id + "/plugin/state/bridges")).empty(); ++i) {
      std::this_thread::sleep_for(50ms);
    }
    return pids.size();
  }

  void DumpLogs() {
    auto tail = [](const std::string& text) {
      return text.size() > 4000 ? "...\n" + text.substr(text.size() - 4000) : text;
    };
    std::cout << (co_ ? co_->EventLog() : "") << "--- agent log:\n"
              << tail(testing::ReadFileOrEmpty(agent_log())) << "\n";
    if (controller_) std::cout << "--- controller log:\n" << controller_->LogTail(4000) << "\n";
    for (auto& [name, plugin] : nodes_) std::cout << "--- node " << name << " log:\n" << plugin->LogTail(4000) << "\n";
  }

  // Provisions a filesystem volume and runs a pod using it on `node_id`.
  void ProvisionAndRun(const std::string& pvc, const std::string& node_id, const std::string& pod_name,
                       PersistentVolume* pv, Pod* pod) {
    ASSERT_TRUE(testing::GrpcOk(co_->Provision(pvc, kVolumeBytes, testing::MountCapability("ext4"), {}, pv),
                                controller_->LogTail()))
        << co_->EventLog();
    ASSERT_TRUE(testing::GrpcOk(co_->Attach(*pv, node_id), controller_->LogTail())) << co_->EventLog();
    ASSERT_TRUE(testing::GrpcOk(co_->RunPod(pod_name, node_id, *pv, pod), node(node_id).LogTail())) << co_->EventLog();
  }

  // A pod running on its volume, with the bytes it wrote to data.bin.
  struct WrittenPod {
    PersistentVolume pv;
    Pod pod;
    std::string data;
  };
  // ProvisionAndRun, then the pod writes kDataBytes of Pattern(seed) to
  // data.bin, durably: the bytes a scenario reads back later.
  void ProvisionRunAndWrite(const std::string& pvc, const std::string& node_id, const std::string& pod_name, char seed,
                            WrittenPod* out) {
    ASSERT_NO_FATAL_FAILURE(ProvisionAndRun(pvc, node_id, pod_name, &out->pv, &out->pod));
    out->data = Pattern(kDataBytes, seed);
    ASSERT_TRUE(WriteDurably(out->pod.volume_path + "/data.bin", out->data));
  }

  // The pod leaves `from` and starts on `to`: kubelet on `from` unpublishes
  // and unstages, the attacher detaches from `from` and attaches to `to`,
  // kubelet on `to` stages and publishes.
  void MovePod(const PersistentVolume& pv, const Pod& old_pod, const std::string& to, const std::string& new_pod_name,
               Pod* new_pod) {
    ASSERT_TRUE(testing::GrpcOk(co_->DeletePod(old_pod), node(old_pod.node_id).LogTail())) << co_->EventLog();
    ASSERT_TRUE(testing::GrpcOk(co_->Detach(pv, old_pod.node_id), controller_->LogTail())) << co_->EventLog();
    ASSERT_TRUE(testing::GrpcOk(co_->Attach(pv, to), controller_->LogTail())) << co_->EventLog();
    ASSERT_TRUE(testing::GrpcOk(co_->RunPod(new_pod_name, to, pv, new_pod), node(to).LogTail())) << co_->EventLog();
  }

  // The pod goes, the volume is detached and deleted: the CO's normal end.
  void Finish(const PersistentVolume& pv, const Pod& pod) {
    EXPECT_TRUE(testing::GrpcOk(co_->DeletePod(pod), node(pod.node_id).LogTail())) << co_->EventLog();
    EXPECT_TRUE(testing::GrpcOk(co_->Detach(pv, pod.node_id), controller_->LogTail())) << co_->EventLog();
    EXPECT_TRUE(testing::GrpcOk(co_->Deprovision(pv), controller_->LogTail())) << co_->EventLog();
  }

  // The node keeps nothing of a volume it no longer has: no mount, no
  // loop device, no bridge.
  void ExpectNodeHoldsNothing(const std::string& node_id) {
    const std::string dir = root_.Join(node_id);
    EXPECT_TRUE(testing::MountsUnder(dir).empty()) << node_id << " still has mounts under " << dir;
    EXPECT_TRUE(testing::LoopDevicesUnder(dir).empty()) << node_id << " still has loop devices";
    EXPECT_TRUE(testing::ProcessesNaming(node(node_id).state_dir() + "/bridges").empty())
        << node_id << " still runs a bridge";
  }

  // Polls the volume's condition until `abnormal` is what it reports.
  bool WaitForCondition(const Pod& pod, bool abnormal, std::chrono::seconds timeout, std::string* message) {
    auto deadline = Clock::now() + timeout;
    while (true) {
      csi::v1::NodeGetVolumeStatsResponse stats;
      grpc::Status st = co_->VolumeStats(pod, &stats);
      if (st.ok()) {
        *message = stats.volume_condition().message();
        if (stats.volume_condition().abnormal() == abnormal) return true;
      } else {
        *message = "NodeGetVolumeStats: " + CodeName(st.error_code()) + ": " + st.error_message();
      }
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(500ms);
    }
  }

  TempDir root_;
  std::string prefix_;
  std::unique_ptr<NetnsTopology> net_;
  std::unique_ptr<TgtdHarness> tgtd_;
  std::unique_ptr<ChildProcess> agent_;
  std::unique_ptr<PluginUnderTest> controller_;
  std::map<std::string, std::unique_ptr<PluginUnderTest>> nodes_;
  std::unique_ptr<CoSimulator> co_;
  testing::LeakSnapshot baseline_;  // at the end of SetUp
  bool have_baseline_ = false;
  // --bridge-io-timeout of the node plugins; empty: their default (30 s).
  std::string node_io_timeout_;
};

// Scenario 1: a pod on n1 writes a file with known bytes and fsyncs it;
// the pod moves to n2 and reads the same bytes from the storage.
TEST_F(TwoNodeE2eTest, PodMovesFromN1ToN2AndReadsTheSameBytes) {
  auto started = Clock::now();
  WrittenPod written;
  ASSERT_NO_FATAL_FAILURE(ProvisionRunAndWrite("move", "n1", "writer", 7, &written));
  const auto& [pv, writer, data] = written;
  const std::string n1_iqn =
      co_->FindAttachment(pv.volume_id, "n1")->attachment_metadata.at(publish_context::kTargetIqn);

  Pod reader;
  ASSERT_NO_FATAL_FAILURE(MovePod(pv, writer, "n2", "reader", &reader));
  ExpectNodeHoldsNothing("n1");
  const VolumeAttachment* va = co_->FindAttachment(pv.volume_id, "n2");
  ASSERT_NE(va, nullptr);
  EXPECT_EQ(va->attachment_metadata.at(publish_context::kTargetIqn), n1_iqn);
  EXPECT_EQ(va->attachment_metadata.at(publish_context::kPortals), tgtd_->portal());
  EXPECT_EQ(co_->FindAttachment(pv.volume_id, "n1"), nullptr) << "the n1 VolumeAttachment should be gone";

  std::string error;
  std::string read = testing::ReadDirect(reader.volume_path + "/data.bin", 0, kDataBytes, &error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_EQ(read.size(), data.size());
  EXPECT_TRUE(read == data) << "n2 read other bytes than n1 wrote";

  Finish(pv, reader);
  ExpectNodeHoldsNothing("n2");
  std::cout << "[e2e] scenario 1 (pod moves n1 -> n2): " << Seconds(Clock::now() - started) << " s\n";
}

// Scenario 2: once the volume is attached to n2, n1 cannot log in (the
// ACL names n2's initiator only) — neither with blockctl check-target from
// n1's namespace nor with a NodeStage given n2's publish_context.
TEST_F(TwoNodeE2eTest, N1IsLockedOutByTheAclWhileAttachedToN2) {
  auto started = Clock::now();
  WrittenPod written;
  ASSERT_NO_FATAL_FAILURE(ProvisionRunAndWrite("acl", "n1", "first", 11, &written));
  const auto& [pv, first, data] = written;
  Pod second;
  ASSERT_NO_FATAL_FAILURE(MovePod(pv, first, "n2", "second", &second));
  const VolumeAttachment* va = co_->FindAttachment(pv.volume_id, "n2");
  ASSERT_NE(va, nullptr);
  const auto n2_context = va->attachment_metadata;
  const std::string iqn = n2_context.at(publish_context::kTargetIqn);
  const std::string lun = n2_context.at(publish_context::kLun);

  // blockctl from n1's namespace, as n1's initiator: the network reaches
  // the portal (discovery answers), the login is refused by the ACL.
  std::vector<std::string> check = net_->HostPrefix("n1");
  check.insert(check.end(), {testing::BinDir() + "/blockctl", "-o", "json", "check-target", tgtd_->portal(),
                             "--node-id", "n1", "--iqn", iqn, "--lun", lun});
  std::string out;
  EXPECT_NE(testing::RunProgram(check, &out), 0) << out;
  auto json_start = out.find('{');
  ASSERT_NE(json_start, std::string::npos) << out;
  auto report = nlohmann::json::parse(out.substr(json_start), nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << out;
  EXPECT_EQ(report.value("diagnosis", ""), "refused-by-acl") << out;
  EXPECT_TRUE(report.value("initiator", "").ends_with(":n1")) << "should log in as n1's initiator\n" << out;
  ASSERT_TRUE(report["steps"].is_array() && !report["steps"].empty()) << out;
  EXPECT_EQ(report["steps"][0].value("step", ""), "discovery") << out;
  EXPECT_TRUE(report["steps"][0].value("ok", false)) << "n1 should reach the portal; only the login is refused\n"
                                                     << out;
  std::cout << "[e2e] check-target from n1 while attached to n2:\n" << out;

  // kubelet on n1 handed n2's publish_context (a stale or forged
  // VolumeAttachment): NodeStage fails, naming the volume and the ACL.
  const std::string staging = co_->StagingPath("n1", pv.volume_id);
  const testing::LeakSnapshot before_stage = testing::TakeLeakSnapshot(Scopes(pv.volume_id));
  grpc::Status st = co_->StageOnce("n1", pv, n2_context, staging);
  // A final failure leaves nothing (bridge, loop device, mount, record,
  // session, ACL): checked right away, before the unstage below could clean it.
  ExpectNothingLeftSince(before_stage, "the refused stage on n1", pv.volume_id);
  EXPECT_FALSE(st.ok()) << "n1 staged a volume attached to n2";
  EXPECT_TRUE(st.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
              st.error_code() == grpc::StatusCode::NOT_FOUND ||
              st.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
      << CodeName(st.error_code()) << ": " << st.error_message();
  EXPECT_NE(st.error_message().find(pv.volume_id), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("ACL"), std::string::npos)
      << "the message should say the initiator is not allowed: " << st.error_message();
  std::cout << "[e2e] NodeStage on n1 with n2's publish_context: " << CodeName(st.error_code()) << ": "
            << st.error_message() << "\n";
  // kubelet gives up on the pod: its unstage of a never-staged volume is OK.
  csi::v1::NodeUnstageVolumeRequest unstage;
  unstage.set_volume_id(pv.volume_id);
  unstage.set_staging_target_path(staging);
  csi::v1::NodeUnstageVolumeResponse unstaged;
  EXPECT_TRUE(testing::GrpcOk(node("n1").node().NodeUnstageVolume(testing::Deadline().get(), unstage, &unstaged),
                              node("n1").LogTail()));

  // n2 is unaffected: its data is there and it still writes.
  std::string error;
  EXPECT_TRUE(testing::ReadDirect(second.volume_path + "/data.bin", 0, kDataBytes, &error) == data) << error;
  EXPECT_TRUE(WriteDurably(second.volume_path + "/after.bin", Pattern(kIoChunk, 12)));

  Finish(pv, second);
  ExpectNodeHoldsNothing("n1");
  ExpectNodeHoldsNothing("n2");
  std::cout << "[e2e] scenario 2 (ACL lock-out): " << Seconds(Clock::now() - started) << " s\n";
}

// Scenario 3: the link between n1 and the storage host is cut while the
// pod writes (`ip link set eth0 down` in n1's namespace). The volume's
// condition must turn abnormal with a message naming the volume; after the
// link returns the node either recovers (I/O works again, condition
// normal) or keeps reporting the volume abnormal. What happened is printed.
// The cut is either shorter than the bridge's I/O timeout (TCP and
// libiscsi's reconnect ride it out) or clearly longer (every command must
// fail within the timeout: an error, never a hang).
struct LinkCutOutcome {
  bool io_failed = false;  // an error reached the pod during the cut
  bool resumed = false;
  bool normal_again = false;
};

class LinkCutTest : public TwoNodeE2eTest {
 protected:
  LinkCutOutcome CutDuringIo(const std::string& pvc, std::chrono::seconds cut_for,
                             std::chrono::seconds resume_wait = std::chrono::seconds(60)) {
    LinkCutOutcome outcome;
    PersistentVolume pv;
    Pod pod;
    ProvisionAndRun(pvc, "n1", "app", &pv, &pod);
    if (HasFatalFailure()) return outcome;
    const std::string data = Pattern(kDataBytes, 21);
    EXPECT_TRUE(WriteDurably(pod.volume_path + "/data.bin", data));
    std::string message;
    EXPECT_TRUE(WaitForCondition(pod, false, 30s, &message)) << "not healthy before the cut: " << message;

    Writer writer(pod.volume_path + "/io.bin");
    writer.Start();
    EXPECT_TRUE(writer.WaitFor([&] { return writer.completed() >= 5; }, 60s)) << writer.first_error();
    auto cut = Clock::now();
    std::string error;
    EXPECT_TRUE(net_->SetHostLink("n1", false, &error)) << error;

    // Few polls on purpose: each one that meets a stuck bridge leaves a
    // connection in the bridge's control backlog (see the report).
    bool abnormal = WaitForCondition(pod, true, 120s, &message);
    std::cout << "[e2e] link cut: condition " << (abnormal ? "abnormal" : "NOT abnormal") << " after "
              << Seconds(Clock::now() - cut) << " s: " << message << "\n";
    EXPECT_TRUE(abnormal) << "the condition stayed normal with the link cut: " << message;
    EXPECT_NE(message.find(pv.volume_id), std::string::npos) << message;
    writer.WaitFor([] { return false; },
                   std::chrono::duration_cast<std::chrono::seconds>(cut_for - (Clock::now() - cut)));
    std::cout << "[e2e] link cut for " << Seconds(Clock::now() - cut) << " s: writer completed " << writer.completed()
              << ", failed " << writer.failed()
              << (writer.first_error().empty() ? " (no error reached the pod)"
                                               : " (first error: " + writer.first_error() + ")")
              << "\n";

    outcome.io_failed = writer.failed() > 0;
    EXPECT_TRUE(net_->SetHostLink("n1", true, &error)) << error;
    auto back = Clock::now();
    const uint64_t done_at_return = writer.completed();
    // Recovered: the writer completes new writes after the link returned.
    outcome.resumed = writer.WaitFor([&] { return writer.completed() > done_at_return + 3; }, resume_wait);
    std::string after;
    outcome.normal_again = outcome.resumed && WaitForCondition(pod, false, 120s, &after);
    if (!outcome.normal_again) WaitForCondition(pod, true, 0s, &after);
    std::cout << "[e2e] link back: I/O " << (outcome.resumed ? "resumed" : "did NOT resume") << " within "
              << Seconds(Clock::now() - back) << " s; condition " << (outcome.normal_again ? "normal" : "abnormal")
              << ": " << after << "\n";
    if (outcome.resumed) {
      EXPECT_TRUE(outcome.normal_again) << "I/O works again but the condition stays abnormal: " << after;
    } else {
      // Not recovered: the volume must at least still be reported
      // abnormal, never healthy while its I/O is stuck.
      EXPECT_NE(after.find(pv.volume_id), std::string::npos) << after;
      EXPECT_EQ(after.find("is healthy"), std::string::npos) << "I/O is stuck but the condition says: " << after;
      // The session is back but writes were lost and the filesystem shut
      // itself down: the condition says so and what to do (restage).
      EXPECT_NE(after.find("NodeUnstage and NodeStage"), std::string::npos) << after;
    }
    writer.Stop();
    std::cout << "[e2e] link back: writer completed " << writer.completed() << ", failed " << writer.failed()
              << (writer.last_error().empty() ? "" : " (last error: " + writer.last_error() + ")") << "\n";
    if (outcome.resumed) {
      std::string read = testing::ReadDirect(pod.volume_path + "/data.bin", 0, kDataBytes, &error);
      EXPECT_TRUE(read == data) << "data written before the cut changed " << error;
    }
    Finish(pv, pod);
    ExpectNodeHoldsNothing("n1");
    return outcome;
  }
};

// A cut shorter than the I/O timeout: TCP retransmits carry the session
// over it; the pod's I/O pauses and goes on, the condition turns normal.
TEST_F(LinkCutTest, ShortCutDuringIoIsRiddenOut) {
  auto started = Clock::now();
  LinkCutOutcome outcome = CutDuringIo("short-cut", 12s);
  EXPECT_TRUE(outcome.resumed) << "I/O did not resume after a 12 s cut";
  EXPECT_TRUE(outcome.normal_again);
  std::cout << "[e2e] scenario 3a (12 s link cut during I/O): " << Seconds(Clock::now() - started) << " s\n";
}

// A cut well past the I/O timeout (25 s > --bridge-io-timeout 10s): the
// pod's I/O must fail while the link is still cut (before the fix it blocked with no
// error and the session never came back). After the link returns the bridge
// logs in again; whether the pod's filesystem survived the failed writes is
// the filesystem's business (ext4 may have aborted its journal): the test
// accepts recovery or a volume still reported abnormal, never a hang.
class LongLinkCutTest : public LinkCutTest {
 protected:
  LongLinkCutTest() { node_io_timeout_ = "10s"; }
};

TEST_F(LongLinkCutTest, LongCutDuringIoFailsTheIoInsteadOfHanging) {
  auto started = Clock::now();
  // The filesystem usually shuts down after the lost writes, so waiting
  // long for I/O to resume would only cost CI time.
  LinkCutOutcome outcome = CutDuringIo("long-cut", 25s, 15s);
  EXPECT_TRUE(outcome.io_failed) << "no I/O error reached the pod during a cut longer than the I/O timeout";
  std::cout << "[e2e] scenario 3b (25 s link cut during I/O, 10 s I/O timeout): "
            << (outcome.resumed ? "recovered" : "not recovered: restage needed, as the condition says") << ", "
            << Seconds(Clock::now() - started) << " s\n";
}

// Scenario 4: tgtd on the storage host is killed (kill -9) and restarted
// while the pod writes. The agent's reconcile (every 1 s here) puts the
// export back (target, LUN, n1's ACL); the pod's I/O resumes or fails
// cleanly; after the unstage the filesystem in the image on the storage
// host is clean (e2fsck -n).
TEST_F(TwoNodeE2eTest, TgtdKilledAndRestartedDuringIo) {
  auto started = Clock::now();
  WrittenPod written;
  ASSERT_NO_FATAL_FAILURE(ProvisionRunAndWrite("tgtd", "n1", "app", 31, &written));
  const auto& [pv, pod, data] = written;
  const std::string iqn = co_->FindAttachment(pv.volume_id, "n1")->attachment_metadata.at(publish_context::kTargetIqn);
  const std::string n1_initiator = "iqn.2026-11.io.blockcsi:node:n1";
  ASSERT_NE(tgtd_->ShowTargets().find(n1_initiator), std::string::npos) << tgtd_->ShowTargets();

  Writer writer(pod.volume_path + "/io.bin");
  writer.Start();
  ASSERT_TRUE(writer.WaitFor([&] { return writer.completed() >= 5; }, 60s)) << writer.first_error();

  pid_t old_pid = tgtd_->pid();
  tgtd_->Kill9();
  EXPECT_NE(::kill(old_pid, 0), 0) << "tgtd survived kill -9";
  std::this_thread::sleep_for(1s);  // the pod's I/O meets a dead target
  std::string error;
  ASSERT_TRUE(tgtd_->Restart(&error)) << error;
  auto restarted = Clock::now();
  EXPECT_EQ(tgtd_->ShowTargets().find(iqn), std::string::npos) << "a fresh tgtd should know no target";

  // The agent's reconcile restores the export, ACL included.
  auto deadline = Clock::now() + 60s;
  std::string targets;
  while (Clock::now() < deadline) {
    targets = tgtd_->ShowTargets();
    if (targets.find(iqn) != std::string::npos && targets.find(n1_initiator) != std::string::npos) break;
    std::this_thread::sleep_for(200ms);
  }
  ASSERT_NE(targets.find(iqn), std::string::npos) << "the agent did not re-export " << iqn << "\n"
                                                  << testing::ReadFileOrEmpty(agent_log());
  ASSERT_NE(targets.find(n1_initiator), std::string::npos) << "the agent re-exported without n1's ACL\n" << targets;
  std::cout << "[e2e] tgtd restart: export restored after " << Seconds(Clock::now() - restarted) << " s\n";

  // I/O resumes (new writes complete) or fails cleanly (errors returned,
  // nothing hangs).
  const uint64_t done_at_restore = writer.completed();
  const uint64_t failed_at_restore = writer.failed();
  bool resumed = writer.WaitFor([&] { return writer.completed() > done_at_restore + 3; }, 90s);
  bool failed = writer.failed() > failed_at_restore;
  std::cout << "[e2e] tgtd restart: I/O "
            << (resumed  ? "resumed"
                : failed ? "failed"
                         : "HUNG")
            << " (completed " << writer.completed() << ", failed " << writer.failed()
            << (writer.first_error().empty() ? "" : ", first error: " + writer.first_error()) << ") after "
            << Seconds(Clock::now() - restarted) << " s\n";
  EXPECT_TRUE(resumed || failed) << "the pod's I/O neither resumed nor failed after the target came back";
  writer.Stop();
  if (!resumed) {
    // The pod's filesystem shut down after a failed write: the condition
    // must say so (and not call the volume healthy because the bridge's
    // own errors are older than its window).
    std::string message;
    WaitForCondition(pod, true, 0s, &message);
    std::cout << "[e2e] tgtd restart: I/O failing, condition now: " << message << "\n";
    EXPECT_EQ(message.find("is healthy"), std::string::npos) << message;
  }
  if (resumed) {
    std::string read = testing::ReadDirect(pod.volume_path + "/data.bin", 0, kDataBytes, &error);
    EXPECT_TRUE(read == data) << "data written before the restart changed " << error;
    std::string message;
    EXPECT_TRUE(WaitForCondition(pod, false, 120s, &message)) << message;
  }

  // Unstage (the pod goes), then check the filesystem where the bytes
  // live: the image file on the storage host.
  EXPECT_TRUE(testing::GrpcOk(co_->DeletePod(pod), node("n1").LogTail())) << co_->EventLog();
  ExpectNodeHoldsNothing("n1");
  // When the pod's writes failed, ext4 aborted its journal and the image
  // is left needing journal recovery: a plain `e2fsck -n` then reads
  // pre-journal metadata and reports it. What must hold is that the
  // filesystem is consistent once its own journal is replayed, as the next
  // mount would: checked on a copy, so the volume stays untouched.
  const std::string image = image_path(pv.volume_id);
  std::string raw;
  int raw_code = testing::RunProgram({"e2fsck", "-f", "-n", image}, &raw, 120s);
  std::cout << "[e2e] tgtd restart: e2fsck -f -n of the image as left: exit " << raw_code
            << (raw.find("skipping journal recovery") != std::string::npos ? " (journal needs recovery)" : "") << "\n";
  const std::string copy = root_.Join("store/fsck-copy.img");
  ASSERT_EQ(testing::RunProgram({"cp", "--sparse=always", image, copy}), 0);
  std::string replay;
  EXPECT_LE(testing::RunProgram({"e2fsck", "-E", "journal_only", "-p", copy}, &replay, 120s), 1)
      << "journal replay failed:\n"
      << replay;
  std::string fsck;
  int fsck_code = testing::RunProgram({"e2fsck", "-f", "-n", copy}, &fsck, 120s);
  EXPECT_EQ(fsck_code, 0) << "the filesystem is not clean after the tgtd restart (journal replayed):\n"
                          << fsck << "\nas left:\n"
                          << raw;
  std::cout << "[e2e] tgtd restart: e2fsck -f -n after journal replay (on a copy): exit " << fsck_code << "\n";
  std::filesystem::remove(copy);
  EXPECT_TRUE(testing::GrpcOk(co_->Detach(pv, "n1"), controller_->LogTail())) << co_->EventLog();
  EXPECT_TRUE(testing::GrpcOk(co_->Deprovision(pv), controller_->LogTail())) << co_->EventLog();
  std::cout << "[e2e] scenario 4 (tgtd kill -9 + restart during I/O): " << Seconds(Clock::now() - started) << " s\n";
}

}  // namespace
}  // namespace blockcsi::e2e
