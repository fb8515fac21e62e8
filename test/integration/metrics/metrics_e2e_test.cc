// Issue #19: the driver's metrics, read the way an operator reads them.
// The real `blockcsi` (--mode all, local backend, userspace connector, a
// private tgtd) and `blockcsi-target` serve /metrics on loopback ports of
// the test's own; a lifecycle must move the counters by exactly the calls
// made, promtool must accept what is served, bad requests to the port must
// not harm the plugin, and a real Prometheus server (Debian's package, its
// own temp dir and port, stopped by pid) must scrape both and answer a
// query with the calls made. Needs root, tgtd and FUSE; the Prometheus
// test also the prometheus binary. Each skips with the reason otherwise.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "csi.grpc.pb.h"
#include "support/csi_calls.h"
#include "support/http_probe.h"
#include "support/leak_check.h"
#include "support/plugin_suite.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;

std::string Calls(const std::string& method, const std::string& code) {
  return "blockcsi_grpc_calls_total{method=\"/csi.v1." + method + "\",code=\"" + code + "\"}";
}

std::string Op(const std::string& operation, const std::string& result = "OK") {
  return "blockcsi_node_operations_total{operation=\"" + operation + "\",result=\"" + result + "\"}";
}

// Runs `argv` with stdin from `input_path`; exit code and combined output.
int RunWithInput(const std::string& command, std::string* output) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) *output += buf;
  return ::pclose(pipe);
}

// The plugin as node "e2e-node" with a secret on every call that takes one
// (support/plugin_suite.h: tgtd, plugin, leak check), started by each test.
class MetricsE2ETest : public testing::PluginSuiteTest {
 protected:
  static constexpr char kSecret[] = "s3cret-metrics-canary-7f3a";
  MetricsE2ETest() : PluginSuiteTest("e2e-node", {{"token", kSecret}}) {}

  void SetUp() override {
    SetUpTgtdAndPlugin(dir_.Join("plugin"));
    if (IsSkipped() || HasFatalFailure()) return;
    baseline_ = testing::TakeLeakSnapshot(Scope());
  }

  // What the plugin can leave, in the one leak checker's terms: processes,
  // mounts and loop devices under dir_, attach records, pool files, tgtd's
  // targets, ACLs and sessions. The test's own daemons are not leaks.
  testing::LeakScope Scope(const std::string& volume_id = "") override {
    testing::LeakScope scope = plugin_->LeakScopeFor(volume_id);
    scope.dir = dir_.path();  // the agent's and Prometheus' files too
    for (auto* p : {agent_.get(), prometheus_.get()}) {
      if (p != nullptr) scope.ignore_pids.push_back(p->pid());
    }
    return scope;
  }

  void StopHelpers() override {
    StopProcess(agent_);
    StopProcess(prometheus_);
  }

  static void StopProcess(std::unique_ptr<testing::ChildProcess>& process) {
    if (!process) return;
    process->Signal(SIGTERM);
    if (process->Wait(20s) < 0) process->Signal(SIGKILL);
    process.reset();
  }

  bool StartPlugin(testing::PluginOptions options) {
    metrics_reserved_ = std::make_unique<testing::ReservedPort>(testing::ReservedPort::Use::kForServer);
    metrics_port_ = metrics_reserved_->port();
    options.extra_args.insert(options.extra_args.end(),
                              {"--metrics-address", "127.0.0.1:" + std::to_string(metrics_port_)});
    return PluginSuiteTest::StartPlugin(options);
  }

  std::string Scrape() { return testing::HttpGetBody(metrics_port_, "/metrics"); }

  ::testing::AssertionResult Ok(const grpc::Status& st) { return testing::GrpcOk(st, plugin_->LogTail()); }

  using Volume = testing::CsiVolume;

  Volume CreateAndPublish(const std::string& name) { return CreatePublished(name, 64LL << 20); }
  grpc::Status Stage(const Volume& v) { return calls_.Stage(*plugin_, v); }
  grpc::Status Publish(const Volume& v) { return calls_.Publish(*plugin_, v); }
  grpc::Status Unpublish(const Volume& v) { return calls_.Unpublish(*plugin_, v); }
  grpc::Status Unstage(const Volume& v) { return calls_.Unstage(*plugin_, v); }

  std::unique_ptr<testing::ChildProcess> agent_;
  std::unique_ptr<testing::ChildProcess> prometheus_;
  int metrics_port_ = 0;
  // Held until the test ends, so that no concurrent test is handed the port
  // between our pick and the server's bind (the same for the ports below).
  std::unique_ptr<testing::ReservedPort> metrics_reserved_;
};

TEST_F(MetricsE2ETest, LifecycleMovesTheCountersByExactlyTheCallsMade) {
  ASSERT_TRUE(StartPlugin({}));
  std::string before = Scrape();
  ASSERT_FALSE(before.empty()) << plugin_->LogTail();
  EXPECT_NE(before.find("blockcsi_build_info{program=\"blockcsi\""), std::string::npos) << before;
  EXPECT_EQ(testing::MetricSample(before, "blockcsi_node_staged_volumes"), 0) << before;

  Volume v = CreateAndPublish("metrics-lifecycle");
  ASSERT_FALSE(v.id.empty());
  ASSERT_TRUE(Ok(Stage(v)));
  ASSERT_TRUE(Ok(Stage(v)));  // idempotent repeat: a second OK call, no second attach or format
  ASSERT_TRUE(Ok(Publish(v)));
  // A bad request: the exact code is counted, nothing else moves.
  Volume bad = v;
  bad.id = "";
  bad.context.clear();
  EXPECT_EQ(Stage(bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  std::string staged = Scrape();
  EXPECT_EQ(testing::MetricSample(staged, Calls("Controller/CreateVolume", "OK")), 1) << staged;
  EXPECT_EQ(testing::MetricSample(staged, Calls("Controller/ControllerPublishVolume", "OK")), 1) << staged;
  EXPECT_EQ(testing::MetricSample(staged, Calls("Node/NodeStageVolume", "OK")), 2) << staged;
  EXPECT_EQ(testing::MetricSample(staged, Calls("Node/NodeStageVolume", "INVALID_ARGUMENT")), 1) << staged;
  EXPECT_EQ(testing::MetricSample(staged, Calls("Node/NodePublishVolume", "OK")), 1) << staged;
  EXPECT_EQ(testing::MetricSample(staged,
                                  "blockcsi_grpc_call_duration_seconds_count{method=\"/csi.v1.Node/NodeStageVolume\"}"),
            3)
      << staged;
  EXPECT_EQ(testing::MetricSample(staged,
                                  "blockcsi_grpc_call_duration_seconds_bucket{method=\"/csi.v1.Node/NodeStageVolume\","
                                  "le=\"+Inf\"}"),
            3)
      << staged;
  EXPECT_EQ(testing::MetricSample(staged, "blockcsi_grpc_calls_in_flight{method=\"/csi.v1.Node/NodeStageVolume\"}"), 0)
      << staged;
  EXPECT_EQ(testing::MetricSample(staged, Op("attach")), 1) << staged;
  EXPECT_EQ(testing::MetricSample(staged, Op("format")), 1) << staged;
  EXPECT_EQ(testing::MetricSample(staged, Op("mount")), 1) << staged;
  EXPECT_EQ(testing::MetricSample(staged, Op("bind_mount")), 1) << staged;
  EXPECT_EQ(testing::MetricSample(staged, "blockcsi_node_staged_volumes"), 1) << staged;
  EXPECT_EQ(testing::MetricSample(staged, "blockcsi_node_attached_volumes"), 1) << staged;
  EXPECT_EQ(testing::MetricSample(staged, "blockcsi_node_published_volumes"), 1) << staged;
  EXPECT_EQ(testing::MetricSample(staged, "blockcsi_target_operations_total{operation=\"export\",result=\"OK\"}") >= 1,
            true)
      << staged;
  EXPECT_EQ(testing::MetricSample(staged, "blockcsi_target_pool_volumes{pool=\"" + plugin_->pool_dir() + "\"}"), 1)
      << staged;
  EXPECT_EQ(
      testing::MetricSample(staged, "blockcsi_target_pool_provisioned_bytes{pool=\"" + plugin_->pool_dir() + "\"}"),
      64 << 20)
      << staged;
  EXPECT_EQ(staged.find(kSecret), std::string::npos) << "a request's secret reached the metrics";
  // The bridge's own figures, asked over its control socket: mkfs wrote
  // through it; every I/O is in the histogram; none failed.
  const std::string vol = "volume=\"" + v.id + "\"";
  EXPECT_EQ(testing::MetricSample(staged, "blockcsi_bridge_up{" + vol + "}"), 1) << staged;
  EXPECT_EQ(testing::MetricSample(staged, "blockcsi_bridge_healthy{" + vol + "}"), 1) << staged;
  double writes = testing::MetricSample(staged, "blockcsi_bridge_ios_total{" + vol + ",op=\"write\"}");
  EXPECT_GT(writes, 0) << staged;
  EXPECT_EQ(testing::MetricSample(staged, "blockcsi_bridge_io_duration_seconds_count{" + vol + ",op=\"write\"}"),
            writes)
      << staged;
  EXPECT_EQ(
      testing::MetricSample(staged, "blockcsi_bridge_io_duration_seconds_bucket{" + vol + ",op=\"write\",le=\"+Inf\"}"),
      writes)
      << staged;
  EXPECT_GE(testing::MetricSample(staged, "blockcsi_bridge_io_bytes_total{" + vol + ",op=\"write\"}"), writes * 512)
      << staged;
  EXPECT_EQ(testing::MetricSample(staged, "blockcsi_bridge_io_errors_total{" + vol + ",op=\"write\"}"), 0) << staged;
  EXPECT_EQ(testing::MetricSample(staged, "blockcsi_bridge_reconnects_total{" + vol + "}"), 0) << staged;

  // A figure for the report, not an assertion: what one scrape costs with a
  // staged volume (the collectors read the records, the mount table and ask
  // the bridge).
  {
    constexpr int kScrapes = 50;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kScrapes; ++i) Scrape();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kScrapes;
    std::cout << "scrape with 1 staged volume: " << ms << " ms mean over " << kScrapes << ", " << staged.size()
              << " bytes\n";
  }

  ASSERT_TRUE(Ok(Unpublish(v)));
  ASSERT_TRUE(Ok(Unstage(v)));
  UnpublishAndDelete(v);
  std::string after = Scrape();
  EXPECT_EQ(testing::MetricSample(after, Calls("Node/NodeUnpublishVolume", "OK")), 1) << after;
  EXPECT_EQ(testing::MetricSample(after, Calls("Node/NodeUnstageVolume", "OK")), 1) << after;
  EXPECT_EQ(testing::MetricSample(after, Calls("Controller/DeleteVolume", "OK")), 1) << after;
  EXPECT_EQ(testing::MetricSample(after, Op("detach")), 1) << after;
  EXPECT_EQ(testing::MetricSample(after, Op("attach")), 1) << after;
  EXPECT_EQ(testing::MetricSample(after, Op("format")), 1) << after;
  EXPECT_EQ(testing::MetricSample(after, "blockcsi_node_staged_volumes"), 0) << after;
  EXPECT_EQ(testing::MetricSample(after, "blockcsi_node_attached_volumes"), 0) << after;
  EXPECT_EQ(testing::MetricSample(after, "blockcsi_node_published_volumes"), 0) << after;
  EXPECT_EQ(testing::MetricSample(after, "blockcsi_target_pool_volumes{pool=\"" + plugin_->pool_dir() + "\"}"), 0)
      << after;
  EXPECT_EQ(after.find("blockcsi_bridge_up{" + vol + "}"), std::string::npos) << "an unstaged volume's series stayed";
  EXPECT_EQ(after.find(kSecret), std::string::npos);
  EXPECT_EQ(testing::ReadFileOrEmpty(plugin_->log_path()).find(kSecret), std::string::npos);

  // promtool (Debian's prometheus package) judges the live exposition.
  if (::access("/usr/bin/promtool", X_OK) != 0) {
    std::cout << "promtool not installed (Debian package prometheus): format check not run\n";
    return;
  }
  std::string file = dir_.Join("scrape.txt");
  std::ofstream(file) << after;
  std::string output;
  EXPECT_EQ(RunWithInput("/usr/bin/promtool check metrics < " + file, &output), 0) << output;
  EXPECT_EQ(output, "") << output;
}

// `blockctl io -o json` reads the bridges' figures with the plugin stopped:
// the admin's view of a node whose plugin is down or restarting.
TEST_F(MetricsE2ETest, BlockctlShowsLiveBridgeIoWithoutThePlugin) {
  ASSERT_TRUE(StartPlugin({}));
  Volume v = CreateAndPublish("metrics-blockctl");
  ASSERT_TRUE(Ok(Stage(v)));
  plugin_->Stop();
  auto run = [&] {
    std::string output;
    int rc = RunWithInput(
        testing::BinDir() + "/blockctl --state-dir " + plugin_->state_dir() + " -o json io 2>/dev/null", &output);
    return std::pair{rc, output};
  };
  auto [rc, out] = run();
  ASSERT_EQ(rc, 0) << out;
  nlohmann::json listing = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(listing.is_array() && listing.size() == 1) << out;
  EXPECT_EQ(listing[0].value("volume_id", ""), v.id) << out;
  EXPECT_TRUE(listing[0].value("answered", false)) << out;
  uint64_t writes = listing[0]["io"]["write"].value("ops", uint64_t{0});
  EXPECT_GT(writes, 0u) << out;  // mkfs went through the bridge
  uint64_t reads = listing[0]["io"]["read"].value("ops", uint64_t{0});
  // Live: I/O to the device moves the figures on the next call.
  std::string staging_device;
  {
    std::ifstream mounts("/proc/self/mountinfo");
    std::string line;
    while (std::getline(mounts, line)) {
      if (line.find(" " + plugin_->staging_path(v.id) + " ") != std::string::npos) {
        std::istringstream fields(line.substr(line.find(" - ") + 3));
        std::string fs;
        fields >> fs >> staging_device;
      }
    }
  }
  ASSERT_FALSE(staging_device.empty());
  std::string dd_out;
  ASSERT_EQ(RunWithInput("dd if=" + staging_device + " of=/dev/null bs=4096 count=64 iflag=direct", &dd_out), 0)
      << dd_out;
  auto [rc2, out2] = run();
  ASSERT_EQ(rc2, 0) << out2;
  nlohmann::json again = nlohmann::json::parse(out2, nullptr, false);
  ASSERT_TRUE(again.is_array() && again.size() == 1) << out2;
  EXPECT_GE(again[0]["io"]["read"].value("ops", uint64_t{0}), reads + 1) << out2;
  EXPECT_EQ(out2.find(kSecret), std::string::npos);

  // The table form names the volume too.
  std::string table;
  RunWithInput(testing::BinDir() + "/blockctl --state-dir " + plugin_->state_dir() + " io", &table);
  EXPECT_NE(table.find(v.id), std::string::npos) << table;

  ASSERT_TRUE(StartPlugin({}));
  ASSERT_TRUE(Ok(Unstage(v)));
  UnpublishAndDelete(v);
}

// tgtd keeps no state: after a kill -9 and a restart the next reconcile pass
// re-creates every target, which the figures report as a restart seen.
TEST_F(MetricsE2ETest, ATgtdRestartIsSeenAndRepairedByReconcile) {
  testing::PluginOptions options;
  options.extra_args = {"--reconcile-interval", "1s"};
  ASSERT_TRUE(StartPlugin(options));
  Volume v = CreateAndPublish("metrics-restart");
  ASSERT_FALSE(v.id.empty());
  std::string before = Scrape();
  EXPECT_EQ(testing::MetricSample(before, "blockcsi_target_daemon_restarts_seen_total"), 0) << before;
  double repairs_before = testing::MetricSample(before, "blockcsi_target_reconcile_repairs_total");

  tgtd_->Kill9();
  std::string error;
  ASSERT_TRUE(tgtd_->Restart(&error)) << error;
  std::string after;
  for (int i = 0; i < 300; ++i) {  // a pass every second; a loaded machine may take longer
    after = Scrape();
    if (testing::MetricSample(after, "blockcsi_target_daemon_restarts_seen_total") >= 1) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(testing::MetricSample(after, "blockcsi_target_daemon_restarts_seen_total"), 1) << after;
  EXPECT_GT(testing::MetricSample(after, "blockcsi_target_reconcile_repairs_total"), repairs_before) << after;
  EXPECT_GE(testing::MetricSample(after, "blockcsi_target_reconcile_runs_total{result=\"OK\"}"), 2) << after;
  EXPECT_NE(tgtd_->ShowTargets().find(v.id.substr(v.id.size() - 8)), std::string::npos)
      << "the target is back: " << tgtd_->ShowTargets();
  UnpublishAndDelete(v);
}

TEST_F(MetricsE2ETest, BadRequestsToTheMetricsPortNeverHarmThePlugin) {
  ASSERT_TRUE(StartPlugin({}));
  ASSERT_FALSE(Scrape().empty());
  testing::HttpExchange(metrics_port_, "\x16\x03\x01\x02\x00not http at all\r\n\r\n");
  testing::HttpExchange(metrics_port_,
                        "POST /metrics HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n" + std::string(65536, 'x'));
  testing::HttpExchange(metrics_port_, "GET /" + std::string(100000, 'a') + " HTTP/1.1\r\n\r\n");
  testing::HttpExchange(metrics_port_, "GET /metrics HTTP/1.1\r\n" + std::string(50000, 'H') + ": v\r\n\r\n");
  EXPECT_EQ(testing::HttpGetBody(metrics_port_, "/../../etc/shadow"), "");
  std::vector<std::thread> slow;
  for (int i = 0; i < 16; ++i) slow.emplace_back([this] { testing::HttpExchange(metrics_port_, "GET /met"); });
  for (auto& t : slow) t.join();

  EXPECT_TRUE(plugin_->running());
  csi::v1::ProbeRequest probe;
  csi::v1::ProbeResponse presp;
  EXPECT_TRUE(Ok(plugin_->identity().Probe(testing::Deadline().get(), probe, &presp)));
  std::string text = Scrape();
  EXPECT_EQ(testing::MetricSample(text, Calls("Identity/Probe", "OK")), 1) << text;
}

TEST_F(MetricsE2ETest, PrometheusScrapesPluginAndAgentAndAnswersWithTheCallsMade) {
  const char* prometheus = "/usr/bin/prometheus";
  if (::access(prometheus, X_OK) != 0) GTEST_SKIP() << "prometheus not installed (Debian package prometheus)";
  // The agent on its own pool, with its metrics port.
  testing::ReservedPort agent_reserved(testing::ReservedPort::Use::kForServer);
  testing::ReservedPort agent_metrics_reserved(testing::ReservedPort::Use::kForServer);
  const int agent_port = agent_reserved.port();
  const int agent_metrics = agent_metrics_reserved.port();
  agent_ = std::make_unique<testing::ChildProcess>(
      std::vector<std::string>{testing::BinDir() + "/blockcsi-target", "--pool", dir_.Join("agent-pool"), "--listen",
                               "127.0.0.1:" + std::to_string(agent_port), "--insecure", "--tgt-control-port",
                               std::to_string(tgtd_->control_port()), "--portal", tgtd_->portal(), "--metrics-address",
                               "127.0.0.1:" + std::to_string(agent_metrics)},
      dir_.Join("agent.log"));
  for (int i = 0; i < 200 && testing::HttpGetBody(agent_metrics, "/metrics").empty(); ++i)
    std::this_thread::sleep_for(100ms);
  ASSERT_FALSE(testing::HttpGetBody(agent_metrics, "/metrics").empty())
      << testing::ReadFileOrEmpty(dir_.Join("agent.log"));

  testing::PluginOptions options;
  options.mode = "controller";
  options.backend = "remote";
  options.extra_args = {"--target-agent", "127.0.0.1:" + std::to_string(agent_port), "--insecure"};
  ASSERT_TRUE(StartPlugin(options));
  const int kCreates = 3;
  std::string first_id;
  std::vector<std::string> ids;
  for (int i = 0; i < kCreates; ++i) {
    csi::v1::CreateVolumeRequest req;
    req.set_name("prom-" + std::to_string(i));
    req.mutable_capacity_range()->set_required_bytes(16LL << 20);
    *req.add_volume_capabilities() = testing::CapabilityFor("ext4");
    csi::v1::CreateVolumeResponse resp;
    ASSERT_TRUE(Ok(plugin_->controller().CreateVolume(testing::Deadline().get(), req, &resp)));
    if (i == 0) first_id = resp.volume().volume_id();
    ids.push_back(resp.volume().volume_id());
  }
  // One publish and one unpublish: the agent counts one ACL grant and one revoke.
  csi::v1::ControllerPublishVolumeRequest pub;
  pub.set_volume_id(first_id);
  pub.set_node_id("e2e-node");
  *pub.mutable_volume_capability() = testing::CapabilityFor("ext4");
  csi::v1::ControllerPublishVolumeResponse presp;
  ASSERT_TRUE(Ok(plugin_->controller().ControllerPublishVolume(testing::Deadline().get(), pub, &presp)));
  csi::v1::ControllerUnpublishVolumeRequest unpub;
  unpub.set_volume_id(first_id);
  unpub.set_node_id("e2e-node");
  csi::v1::ControllerUnpublishVolumeResponse uresp;
  ASSERT_TRUE(Ok(plugin_->controller().ControllerUnpublishVolume(testing::Deadline().get(), unpub, &uresp)));
  std::string agent_text = testing::HttpGetBody(agent_metrics, "/metrics");
  EXPECT_EQ(testing::MetricSample(agent_text, "blockcsi_target_operations_total{operation=\"grant\",result=\"OK\"}"), 1)
      << agent_text;
  EXPECT_EQ(testing::MetricSample(agent_text, "blockcsi_target_operations_total{operation=\"revoke\",result=\"OK\"}"),
            1)
      << agent_text;
  EXPECT_NE(agent_text.find("blockcsi_build_info{program=\"blockcsi-target\""), std::string::npos) << agent_text;

  // Prometheus in its own directory, on a port of its own, scraping both every second.
  testing::ReservedPort prom_reserved(testing::ReservedPort::Use::kForServer);
  const int prom_port = prom_reserved.port();
  std::string config = dir_.Join("prometheus.yml");
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                        << "scrape_configs:\n"
                        << "  - job_name: blockcsi\n    static_configs:\n      - targets: ['127.0.0.1:" << metrics_port_
                        << "']\n"
                        << "  - job_name: blockcsi-target\n    static_configs:\n      - targets: ['127.0.0.1:"
                        << agent_metrics << "']\n";
  prometheus_ = std::make_unique<testing::ChildProcess>(
      std::vector<std::string>{prometheus, "--config.file=" + config, "--storage.tsdb.path=" + dir_.Join("tsdb"),
                               "--web.listen-address=127.0.0.1:" + std::to_string(prom_port), "--log.level=warn"},
      dir_.Join("prometheus.log"));

  // The query API: the plugin's CreateVolume calls and the agent's, as scraped.
  auto query = [&](const std::string& promql) {
    std::string encoded;
    for (unsigned char c : promql) {
      if (std::isalnum(c) || c == '_' || c == '.') {
        encoded += static_cast<char>(c);
      } else {
        char buf[4];
        std::snprintf(buf, sizeof buf, "%%%02X", c);
        encoded += buf;
      }
    }
    return testing::HttpGetBody(prom_port, "/api/v1/query?query=" + encoded);
  };
  const std::string plugin_q =
      "blockcsi_grpc_calls_total{job=\"blockcsi\",method=\"/csi.v1.Controller/CreateVolume\",code=\"OK\"}";
  const std::string agent_q =
      "blockcsi_grpc_calls_total{job=\"blockcsi-target\",method=\"/blockcsi.target.v1.TargetAgent/CreateVolume\","
      "code=\"OK\"}";
  const std::regex value(R"re("value":\[[0-9.]+,"([0-9.]+)"\])re");
  std::string plugin_answer, agent_answer;
  std::smatch m;
  for (int i = 0; i < 600; ++i) {  // Prometheus starts and scrapes within seconds; a loaded machine: give it a minute
    plugin_answer = query(plugin_q);
    agent_answer = query(agent_q);
    if (std::regex_search(plugin_answer, m, value) && std::regex_search(agent_answer, m, value)) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(std::regex_search(plugin_answer, m, value)) << plugin_answer << "\n"
                                                          << testing::ReadFileOrEmpty(dir_.Join("prometheus.log"));
  EXPECT_EQ(m[1].str(), std::to_string(kCreates)) << plugin_answer;
  ASSERT_TRUE(std::regex_search(agent_answer, m, value)) << agent_answer;
  EXPECT_EQ(m[1].str(), std::to_string(kCreates)) << agent_answer;
  // The pool's figures reached Prometheus too.
  std::string pool = query("blockcsi_target_pool_volumes{job=\"blockcsi-target\"}");
  ASSERT_TRUE(std::regex_search(pool, m, value)) << pool;
  EXPECT_EQ(m[1].str(), std::to_string(kCreates)) << pool;
  // The CO's end: the volumes go (the fixture then asserts nothing is left).
  for (const auto& id : ids) {
    csi::v1::DeleteVolumeRequest del;
    del.set_volume_id(id);
    csi::v1::DeleteVolumeResponse dresp;
    EXPECT_TRUE(Ok(plugin_->controller().DeleteVolume(testing::Deadline().get(), del, &dresp))) << id;
  }
}

}  // namespace
}  // namespace blockcsi
