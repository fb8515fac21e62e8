// End to end, several storage hosts (issue #20 item 3): two storage hosts,
// each its own network namespace with a real tgtd and a real
// blockcsi-target agent, are two backends of one `blockcsi --mode
// controller --backend-config` in two zones (`zone = a`, `zone = b`); node
// n1 runs with `--zone a`, n2 with `--zone b` (userspace connector). Our CO
// simulator plays external-provisioner with the Topology feature (the
// requisite and preferred segments it builds from the nodes' NodeGetInfo)
// and --enable-capacity (GetCapacity per segment), the attacher and
// kubelet. Zone b's pool is a small tmpfs of its own, so that the test can
// fill that host for real.
//
// The agents serve plain TCP (--insecure): mTLS between the controller and
// an agent is the two-node test's subject; here it would only add a PKI.
// Needs root, tgtd, /dev/fuse, ip netns and nsenter; skips otherwise.
// Everything started is stopped by its pid; every mount, loop device and
// namespace is removed, also on failure.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/atomic_file.h"
#include "common/executor.h"
#include "common/topology.h"
#include "contract/publish_context.h"
#include "e2e/co_simulator.h"
#include "e2e/e2e_env.h"
#include "e2e/netns_topology.h"
#include "support/leak_check.h"
#include "support/node_clean.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi::e2e {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::PluginOptions;
using testing::PluginUnderTest;
using testing::TempDir;
using testing::TgtdHarness;

constexpr char kNodeKey[] = "topology.blockcsi.io/node";
// Zone b's pool: a tmpfs of this size; "full" leaves less than one volume.
constexpr int64_t kZoneBFsBytes = 96LL << 20;
constexpr int64_t kFillerBytes = 60LL << 20;

int RunProgram(const std::vector<std::string>& argv, std::string* out = nullptr) {
  Command c(argv[0]);
  for (size_t i = 1; i < argv.size(); ++i) c.Arg(argv[i]);
  c.Timeout(60s);
  auto r = MakeProcessExecutor()->Run(c);
  if (!r.ok()) {
    if (out != nullptr) *out = r.status().message();
    return -1;
  }
  if (out != nullptr) *out = r->stdout_text + r->stderr_text;
  return r->exit_code;
}

// The files of a pool's images/ directory (a volume's image lives there).
std::vector<std::string> Images(const std::string& pool) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(pool + "/images", ec)) {
    out.push_back(entry.path().filename().string());
  }
  return out;
}

struct StorageHost {
  std::string zone;
  std::string ns;       // its network namespace
  std::string address;  // where tgtd and the agent listen
  std::vector<std::string> prefix;
  std::string pool;
  std::unique_ptr<TgtdHarness> tgtd;
  std::unique_ptr<ChildProcess> agent;
  std::string agent_log;
  std::string agent_address() const { return address + ":" + std::to_string(kAgentPort); }
};

class ZonesE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = Clock::now();
    if (std::string why = MissingNetnsE2eCapability(); !why.empty()) GTEST_SKIP() << why;

    prefix_ = FreshNamespacePrefix("bcsz");
    std::string error;
    // Zone a's host is the topology's storage namespace; zone b's is a host
    // of its own on the same bridge.
    net_ = NetnsTopology::Create(prefix_, {"ctl", "n1", "n2", "hostb"}, &error);
    ASSERT_TRUE(net_) << "cannot build the network namespaces: " << error;

    hosts_[0].zone = "a";
    hosts_[0].ns = net_->store_namespace();
    hosts_[0].address = net_->store_address();
    hosts_[0].prefix = net_->StorePrefix();
    hosts_[0].pool = root_.Join("a/pool");
    hosts_[1].zone = "b";
    hosts_[1].ns = net_->namespace_of("hostb");
    hosts_[1].address = net_->address_of("hostb");
    hosts_[1].prefix = net_->HostPrefix("hostb");
    hosts_[1].pool = zone_b_fs() + "/pool";
    std::filesystem::create_directories(root_.Join("a"));
    std::filesystem::create_directories(zone_b_fs());
    ASSERT_EQ(RunProgram({"mount", "-t", "tmpfs", "-o", "size=" + std::to_string(kZoneBFsBytes), "tmpfs", zone_b_fs()},
                         &error),
              0)
        << "tmpfs for zone b's pool: " << error;
    zone_b_mounted_ = true;
    for (auto& host : hosts_) {
      testing::TgtdOptions tgtd_options;
      tgtd_options.address = host.address;
      tgtd_options.port = kIscsiPort;
      tgtd_options.command_prefix = host.prefix;
      host.tgtd = TgtdHarness::Start(tgtd_options, &error);
      ASSERT_TRUE(host.tgtd) << "tgtd in " << host.ns << ": " << error;
      ASSERT_NO_FATAL_FAILURE(StartAgent(host));
    }

    const std::string config = root_.Join("backends.conf");
    std::string text;
    for (const auto& host : hosts_) {
      text += "[backend zone-" + host.zone + "]\nkind = remote\ntarget-agent = " + host.agent_address() +
              "\ninsecure = true\nzone = " + host.zone + "\n" + (host.zone == "a" ? "default = true\n" : "") + "\n";
    }
    ASSERT_TRUE(WriteFileAtomically(config, text).ok());
    controller_ = std::make_unique<PluginUnderTest>(root_.Join("ctl"), nullptr);
    PluginOptions c;
    c.mode = "controller";
    c.backend = "";  // --backend-config names them
    c.node_id = "ctl";
    c.command_prefix = net_->HostPrefix("ctl");
    c.extra_args = {"--backend-config", config, "--log-level", "debug", "--shutdown-grace", "2s"};
    ASSERT_TRUE(controller_->Start(c, &error)) << error;

    co_ = std::make_unique<CoSimulator>(&controller_->controller());
    for (const auto& [node, zone] : {std::pair<std::string, std::string>{"n1", "a"}, {"n2", "b"}}) {
      auto plugin = StartNodePlugin(*net_, node, root_.Join(node + "/plugin"), {"--zone", zone}, &error);
      ASSERT_TRUE(plugin) << node << ": " << error;
      co_->AddNode(node, &plugin->node(), root_.Join(node + "/kubelet"));
      nodes_[node] = std::move(plugin);
      Segments segments;
      ASSERT_TRUE(testing::GrpcOk(co_->NodeTopology(node, &segments), nodes_[node]->LogTail()));
      segments_[node] = segments;
    }
    baseline_ = testing::TakeLeakSnapshot(Scopes());
    have_baseline_ = true;
    std::cout << "[e2e] set-up (namespaces, 2 x tgtd + agent, controller, 2 nodes): " << Seconds(Clock::now() - started)
              << " s\n";
  }

  void TearDown() override {
    // Before anything is cleaned: the test went through the CO's whole
    // teardown, so anything new since SetUp on either host or node is a leak.
    if (have_baseline_) {
      EXPECT_TRUE(NothingLeftSince(baseline_, "the test (before the fixture cleans)"));
    }
    if (HasFailure()) DumpLogs();
    for (auto& [name, plugin] : nodes_) plugin->Stop();
    for (auto& [name, plugin] : nodes_) {
      auto exec = MakeProcessExecutor();
      for (const auto& m : testing::MountsUnder(root_.Join(name + "/kubelet"))) {
        (void)exec->Run(Command("umount").Arg(m).Timeout(30s));
      }
      for (const auto& loop : testing::LoopDevicesUnder(root_.Join(name))) {
        (void)exec->Run(Command("losetup").Arg("-d").Arg(loop).Timeout(30s));
      }
    }
    if (controller_) controller_->Stop();
    for (auto& host : hosts_) {
      if (host.agent) {
        host.agent->Signal(SIGTERM);
        if (host.agent->Wait(15s) < 0) host.agent->Signal(SIGKILL);
        host.agent.reset();
      }
      host.tgtd.reset();
    }
    if (zone_b_mounted_) {
      EXPECT_EQ(RunProgram({"umount", zone_b_fs()}), 0) << "zone b's tmpfs stays mounted";
    }
    testing::CleanUpAndExpectNothingUnder(root_.path());
    net_.reset();
    if (!prefix_.empty()) {
      EXPECT_TRUE(NetnsTopology::ListedNamespaces(prefix_).empty()) << "network namespaces left: " << prefix_ << "-*";
    }
  }

  std::string zone_b_fs() const { return root_.Join("b/fs"); }

  // Everything the daemons can leave, in the one leak checker's terms:
  // processes, mounts and loop devices under the test's root, both nodes'
  // attach records, each host's pool files and its tgtd's targets, LUNs,
  // ACLs, accounts and sessions. The daemons themselves are not leaks; a
  // bridge is.
  std::vector<testing::LeakScope> Scopes() const {
    std::vector<pid_t> daemons;
    for (const auto& host : hosts_) {
      if (host.tgtd) daemons.push_back(host.tgtd->pid());
      if (host.agent) daemons.push_back(host.agent->pid());
    }
    if (controller_ && controller_->running()) daemons.push_back(controller_->pid());
    for (const auto& [name, plugin] : nodes_) {
      if (plugin->running()) daemons.push_back(plugin->pid());
    }
    std::vector<testing::LeakScope> scopes;
    for (const auto& host : hosts_) {
      testing::LeakScope scope;
      scope.pool_dir = host.pool;
      scope.tgtd = host.tgtd.get();
      scopes.push_back(scope);
    }
    scopes[0].dir = root_.path();
    for (const auto& [name, plugin] : nodes_) {
      testing::LeakScope records;
      records.state_dir = plugin->state_dir();
      scopes.push_back(records);
    }
    for (auto& scope : scopes) scope.ignore_pids = daemons;
    return scopes;
  }
  ::testing::AssertionResult NothingLeftSince(const testing::LeakSnapshot& before, const std::string& after) const {
    auto left = testing::NewItemsAfterSettling(before, Scopes());
    if (left.empty()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "left behind after " << after << ":" << testing::DescribeItems(left);
  }

  void StartAgent(StorageHost& host) {
    host.agent_log = root_.Join(host.zone + "-agent.log");
    std::vector<std::string> argv = host.prefix;
    argv.insert(argv.end(), {testing::BinDir() + "/blockcsi-target", "--pool", host.pool, "--tgt-control-port",
                             std::to_string(host.tgtd->control_port()), "--portal", host.tgtd->portal(), "--listen",
                             host.agent_address(), "--insecure", "--log-level", "debug"});
    host.agent = std::make_unique<ChildProcess>(argv, host.agent_log);
    auto deadline = Clock::now() + 20s;
    while (Clock::now() < deadline) {
      if (testing::ReadFileOrEmpty(host.agent_log).find("serving") != std::string::npos) return;
      if (!host.agent->running()) break;
      std::this_thread::sleep_for(50ms);
    }
    FAIL() << "blockcsi-target of zone " << host.zone << " did not serve on " << host.agent_address() << ":\n"
           << testing::ReadFileOrEmpty(host.agent_log);
  }

  void DumpLogs() {
    std::cout << (co_ ? co_->EventLog() : "");
    for (const auto& host : hosts_) {
      std::string log = testing::ReadFileOrEmpty(host.agent_log);
      if (log.size() > 3000) log = "...\n" + log.substr(log.size() - 3000);
      std::cout << "--- agent " << host.zone << " log:\n" << log << "\n";
    }
    if (controller_) std::cout << "--- controller log:\n" << controller_->LogTail(4000) << "\n";
    for (auto& [name, plugin] : nodes_) std::cout << "--- node " << name << " log:\n" << plugin->LogTail(3000) << "\n";
  }

  // What the provisioner sends for a pod the scheduler placed on `node`
  // (WaitForFirstConsumer): every node's segment is requisite, the chosen
  // node's comes first among the preferred.
  TopologyRequirement ForPodOn(const std::string& node) const {
    TopologyRequirement t;
    t.preferred.push_back(segments_.at(node));
    for (const auto& [name, segments] : segments_) {
      t.requisite.push_back(segments);
      if (name != node) t.preferred.push_back(segments);
    }
    return t;
  }

  // Fills zone b's tmpfs so that one more volume does not fit.
  void FillZoneB() {
    std::ofstream filler(zone_b_fs() + "/filler", std::ios::binary);
    std::string chunk(1 << 20, 'f');
    for (int64_t i = 0; i < kFillerBytes / static_cast<int64_t>(chunk.size()); ++i) filler << chunk;
    filler.close();
    ASSERT_TRUE(filler.good()) << "cannot fill " << zone_b_fs();
  }

  TempDir root_;
  std::string prefix_;
  std::unique_ptr<NetnsTopology> net_;
  StorageHost hosts_[2];
  bool zone_b_mounted_ = false;
  std::unique_ptr<PluginUnderTest> controller_;
  std::map<std::string, std::unique_ptr<PluginUnderTest>> nodes_;
  std::map<std::string, Segments> segments_;  // node → NodeGetInfo's segment
  std::unique_ptr<CoSimulator> co_;
  testing::LeakSnapshot baseline_;  // at the end of SetUp
  bool have_baseline_ = false;
};

// A pod placed on n2 (zone b) gets its volume on zone b's host: the id
// names that backend, the image is in that host's pool, the returned
// accessible_topology (the PV's node affinity) is zone b, and n2 writes
// and reads through that host's tgtd. A pod on n1 gets zone a's host.
TEST_F(ZonesE2eTest, PodPinnedToAZoneGetsItsVolumeOnThatZonesHost) {
  auto started = Clock::now();
  EXPECT_EQ(segments_.at("n1").at(kTopologyZoneKey), "a");
  EXPECT_EQ(segments_.at("n2").at(kTopologyZoneKey), "b");
  EXPECT_EQ(segments_.at("n2").at(kNodeKey), "n2");

  PersistentVolume pv;
  ASSERT_TRUE(
      testing::GrpcOk(co_->Provision("on-b", kVolumeBytes, testing::MountCapability("ext4"), {}, &pv, ForPodOn("n2")),
                      controller_->LogTail()))
      << co_->EventLog();
  EXPECT_TRUE(pv.volume_id.starts_with("zone-b~")) << pv.volume_id;
  ASSERT_EQ(pv.accessible_topology.size(), 1u);
  EXPECT_EQ(pv.accessible_topology[0], (Segments{{kTopologyZoneKey, "b"}}));
  EXPECT_EQ(Images(hosts_[1].pool).size(), 1u) << "zone b's host should hold the image";
  EXPECT_TRUE(Images(hosts_[0].pool).empty()) << "zone a's host should hold nothing";

  ASSERT_TRUE(testing::GrpcOk(co_->Attach(pv, "n2"), controller_->LogTail())) << co_->EventLog();
  EXPECT_EQ(co_->FindAttachment(pv.volume_id, "n2")->attachment_metadata.at(publish_context::kPortals),
            hosts_[1].tgtd->portal());
  Pod pod;
  ASSERT_TRUE(testing::GrpcOk(co_->RunPod("pod-b", "n2", pv, &pod), nodes_.at("n2")->LogTail())) << co_->EventLog();
  const std::string data(1 << 20, 'z');
  ASSERT_TRUE(WriteFileAtomically(pod.volume_path + "/data.bin", data).ok());
  EXPECT_EQ(testing::ReadFileOrEmpty(pod.volume_path + "/data.bin"), data);
  EXPECT_TRUE(testing::GrpcOk(co_->DeletePod(pod), nodes_.at("n2")->LogTail())) << co_->EventLog();
  EXPECT_TRUE(testing::GrpcOk(co_->Detach(pv, "n2"), controller_->LogTail())) << co_->EventLog();
  EXPECT_TRUE(testing::GrpcOk(co_->Deprovision(pv), controller_->LogTail())) << co_->EventLog();
  EXPECT_TRUE(Images(hosts_[1].pool).empty()) << "DeleteVolume should remove the image from zone b's host";

  PersistentVolume on_a;
  ASSERT_TRUE(
      testing::GrpcOk(co_->Provision("on-a", kVolumeBytes, testing::MountCapability("ext4"), {}, &on_a, ForPodOn("n1")),
                      controller_->LogTail()))
      << co_->EventLog();
  EXPECT_TRUE(on_a.volume_id.starts_with("zone-a~")) << on_a.volume_id;
  ASSERT_EQ(on_a.accessible_topology.size(), 1u);
  EXPECT_EQ(on_a.accessible_topology[0], (Segments{{kTopologyZoneKey, "a"}}));
  EXPECT_TRUE(testing::GrpcOk(co_->Deprovision(on_a), controller_->LogTail())) << co_->EventLog();
  std::cout << "[e2e] zones: pod pinned to b, then a: " << Seconds(Clock::now() - started) << " s\n";
}

// GetCapacity answers each node's segment from that zone's host; once zone
// b's host is full it reports less than a volume there, a volume that must
// be in zone b is RESOURCE_EXHAUSTED (nothing made on either host), and one
// that may go to either zone skips the full host.
TEST_F(ZonesE2eTest, CapacityIsPerZoneAndAFullHostIsSkipped) {
  int64_t a_bytes = 0;
  int64_t b_bytes = 0;
  ASSERT_TRUE(testing::GrpcOk(co_->Capacity(segments_.at("n1"), {}, &a_bytes), controller_->LogTail()));
  ASSERT_TRUE(testing::GrpcOk(co_->Capacity(segments_.at("n2"), {}, &b_bytes), controller_->LogTail()));
  EXPECT_GT(b_bytes, kVolumeBytes) << "zone b's empty tmpfs has room for one volume";
  EXPECT_LE(b_bytes, kZoneBFsBytes);
  EXPECT_NE(a_bytes, b_bytes) << "each segment should be answered from its own host";

  ASSERT_NO_FATAL_FAILURE(FillZoneB());
  struct statvfs vfs {};
  ASSERT_EQ(::statvfs(zone_b_fs().c_str(), &vfs), 0);
  const int64_t b_free = static_cast<int64_t>(vfs.f_bavail * vfs.f_frsize);
  ASSERT_TRUE(testing::GrpcOk(co_->Capacity(segments_.at("n2"), {}, &b_bytes), controller_->LogTail()));
  EXPECT_LE(b_bytes, b_free);
  EXPECT_GT(b_bytes, b_free - (1LL << 20)) << "whole MiB of zone b's free space";
  EXPECT_LT(b_bytes, kVolumeBytes);
  std::cout << "[e2e] zones: capacity a=" << a_bytes << " b (full)=" << b_bytes << " bytes\n";

  TopologyRequirement only_b;
  only_b.requisite = {segments_.at("n2")};
  only_b.preferred = {segments_.at("n2")};
  PersistentVolume pv;
  const testing::LeakSnapshot before_refused = testing::TakeLeakSnapshot(Scopes());
  grpc::Status st = co_->Provision("must-b", kVolumeBytes, testing::MountCapability("ext4"), {}, &pv, only_b);
  EXPECT_TRUE(NothingLeftSince(before_refused, "the refused CreateVolume in the full zone"));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << CodeName(st.error_code()) << ": " << st.error_message();
  EXPECT_NE(st.error_message().find("pvc-must-b"), std::string::npos) << st.error_message();
  EXPECT_TRUE(Images(hosts_[1].pool).empty()) << "the refused volume left an image on zone b's host";
  EXPECT_TRUE(Images(hosts_[0].pool).empty()) << "the refused volume left an image on zone a's host";

  // Either zone is allowed (the provisioner without --strict-topology lists
  // every node's segment as requisite), zone b preferred: b is skipped.
  ASSERT_TRUE(
      testing::GrpcOk(co_->Provision("either", kVolumeBytes, testing::MountCapability("ext4"), {}, &pv, ForPodOn("n2")),
                      controller_->LogTail()))
      << co_->EventLog();
  EXPECT_TRUE(pv.volume_id.starts_with("zone-a~")) << "the full host should have been skipped: " << pv.volume_id;
  ASSERT_EQ(pv.accessible_topology.size(), 1u);
  EXPECT_EQ(pv.accessible_topology[0], (Segments{{kTopologyZoneKey, "a"}}));
  EXPECT_TRUE(testing::GrpcOk(co_->Deprovision(pv), controller_->LogTail())) << co_->EventLog();
}

}  // namespace
}  // namespace blockcsi::e2e
