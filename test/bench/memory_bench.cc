// memory_bench: the plugin's memory beside the CSI reference driver
// (csi-driver-host-path, hostpathplugin, a peer program) in the same run
// (issue #18). Each subject is started fresh and measured three times:
//   idle        2 s after its socket came up, before any call;
//   lifecycle   after one whole volume lifecycle (Create, ControllerPublish,
//               NodeStage, NodePublish and back to DeleteVolume);
//   staged      with N volumes created, published and staged (N concurrent
//               NodeStage calls, as kubelet makes them after a reboot).
// blockcsi runs as `--mode all`, `--mode controller` (its calls stop at
// ControllerPublish; "staged" is N volumes published) and `--mode node` (a
// helper blockcsi --mode controller, not measured, makes and publishes the
// volumes). "all+metrics" and "node+metrics" are those modes as deployed,
// with --metrics-address, scraped once before each measurement as
// Prometheus would. hostpathplugin does the same CSI calls in every row.
// Figures: VmRSS, and PSS and private (clean + dirty) from smaps_rollup, of
// the plugin process alone (bridges are separate processes, reported by
// lifecycle_bench). Every row is a ratio to hostpath in the same state.
// Every program is started with its pages out of the page cache (see
// DropFromPageCache).
// --smaps-dir DIR keeps /proc/PID/smaps and the thread count of every
// blockcsi measurement there (`hack/smaps_by_mapping.py DIR/FILE` sums it).
//   memory_bench [--hostpath PATH] [--staged N] [--size-mib M] [--binary LABEL=PATH]...
//                [--modes all,controller,node,all+metrics,node+metrics] [--smaps-dir DIR]
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "bench/bench_args.h"
#include "bench/bench_report.h"
#include "bench/process_rss.h"
#include "common/logging.h"
#include "support/http_probe.h"
#include "support/plugin_under_test.h"

namespace blockcsi::bench {
namespace {

using namespace std::chrono_literals;
using Controller = csi::v1::Controller::Stub;
using Node = csi::v1::Node::Stub;

constexpr char kNode[] = "mem-node";

using Memory = ProcessMemory;

// The CSI calls of one volume, against a controller and (when set) a node.
class Driver {
 public:
  Driver(Controller* controller, Node* node, std::string dir, uint64_t bytes)
      : controller_(controller), node_(node), dir_(std::move(dir)), bytes_(bytes) {}

  bool CreateAndPublish(const std::string& name, std::string* id, std::map<std::string, std::string>* ctx) {
    csi::v1::CreateVolumeRequest create;
    create.set_name(name);
    create.mutable_capacity_range()->set_required_bytes(static_cast<int64_t>(bytes_));
    *create.add_volume_capabilities() = testing::MountCapability("ext4");
    csi::v1::CreateVolumeResponse created;
    if (!Ok(controller_->CreateVolume(testing::Deadline().get(), create, &created), "CreateVolume")) return false;
    *id = created.volume().volume_id();
    *ctx = {created.volume().volume_context().begin(), created.volume().volume_context().end()};
    csi::v1::ControllerPublishVolumeRequest publish;
    publish.set_volume_id(*id);
    publish.set_node_id(kNode);
    *publish.mutable_volume_capability() = testing::MountCapability("ext4");
    for (const auto& [k, v] : *ctx) (*publish.mutable_volume_context())[k] = v;
    csi::v1::ControllerPublishVolumeResponse published;
    if (!Ok(controller_->ControllerPublishVolume(testing::Deadline().get(), publish, &published), "Publish")) {
      return false;
    }
    publish_context_[*id] = {published.publish_context().begin(), published.publish_context().end()};
    return true;
  }

  bool Stage(const std::string& id, const std::map<std::string, std::string>& ctx) {
    if (node_ == nullptr) return true;
    csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id(id);
    req.set_staging_target_path(Staging(id));
    *req.mutable_volume_capability() = testing::MountCapability("ext4");
    for (const auto& [k, v] : PublishContext(id)) (*req.mutable_publish_context())[k] = v;
    for (const auto& [k, v] : ctx) (*req.mutable_volume_context())[k] = v;
    std::filesystem::create_directories(Staging(id));
    csi::v1::NodeStageVolumeResponse resp;
    return Ok(node_->NodeStageVolume(testing::Deadline().get(), req, &resp), "NodeStage");
  }

  bool PublishAndUnpublish(const std::string& id, const std::map<std::string, std::string>& ctx) {
    if (node_ == nullptr) return true;
    csi::v1::NodePublishVolumeRequest req;
    req.set_volume_id(id);
    req.set_staging_target_path(Staging(id));
    req.set_target_path(dir_ + "/pods/" + id + "/mount");
    *req.mutable_volume_capability() = testing::MountCapability("ext4");
    for (const auto& [k, v] : PublishContext(id)) (*req.mutable_publish_context())[k] = v;
    for (const auto& [k, v] : ctx) (*req.mutable_volume_context())[k] = v;
    std::filesystem::create_directories(dir_ + "/pods/" + id);
    csi::v1::NodePublishVolumeResponse resp;
    if (!Ok(node_->NodePublishVolume(testing::Deadline().get(), req, &resp), "NodePublish")) return false;
    csi::v1::NodeUnpublishVolumeRequest un;
    un.set_volume_id(id);
    un.set_target_path(req.target_path());
    csi::v1::NodeUnpublishVolumeResponse unresp;
    return Ok(node_->NodeUnpublishVolume(testing::Deadline().get(), un, &unresp), "NodeUnpublish");
  }

  bool Teardown(const std::string& id) {
    bool ok = true;
    if (node_ != nullptr) {
      csi::v1::NodeUnstageVolumeRequest un;
      un.set_volume_id(id);
      un.set_staging_target_path(Staging(id));
      csi::v1::NodeUnstageVolumeResponse resp;
      ok = Ok(node_->NodeUnstageVolume(testing::Deadline().get(), un, &resp), "NodeUnstage");
    }
    csi::v1::ControllerUnpublishVolumeRequest unpublish;
    unpublish.set_volume_id(id);
    unpublish.set_node_id(kNode);
    csi::v1::ControllerUnpublishVolumeResponse unpublished;
    ok = Ok(controller_->ControllerUnpublishVolume(testing::Deadline().get(), unpublish, &unpublished),
            "ControllerUnpublish") &&
         ok;
    csi::v1::DeleteVolumeRequest del;
    del.set_volume_id(id);
    csi::v1::DeleteVolumeResponse deleted;
    return Ok(controller_->DeleteVolume(testing::Deadline().get(), del, &deleted), "DeleteVolume") && ok;
  }

  int errors() const { return errors_; }

 private:
  std::string Staging(const std::string& id) const { return dir_ + "/staging/" + id; }
  std::map<std::string, std::string> PublishContext(const std::string& id) {
    std::lock_guard lock(mu_);
    return publish_context_[id];
  }
  bool Ok(const grpc::Status& st, const char* what) {
    if (st.ok()) return true;
    std::fprintf(stderr, "memory_bench: %s: %s\n", what, st.error_message().c_str());
    std::lock_guard lock(mu_);
    ++errors_;
    return false;
  }

  Controller* controller_;
  Node* node_;
  std::string dir_;
  uint64_t bytes_;
  std::mutex mu_;
  std::map<std::string, std::map<std::string, std::string>> publish_context_;
  int errors_ = 0;
};

struct Sample {
  Memory idle, lifecycle, staged;
};

// How one subject is measured: a scrape of its /metrics port (0: none)
// before each figure, and where its smaps go ("" nowhere).
struct Probe {
  int metrics_port = 0;
  std::string smaps_prefix;
};

Memory Measure(pid_t pid, const Probe& probe, const char* state) {
  if (probe.metrics_port > 0 && testing::HttpGetBody(probe.metrics_port, "/metrics").empty()) {
    std::fprintf(stderr, "memory_bench: no /metrics answer on port %d\n", probe.metrics_port);
  }
  Memory m = MeasureProcessMemory(pid);
  if (!probe.smaps_prefix.empty()) {
    std::string proc = "/proc/" + std::to_string(pid);
    std::ofstream(probe.smaps_prefix + "-" + state + ".smaps") << testing::ReadFileOrEmpty(proc + "/smaps");
    std::error_code ec;
    auto tasks = std::distance(std::filesystem::directory_iterator(proc + "/task", ec), {});
    std::ofstream(probe.smaps_prefix + "-" + state + ".threads") << tasks << "\n";
  }
  return m;
}

// Idle, one lifecycle, then `staged` volumes at once; everything is torn
// down again before returning (the caller stops the process).
Sample Exercise(pid_t pid, Driver& driver, const std::string& prefix, int staged, const Probe& probe = {}) {
  Sample s;
  std::this_thread::sleep_for(2s);
  s.idle = Measure(pid, probe, "idle");
  std::string id;
  std::map<std::string, std::string> ctx;
  if (driver.CreateAndPublish(prefix + "-life", &id, &ctx) && driver.Stage(id, ctx)) {
    driver.PublishAndUnpublish(id, ctx);
  }
  if (!id.empty()) driver.Teardown(id);
  std::this_thread::sleep_for(1s);
  s.lifecycle = Measure(pid, probe, "lifecycle");
  std::vector<std::string> ids(staged);
  std::vector<std::map<std::string, std::string>> ctxs(staged);
  for (int i = 0; i < staged; ++i) driver.CreateAndPublish(prefix + "-s" + std::to_string(i), &ids[i], &ctxs[i]);
  std::vector<std::thread> threads;
  for (int i = 0; i < staged; ++i) {
    if (!ids[i].empty()) threads.emplace_back([&, i] { driver.Stage(ids[i], ctxs[i]); });
  }
  for (auto& t : threads) t.join();
  std::this_thread::sleep_for(1s);
  s.staged = Measure(pid, probe, "staged");
  for (const auto& v : ids) {
    if (!v.empty()) driver.Teardown(v);
  }
  return s;
}

template <typename Stub>
std::unique_ptr<Stub> Connect(const std::string& socket,
                              std::unique_ptr<Stub> (*make)(const std::shared_ptr<grpc::ChannelInterface>&,
                                                            const grpc::StubOptions&)) {
  return make(grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()), grpc::StubOptions());
}

// Each program's pages leave the page cache before it starts, so that every
// side maps its text read back from disk, as a deployed program does: a
// program the linker has just written maps up to 1 MiB more of it (the
// kernel maps text around each fault from whatever the cache holds, and a
// written file is cached differently from one read back), which would make
// a fresh build look bigger than a copied one.
void DropFromPageCache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);  // dirty pages cannot be dropped
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// The reference driver, started, exercised and stopped by pid.
bool RunHostpath(const std::string& program, const std::string& dir, uint64_t bytes, int staged, Sample* out) {
  std::filesystem::create_directories(dir + "/state");
  std::string socket = dir + "/csi.sock";
  DropFromPageCache(program);
  testing::ChildProcess hostpath({program, "--endpoint", "unix://" + socket, "--nodeid", kNode, "--drivername",
                                  "hostpath.csi.k8s.io", "--statedir", dir + "/state", "-enable-attach"},
                                 dir + "/hostpath.log");
  if (!testing::WaitForSocket(socket, 20s)) {
    std::fprintf(stderr, "memory_bench: hostpathplugin did not come up:\n%s\n",
                 testing::ReadFileOrEmpty(dir + "/hostpath.log").c_str());
    return false;
  }
  auto controller = Connect<Controller>(socket, &csi::v1::Controller::NewStub);
  auto node = Connect<Node>(socket, &csi::v1::Node::NewStub);
  Driver driver(controller.get(), node.get(), dir, bytes);
  *out = Exercise(hostpath.pid(), driver, "hp", staged);
  hostpath.Signal(SIGTERM);
  if (hostpath.Wait(10s) < 0) hostpath.Signal(SIGKILL);
  testing::CleanUpUnder(dir);
  return driver.errors() == 0;
}

// blockcsi in `row` (a mode, "+metrics": with --metrics-address); for mode
// node a helper controller (not measured).
bool RunBlockcsi(const std::string& binary, const std::string& row, const std::string& dir,
                 const testing::TgtdHarness* tgtd, uint64_t bytes, int staged, const std::string& smaps_prefix,
                 Sample* out) {
  testing::PluginUnderTest plugin(dir + "/plugin", tgtd);
  testing::PluginUnderTest helper(dir + "/helper", tgtd);
  DropFromPageCache(binary);
  std::string mode = row.substr(0, row.find('+'));
  testing::PluginOptions options;
  options.mode = mode;
  options.node_id = kNode;
  options.binary = binary;
  Probe probe{.metrics_port = 0, .smaps_prefix = smaps_prefix};
  testing::ReservedPort metrics(testing::ReservedPort::Use::kForServer);
  if (row.ends_with("+metrics")) {
    probe.metrics_port = metrics.port();
    options.extra_args = {"--metrics-address", "127.0.0.1:" + std::to_string(metrics.port())};
  }
  std::string error;
  if (!plugin.Start(options, &error)) {
    std::fprintf(stderr, "memory_bench: blockcsi --mode %s: %s\n", mode.c_str(), error.c_str());
    return false;
  }
  Controller* controller = &plugin.controller();
  if (mode == "node") {
    testing::PluginOptions helper_options;
    helper_options.mode = "controller";
    helper_options.binary = binary;
    if (!helper.Start(helper_options, &error)) {
      std::fprintf(stderr, "memory_bench: helper controller: %s\n", error.c_str());
      return false;
    }
    controller = &helper.controller();
  }
  Driver driver(controller, mode == "controller" ? nullptr : &plugin.node(), plugin.dir(), bytes);
  *out = Exercise(plugin.pid(), driver, "bc-" + mode, staged, probe);
  plugin.Stop();
  helper.Stop();
  testing::CleanUpUnder(dir);
  return driver.errors() == 0;
}

void ReportSample(const std::string& who, const Sample& s, const Sample& hp, const char* staged_label) {
  const std::pair<const char*, Memory Sample::*> states[] = {
      {"idle", &Sample::idle}, {"after one lifecycle", &Sample::lifecycle}, {staged_label, &Sample::staged}};
  for (const auto& [state, field] : states) {
    const Memory& m = s.*field;
    const Memory& h = hp.*field;
    std::string at = who + ", " + state;
    Report("RSS " + at, m.rss, h.rss, "MiB", "hostpath");
    Report("PSS " + at, m.pss, h.pss, "MiB", "hostpath");
    Report("Private " + at, m.priv, h.priv, "MiB", "hostpath");
  }
}

int Main(int argc, char** argv) {
  std::string hostpath = testing::BuildDir() + "/peers/hostpathplugin";
  int staged = 64;
  uint64_t size_mib = 64;
  std::vector<std::string> labelled;
  std::vector<std::string> rows = {"all", "controller", "node", "all+metrics", "node+metrics"};
  std::string smaps_dir;
  CLI::App app{"memory_bench: the plugin's memory beside the CSI reference driver", "memory_bench"};
  app.add_option("--hostpath", hostpath, "the hostpathplugin program")->capture_default_str();
  app.add_option("--staged", staged, "volumes staged in the last state")->capture_default_str();
  app.add_option("--size-mib", size_mib, "volume size")->capture_default_str();
  app.add_option("--binary", labelled, "LABEL=PATH: one more blockcsi to measure (repeatable)")
      ->check(CLI::Validator(
          [](std::string& v) { return v.find('=') == std::string::npos ? std::string("wants LABEL=PATH") : ""; },
          "LABEL=PATH"));
  app.add_option("--modes", rows, "which rows to measure, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"all", "controller", "node", "all+metrics", "node+metrics"}))
      ->capture_default_str();
  app.add_option("--smaps-dir", smaps_dir, "keep each row's /proc/PID/smaps here (for hack/smaps_by_mapping.py)");
  if (auto exit_code = ParseFlags(app, argc, argv)) return *exit_code;
  std::vector<std::pair<std::string, std::string>> binaries;
  for (const auto& value : labelled) {
    binaries.emplace_back(value.substr(0, value.find('=')), value.substr(value.find('=') + 1));
  }
  // This build first; --binary adds others (e.g. a build from before a change).
  binaries.insert(binaries.begin(), {"blockcsi", testing::BinDir() + "/blockcsi"});
  InitLogging("memory_bench", LogFormat::kText, LogLevel::kWarn);
  if (::access(hostpath.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "memory_bench: skipped: no hostpathplugin at %s (unpack ../shared/peers/bin/hostpathplugin.xz)\n",
                 hostpath.c_str());
    return 2;
  }
  if (!testing::IsRoot() || ::access("/dev/fuse", R_OK | W_OK) != 0) {
    std::fprintf(stderr, "memory_bench: needs root and /dev/fuse\n");
    return 2;
  }
  std::string error;
  auto tgtd = testing::TgtdHarness::Start(&error);
  if (!tgtd) {
    std::fprintf(stderr, "memory_bench: %s\n", error.c_str());
    return 2;
  }
  testing::TempDir tmp;
  uint64_t bytes = size_mib << 20;
  Sample hp;
  bool ok = RunHostpath(hostpath, tmp.Join("hostpath"), bytes, staged, &hp);
  std::printf("Plugin memory against hostpathplugin (same CSI calls, same run; %d staged)\n", staged);
  if (!smaps_dir.empty()) std::filesystem::create_directories(smaps_dir);
  for (const auto& [label, binary] : binaries) {
    for (const std::string& row : rows) {
      Sample s;
      std::string name = label + "-" + row;
      std::string smaps_prefix = smaps_dir.empty() ? "" : smaps_dir + "/" + name;
      ok = RunBlockcsi(binary, row, tmp.Join(name), tgtd.get(), bytes, staged, smaps_prefix, &s) && ok;
      std::string staged_label = "with " + std::to_string(staged) + (row == "controller" ? " published" : " staged");
      std::string who = label + " --mode " + row.substr(0, row.find('+'));
      if (row.ends_with("+metrics")) who += " --metrics-address";
      ReportSample(who, s, hp, staged_label.c_str());
    }
  }
  testing::CleanUpUnder(tmp.path());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace blockcsi::bench

int main(int argc, char** argv) { return blockcsi::bench::Main(argc, argv); }
