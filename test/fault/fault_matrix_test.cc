// The kill -9 matrix (issue #7): for every named crash point of the
// controller (local backend in the plugin), of the storage-host agent
// (blockcsi-target behind --backend remote) and of the node (NodeStage,
// NodeUnstage, NodeExpandVolume, the attach record's writes), the real
// process is started armed with that point
// (BLOCKCSI_FAULT_POINT), dies there by SIGKILL in the middle of a real
// operation, is restarted unarmed, and the same request is retried as the
// sidecars or kubelet would. Each case asserts that the operation
// converges, that no device is formatted twice, that data written before
// survives, and that nothing is leaked: tgtd's targets, LUNs, ACLs and
// accounts are exactly what the pool's volumes and grants need, no image
// lies in the pool without a volume, and after the teardown no session,
// bridge, loop device, mount or attach record is left. The matrix (kill
// point × outcome) is printed at the end and written to
// <build>/fault-matrix.txt.
//
// Needs root, tgtd and /dev/fuse; each case skips with the reason
// otherwise. One tgtd serves the whole suite: every case ends with no
// target left (and removes leftovers of a failed case before the next).
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/local/pool.h"
#include "backend/local/tgtadm_parser.h"
#include "common/block_probe.h"
#include "common/executor.h"
#include "common/mounter.h"
#include "contract/initiator.h"
#include "support/csi_requests.h"
#include "support/leak_check.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kVolumeBytes = 64LL << 20;
// What the expand cases grow a volume of kVolumeBytes to.
constexpr int64_t kGrownBytes = 128LL << 20;
// The node expand case's volume (xfs: mkfs.xfs wants 300 MB at least) and
// what it grows to. xfs because a mounted ext4 grows only with
// CAP_SYS_RESOURCE, which the test's process may lack.
constexpr int64_t kXfsVolumeBytes = 320LL << 20;
constexpr int64_t kXfsGrownBytes = 512LL << 20;
constexpr char kNodeId[] = "e2e-node";
constexpr char kFs[] = "ext4";
// Written into the image (controller cases) or into a file on the volume
// (node cases) before the kill, and read back after the retry.
constexpr char kPrecious[] = "written before the kill -9";
constexpr off_t kPatternOffset = 1 << 20;
// The controller-publish secret of the CHAP cases (a test value).
constexpr char kChapUser[] = "fault-chap-user";
constexpr char kChapPassword[] = "fault-chap-secret-0123";

enum class Side { kController, kAgent, kNode };

struct KillPoint {
  const char* name;   // the matrix row
  const char* armed;  // what goes into BLOCKCSI_FAULT_POINT
  Side side;
  // create | publish | unpublish | expand | snapshot | delete-snapshot |
  // delete (controller and agent); stage | unstage | expand (node)
  const char* op;
  bool chap = false;     // the volume asks for CHAP (StorageClass chap=true)
  const char* fs = kFs;  // the volume's filesystem
};

std::ostream& operator<<(std::ostream& out, const KillPoint& p) { return out << p.name; }

// In the order each operation reaches them, by the names of
// common/fault_points.h ("node.stage.after-connect" is the attacher's step
// after the session and the bridge exist, before the record names the
// device).
const KillPoint kKillPoints[] = {
    {"controller.create.after-record", "controller.create.after-record", Side::kController, "create"},
    {"controller.create.after-export", "controller.create.after-export", Side::kController, "create"},
    {"controller.create.image-placed", "controller.create.image-placed", Side::kController, "create"},
    {"controller.publish.after-grant-record", "controller.publish.after-grant-record", Side::kController, "publish"},
    {"controller.publish.after-acl", "controller.publish.after-acl", Side::kController, "publish"},
    {"controller.unpublish.after-grant-removed", "controller.unpublish.after-grant-removed", Side::kController,
     "unpublish"},
    {"controller.unpublish.after-acl-removed", "controller.unpublish.after-acl-removed", Side::kController,
     "unpublish"},
    {"controller.delete.after-unexport", "controller.delete.after-unexport", Side::kController, "delete"},
    {"controller.delete.after-image-removed", "controller.delete.after-image-removed", Side::kController, "delete"},
    {"controller.delete.record-removed", "controller.delete.record-removed", Side::kController, "delete"},
    // The image staged in tmp/ (Open() empties tmp/), and an expand whose
    // image grew before its record (Open() rolls the record forward).
    {"controller.create.image-staged", "controller.create.image-staged", Side::kController, "create"},
    {"controller.expand.after-image-grown", "controller.expand.after-image-grown", Side::kController, "expand"},
    // A snapshot's copy staged, then placed without its record (Open()
    // removes both); a deleted snapshot's record gone, its image left.
    {"controller.snapshot.image-staged", "controller.snapshot.image-staged", Side::kController, "snapshot"},
    {"controller.snapshot.image-placed", "controller.snapshot.image-placed", Side::kController, "snapshot"},
    {"controller.delete-snapshot.record-removed", "controller.delete-snapshot.record-removed", Side::kController,
     "delete-snapshot"},
    {"agent.create.after-record", "agent.create.after-record", Side::kAgent, "create"},
    {"agent.create.after-export", "agent.create.after-export", Side::kAgent, "create"},
    {"agent.publish.after-grant-record", "agent.publish.after-grant-record", Side::kAgent, "publish"},
    {"agent.publish.after-acl", "agent.publish.after-acl", Side::kAgent, "publish"},
    {"agent.unpublish.after-grant-removed", "agent.unpublish.after-grant-removed", Side::kAgent, "unpublish"},
    {"agent.unpublish.after-acl-removed", "agent.unpublish.after-acl-removed", Side::kAgent, "unpublish"},
    {"agent.delete.after-unexport", "agent.delete.after-unexport", Side::kAgent, "delete"},
    {"agent.delete.after-image-removed", "agent.delete.after-image-removed", Side::kAgent, "delete"},
    {"agent.create.image-placed", "agent.create.image-placed", Side::kAgent, "create"},
    {"agent.delete.record-removed", "agent.delete.record-removed", Side::kAgent, "delete"},
    {"agent.create.image-staged", "agent.create.image-staged", Side::kAgent, "create"},
    {"agent.expand.after-image-grown", "agent.expand.after-image-grown", Side::kAgent, "expand"},
    {"agent.snapshot.image-staged", "agent.snapshot.image-staged", Side::kAgent, "snapshot"},
    {"agent.snapshot.image-placed", "agent.snapshot.image-placed", Side::kAgent, "snapshot"},
    {"agent.delete-snapshot.record-removed", "agent.delete-snapshot.record-removed", Side::kAgent, "delete-snapshot"},
    // With CHAP: the secrets live in the backend's memory only, so a
    // restart loses them and the retried publish must bring them back.
    {"controller.publish.after-grant-record/chap", "controller.publish.after-grant-record", Side::kController,
     "publish", true},
    {"controller.publish.after-acl/chap", "controller.publish.after-acl", Side::kController, "publish", true},
    {"controller.unpublish.after-grant-removed/chap", "controller.unpublish.after-grant-removed", Side::kController,
     "unpublish", true},
    {"agent.publish.after-grant-record/chap", "agent.publish.after-grant-record", Side::kAgent, "publish", true},
    {"agent.unpublish.after-acl-removed/chap", "agent.unpublish.after-acl-removed", Side::kAgent, "unpublish", true},
    // Inside AttachRecordStore::Put (issue #22), at each step of the first
    // record write of a stage: the temp file written, fsynced, renamed over
    // the record, the directory fsynced.
    {"node.record.temp-written", "node.record.temp-written", Side::kNode, "stage"},
    {"node.record.temp-synced", "node.record.temp-synced", Side::kNode, "stage"},
    {"node.record.renamed", "node.record.renamed", Side::kNode, "stage"},
    {"node.record.dir-synced", "node.record.dir-synced", Side::kNode, "stage"},
    {"node.stage.after-connect", "node.stage.after-connect", Side::kNode, "stage"},
    {"node.stage.after-attach", "node.stage.after-attach", Side::kNode, "stage"},
    {"node.stage.after-mkfs", "node.stage.after-mkfs", Side::kNode, "stage"},
    {"node.stage.after-mount", "node.stage.after-mount", Side::kNode, "stage"},
    {"node.unstage.after-unmount", "node.unstage.after-unmount", Side::kNode, "unstage"},
    // NodeExpandVolume of a published volume: the device rescanned, the
    // filesystem not grown yet.
    {"node.expand.after-rescan", "node.expand.after-rescan", Side::kNode, "expand", false, "xfs"},
    // The bridge holds the CHAP secret it was given on stdin; the restarted
    // plugin has only what kubelet's retry passes again.
    {"node.stage.after-connect/chap", "node.stage.after-connect", Side::kNode, "stage", true},
};

// ---- the matrix ----

struct Outcome {
  std::string killed = "?";     // yes | NO
  std::string converged = "?";  // "ok, N tries" | "NO: <code>"
  std::string formats = "-";    // mkfs runs of the volume (node cases)
  std::string data = "-";       // intact | LOST | - (nothing to keep)
  std::vector<std::string> leaks;
  bool leaks_checked = false;
  bool passed = false;
  double seconds = 0;
};

std::map<std::string, Outcome>& Matrix() {
  static std::map<std::string, Outcome> rows;
  return rows;
}

std::string FormatMatrix() {
  std::ostringstream out;
  auto row = [&](const std::string& point, const std::string& killed, const std::string& converged,
                 const std::string& formats, const std::string& data, const std::string& leaks,
                 const std::string& result, const std::string& time) {
    out << std::left << std::setw(48) << point << std::setw(8) << killed << std::setw(14) << converged << std::setw(9)
        << formats << std::setw(8) << data << std::setw(8) << result << std::setw(7) << time << leaks << "\n";
  };
  row("kill point", "killed", "converged", "formats", "data", "leaks", "result", "time");
  for (const auto& p : kKillPoints) {
    auto it = Matrix().find(p.name);
    if (it == Matrix().end()) continue;  // filtered out or skipped
    const Outcome& o = it->second;
    std::string leaks = !o.leaks_checked ? "not checked" : o.leaks.empty() ? "none" : "";
    for (size_t i = 0; i < o.leaks.size(); ++i) leaks += (i ? "; " : "") + o.leaks[i];
    std::ostringstream time;
    time << std::fixed << std::setprecision(1) << o.seconds << "s";
    row(p.name, o.killed, o.converged, o.formats, o.data, leaks, o.passed ? "PASS" : "FAIL", time.str());
  }
  return out.str();
}

// Prints the matrix once every case has run, and keeps it in the build dir.
class MatrixReport : public ::testing::Environment {
 public:
  void TearDown() override {
    if (Matrix().empty()) return;
    std::string table = FormatMatrix();
    std::cout << "\nKILL -9 MATRIX (issue #7)\n" << table << std::flush;
    const std::string matrix_path = testing::BuildDir() + "/fault-matrix.txt";
    std::ofstream(matrix_path) << table;
    std::cout << "(also in " << matrix_path << ")\n";
  }
};

[[maybe_unused]] ::testing::Environment* const kMatrixReport =
    ::testing::AddGlobalTestEnvironment(new MatrixReport);  // gtest owns it

// ---- what the machine holds ----

std::vector<std::string> ListNames(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

bool Under(const std::string& path, const std::string& dir) { return path == dir || path.rfind(dir + "/", 0) == 0; }

// The pool as its files say (the durable truth both processes share).
struct PoolView {
  std::map<std::string, VolumeRecord> volumes;      // by id
  std::map<std::string, SnapshotRecord> snapshots;  // by id
  std::set<std::string> images;                     // ids with an image file
  std::vector<std::string> problems;
};

PoolView ReadPool(const std::string& pool_dir) {
  PoolView view;
  for (const auto& name : ListNames(pool_dir + "/volumes")) {
    auto record = Pool::VolumeFromJson(testing::ReadFileOrEmpty(pool_dir + "/volumes/" + name));
    if (!record.ok()) {
      view.problems.push_back("unreadable record " + name);
      continue;
    }
    view.volumes[record->id] = *record;
  }
  for (const auto& name : ListNames(pool_dir + "/snapshots")) {
    auto record = Pool::SnapshotFromJson(testing::ReadFileOrEmpty(pool_dir + "/snapshots/" + name));
    if (!record.ok()) {
      view.problems.push_back("unreadable snapshot record " + name);
      continue;
    }
    view.snapshots[record->id] = *record;
  }
  for (const auto& name : ListNames(pool_dir + "/images")) {
    if (name.size() > 4 && name.ends_with(".img")) view.images.insert(name.substr(0, name.size() - 4));
  }
  for (const auto& name : ListNames(pool_dir + "/tmp")) view.problems.push_back("unfinished image tmp/" + name);
  for (const auto& id : view.images) {
    if (!view.volumes.count(id) && !view.snapshots.count(id)) {
      view.problems.push_back("image " + id + " without a volume or snapshot");
    }
  }
  for (const auto& [id, record] : view.volumes) {
    if (!view.images.count(id)) view.problems.push_back("volume " + id + " without an image");
  }
  for (const auto& [id, record] : view.snapshots) {
    if (!view.images.count(id)) view.problems.push_back("snapshot " + id + " without an image");
  }
  return view;
}

uint64_t FileSize(const std::string& path) {
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(path, ec);
  return ec ? 0 : size;
}

std::string ImagePath(const std::string& pool_dir, const std::string& id) {
  return pool_dir + "/images/" + id + ".img";
}

std::string Join(const std::set<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ",") + i;
  return "{" + out + "}";
}

bool WritePattern(const std::string& image) {
  int fd = ::open(image.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string data(kPrecious);
  bool ok =
      ::pwrite(fd, data.data(), data.size(), kPatternOffset) == static_cast<ssize_t>(data.size()) && ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

bool PatternIntact(const std::string& image) {
  int fd = ::open(image.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string data(sizeof(kPrecious) - 1, '\0');
  bool ok = ::pread(fd, data.data(), data.size(), kPatternOffset) == static_cast<ssize_t>(data.size());
  ::close(fd);
  return ok && data == kPrecious;
}

bool WaitForTcp(int port, testing::ChildProcess& process, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline && process.running()) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    if (up) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

// ---- the cases ----

class KillMatrixTest : public ::testing::TestWithParam<KillPoint> {
 protected:
  static void SetUpTestSuite() {
    if (!testing::IsRoot()) return;
    tgtd_ = testing::TgtdHarness::Start(&tgtd_error_);
  }
  static void TearDownTestSuite() { tgtd_.reset(); }

  void SetUp() override {
    if (!testing::IsRoot()) GTEST_SKIP() << "needs root: tgtd, FUSE, loop devices and mount";
    if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "needs /dev/fuse";
    BLOCKCSI_REQUIRE_TGTD(tgtd_, tgtd_error_);
    start_ = std::chrono::steady_clock::now();
    RemoveAllTargets();  // what a failed case before this one may have left
    plugin_ = std::make_unique<testing::PluginUnderTest>(dir_.Join("plugin"), tgtd_.get());
    baseline_ = testing::TakeLeakSnapshot(LeakScope());
  }

  void TearDown() override {
    if (!plugin_) return;  // skipped
    plugin_->Stop();
    StopAgent();
    testing::CleanUpUnder(dir_.path());
    RemoveAllTargets();
    outcome_.passed = !HasFailure();
    outcome_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    Matrix()[GetParam().name] = outcome_;
  }

  // ---- processes ----

  bool agent_side() const { return GetParam().side == Side::kAgent; }
  std::string AgentPool() const { return dir_.Join("agent-pool"); }
  std::string PoolDir() const { return agent_side() ? AgentPool() : plugin_->pool_dir(); }

  ::testing::AssertionResult StartPlugin(const std::string& fault_point) {
    testing::PluginOptions options;
    options.node_id = kNodeId;
    options.fault_point = fault_point;
    if (agent_side()) {
      options.backend = "remote";
      options.extra_args = {"--target-agent", "127.0.0.1:" + std::to_string(agent_port_), "--insecure"};
    }
    std::string error;
    if (!plugin_->Start(options, &error)) return ::testing::AssertionFailure() << "plugin start: " << error;
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult StartAgent(const std::string& fault_point) {
    if (agent_port_ == 0) agent_port_ = agent_reserved_port_.port();  // held: no other test is handed it
    std::vector<std::string> argv = {testing::BinDir() + "/blockcsi-target",
                                     "--pool",
                                     AgentPool(),
                                     "--listen",
                                     "127.0.0.1:" + std::to_string(agent_port_),
                                     "--insecure",
                                     "--tgt-control-port",
                                     std::to_string(tgtd_->control_port()),
                                     "--portal",
                                     tgtd_->portal()};
    // Only this start sees the variable: the plugin and the next start do not.
    if (!fault_point.empty()) ::setenv("BLOCKCSI_FAULT_POINT", fault_point.c_str(), 1);
    agent_ = std::make_unique<testing::ChildProcess>(argv, dir_.Join("agent.log"));
    ::unsetenv("BLOCKCSI_FAULT_POINT");
    if (!WaitForTcp(agent_port_, *agent_, 20s)) {
      return ::testing::AssertionFailure() << "agent did not listen:\n" << AgentLog();
    }
    return ::testing::AssertionSuccess();
  }

  void StopAgent() {
    if (!agent_) return;
    agent_->Signal(SIGTERM);
    if (agent_->Wait(15s) < 0) agent_->Signal(SIGKILL);
    agent_.reset();
  }

  std::string AgentLog() const {
    std::string log = testing::ReadFileOrEmpty(dir_.Join("agent.log"));
    return log.size() > 3000 ? "...\n" + log.substr(log.size() - 3000) : log;
  }

  std::string Logs() const { return plugin_->LogTail() + (agent_side() ? "\nagent log:\n" + AgentLog() : ""); }
  std::string GrpcLogTail() const { return Logs(); }

  // Whether the armed process died by its own SIGKILL.
  bool ArmedProcessDied() {
    if (GetParam().side != Side::kAgent) return plugin_->WaitKilledByFaultPoint(30s);
    int code = agent_->Wait(30s);
    if (code < 0) return false;
    agent_.reset();
    return code == 128 + SIGKILL;
  }

  ::testing::AssertionResult RestartUnarmed() {
    return GetParam().side == Side::kAgent ? StartAgent("") : StartPlugin("");
  }

  // ---- CSI calls ----

  std::string Fs() const { return GetParam().fs; }
  int64_t VolumeBytes() const { return Fs() == "xfs" ? kXfsVolumeBytes : kVolumeBytes; }
  int64_t GrownBytes() const { return Fs() == "xfs" ? kXfsGrownBytes : kGrownBytes; }

  grpc::Status CreateVolume(const std::string& name, std::string* id) {
    csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(VolumeBytes());
    *req.add_volume_capabilities() = testing::MountCapability(Fs());
    if (GetParam().chap) (*req.mutable_parameters())["chap"] = "true";
    csi::v1::CreateVolumeResponse resp;
    grpc::Status st = plugin_->controller().CreateVolume(testing::Deadline(60s).get(), req, &resp);
    if (st.ok()) {
      *id = resp.volume().volume_id();
      volume_context_ = {resp.volume().volume_context().begin(), resp.volume().volume_context().end()};
    }
    return st;
  }

  grpc::Status ControllerPublish(const std::string& id) {
    csi::v1::ControllerPublishVolumeRequest req;
    req.set_volume_id(id);
    req.set_node_id(kNodeId);
    *req.mutable_volume_capability() = testing::MountCapability(Fs());
    if (GetParam().chap) {
      (*req.mutable_secrets())["chap-username"] = kChapUser;
      (*req.mutable_secrets())["chap-password"] = kChapPassword;
    }
    for (const auto& [k, v] : volume_context_) (*req.mutable_volume_context())[k] = v;
    csi::v1::ControllerPublishVolumeResponse resp;
    grpc::Status st = plugin_->controller().ControllerPublishVolume(testing::Deadline(60s).get(), req, &resp);
    if (st.ok()) publish_context_ = {resp.publish_context().begin(), resp.publish_context().end()};
    return st;
  }

  grpc::Status ControllerUnpublish(const std::string& id) {
    csi::v1::ControllerUnpublishVolumeRequest req;
    req.set_volume_id(id);
    req.set_node_id(kNodeId);
    csi::v1::ControllerUnpublishVolumeResponse resp;
    return plugin_->controller().ControllerUnpublishVolume(testing::Deadline(60s).get(), req, &resp);
  }

  grpc::Status DeleteVolume(const std::string& id) {
    csi::v1::DeleteVolumeRequest req;
    req.set_volume_id(id);
    csi::v1::DeleteVolumeResponse resp;
    return plugin_->controller().DeleteVolume(testing::Deadline(60s).get(), req, &resp);
  }

  // An answer of less than was asked for is a failure too.
  grpc::Status ControllerExpand(const std::string& id, int64_t bytes) {
    const csi::v1::VolumeCapability cap = testing::MountCapability(Fs());
    csi::v1::ControllerExpandVolumeResponse resp;
    grpc::Status st = plugin_->controller().ControllerExpandVolume(testing::Deadline(60s).get(),
                                                                   testing::ExpandRequest(id, bytes, &cap), &resp);
    if (st.ok() && resp.capacity_bytes() < bytes) {
      return {grpc::StatusCode::INTERNAL, "expanded to " + std::to_string(resp.capacity_bytes()) + " bytes only"};
    }
    return st;
  }

  grpc::Status CreateSnapshot(const std::string& name, const std::string& source_id, std::string* snapshot_id) {
    csi::v1::CreateSnapshotRequest req;
    req.set_name(name);
    req.set_source_volume_id(source_id);
    csi::v1::CreateSnapshotResponse resp;
    grpc::Status st = plugin_->controller().CreateSnapshot(testing::Deadline(60s).get(), req, &resp);
    if (st.ok()) *snapshot_id = resp.snapshot().snapshot_id();
    return st;
  }

  grpc::Status DeleteSnapshot(const std::string& snapshot_id) {
    csi::v1::DeleteSnapshotRequest req;
    req.set_snapshot_id(snapshot_id);
    csi::v1::DeleteSnapshotResponse resp;
    return plugin_->controller().DeleteSnapshot(testing::Deadline(60s).get(), req, &resp);
  }

  std::string Staging(const std::string& id) const { return plugin_->staging_path(id); }
  std::string Target(const std::string& id) const { return plugin_->target_path(id); }

  grpc::Status Stage(const std::string& id) {
    csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id(id);
    req.set_staging_target_path(Staging(id));
    *req.mutable_volume_capability() = testing::MountCapability(Fs());
    for (const auto& [k, v] : publish_context_) (*req.mutable_publish_context())[k] = v;
    for (const auto& [k, v] : volume_context_) (*req.mutable_volume_context())[k] = v;
    if (GetParam().chap) {
      (*req.mutable_secrets())["chap-username"] = kChapUser;
      (*req.mutable_secrets())["chap-password"] = kChapPassword;
    }
    std::filesystem::create_directories(Staging(id));
    csi::v1::NodeStageVolumeResponse resp;
    return plugin_->node().NodeStageVolume(testing::Deadline(60s).get(), req, &resp);
  }

  grpc::Status Unstage(const std::string& id) {
    csi::v1::NodeUnstageVolumeRequest req;
    req.set_volume_id(id);
    req.set_staging_target_path(Staging(id));
    csi::v1::NodeUnstageVolumeResponse resp;
    return plugin_->node().NodeUnstageVolume(testing::Deadline(60s).get(), req, &resp);
  }

  grpc::Status NodePublish(const std::string& id) {
    csi::v1::NodePublishVolumeRequest req;
    req.set_volume_id(id);
    req.set_staging_target_path(Staging(id));
    req.set_target_path(Target(id));
    *req.mutable_volume_capability() = testing::MountCapability(Fs());
    for (const auto& [k, v] : publish_context_) (*req.mutable_publish_context())[k] = v;
    csi::v1::NodePublishVolumeResponse resp;
    return plugin_->node().NodePublishVolume(testing::Deadline(60s).get(), req, &resp);
  }

  // NodeExpandVolume of the published target to GrownBytes(); `capacity`
  // is what the plugin answered.
  grpc::Status NodeExpand(const std::string& id, int64_t* capacity) {
    csi::v1::NodeExpandVolumeRequest req;
    req.set_volume_id(id);
    req.set_volume_path(Target(id));
    req.set_staging_target_path(Staging(id));
    req.mutable_capacity_range()->set_required_bytes(GrownBytes());
    *req.mutable_volume_capability() = testing::MountCapability(Fs());
    csi::v1::NodeExpandVolumeResponse resp;
    grpc::Status st = plugin_->node().NodeExpandVolume(testing::Deadline(60s).get(), req, &resp);
    if (st.ok()) *capacity = resp.capacity_bytes();
    return st;
  }

  grpc::Status NodeUnpublish(const std::string& id) {
    csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id(id);
    req.set_target_path(Target(id));
    csi::v1::NodeUnpublishVolumeResponse resp;
    return plugin_->node().NodeUnpublishVolume(testing::Deadline(60s).get(), req, &resp);
  }

  // Retries a call the way the sidecars and kubelet do after a failure:
  // the same request again, with exponential backoff, whatever the code.
  // Records the outcome in the matrix.
  template <typename Call>
  grpc::Status RetryUntilOk(Call call) {
    auto delay = 100ms;
    grpc::Status st;
    int attempt = 0;
    for (attempt = 1; attempt <= 12; ++attempt) {
      st = call();
      if (st.ok()) break;
      std::this_thread::sleep_for(delay);
      delay = std::min<std::chrono::milliseconds>(delay * 2, 2s);
    }
    outcome_.converged = st.ok() ? "ok, " + std::to_string(attempt) + (attempt == 1 ? " try" : " tries")
                                 : "NO: code " + std::to_string(static_cast<int>(st.error_code()));
    return st;
  }

  // ---- checks ----

  void RemoveAllTargets() {
    auto targets = ParseTgtadmTargets(tgtd_->ShowTargets());
    if (!targets.ok()) return;
    for (const auto& t : *targets) {
      tgtd_->Tgtadm({"--op", "delete", "--mode", "target", "--tid", std::to_string(t.tid), "--force"});
    }
    auto accounts = ParseTgtadmAccounts(tgtd_->Tgtadm({"--op", "show", "--mode", "account"}));
    if (!accounts.ok()) return;
    for (const auto& a : *accounts) tgtd_->Tgtadm({"--op", "delete", "--mode", "account", "--user", a});
  }

  // tgtd's configuration against what the pool's volumes and grants need:
  // one target per volume, LUN 1 on the volume's image, ACL = its grants,
  // the CHAP account bound exactly where a grant asks for CHAP and present
  // only while one does; plus the pool's own orphans.
  // `sessions_allowed`: initiators that may be logged in now.
  std::vector<std::string> ExportProblems(const std::set<std::string>& sessions_allowed = {}) {
    PoolView pool = ReadPool(PoolDir());
    std::vector<std::string> problems = pool.problems;
    auto targets = ParseTgtadmTargets(tgtd_->ShowTargets());
    if (!targets.ok()) return {"tgtadm show: " + targets.status().ToString()};
    std::set<std::string> exported;
    bool chap_in_use = false;
    for (const auto& t : *targets) {
      auto v = std::find_if(pool.volumes.begin(), pool.volumes.end(),
                            [&](const auto& kv) { return kv.second.target_iqn == t.iqn; });
      if (v == pool.volumes.end()) {
        problems.push_back("target " + t.iqn + " without a volume");
        continue;
      }
      const VolumeRecord& record = v->second;
      exported.insert(record.id);
      int disks = 0;
      for (const auto& lun : t.luns) {
        if (lun.type == "controller") continue;
        ++disks;
        if (lun.lun != 1 || lun.backing_path != ImagePath(PoolDir(), record.id)) {
          problems.push_back("LUN " + std::to_string(lun.lun) + " of " + record.id + " on " + lun.backing_path);
        }
        if (lun.size_mb != TgtadmShownMegabytes(record.size_bytes)) {
          problems.push_back("LUN of " + record.id + " is " + std::to_string(lun.size_mb) + " MB, its record " +
                             std::to_string(record.size_bytes) + " bytes");
        }
      }
      if (disks != 1) problems.push_back(std::to_string(disks) + " disk LUNs on " + record.id);
      std::set<std::string> want;
      for (const auto& g : record.grants) want.insert(g.initiator_iqn);
      std::set<std::string> have(t.acls.begin(), t.acls.end());
      if (have != want) problems.push_back("ACL of " + record.id + " is " + Join(have) + ", grants " + Join(want));
      for (const auto& s : t.sessions) {
        if (!sessions_allowed.count(s.initiator)) problems.push_back("session of " + s.initiator + " on " + record.id);
      }
      bool chap = std::any_of(record.grants.begin(), record.grants.end(), [](const auto& g) { return g.chap; });
      std::set<std::string> bound(t.incoming_accounts.begin(), t.incoming_accounts.end());
      bound.insert(t.outgoing_accounts.begin(), t.outgoing_accounts.end());
      if (bound != (chap ? std::set<std::string>{kChapUser} : std::set<std::string>{})) {
        problems.push_back("CHAP accounts bound to " + record.id + ": " + Join(bound));
      }
      chap_in_use = chap_in_use || chap;
    }
    for (const auto& [id, record] : pool.volumes) {
      if (!exported.count(id)) problems.push_back("volume " + id + " not exported");
    }
    auto accounts = ParseTgtadmAccounts(tgtd_->Tgtadm({"--op", "show", "--mode", "account"}));
    if (accounts.ok()) {
      for (const auto& a : *accounts) {
        if (!(chap_in_use && a == kChapUser)) problems.push_back("CHAP account " + a + " (with its secret) in tgtd");
      }
    }
    return problems;
  }

  std::vector<pid_t> BridgePids() {
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      std::string name = entry.path().filename();
      if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
      std::istringstream args(testing::ReadFileOrEmpty(entry.path() / "cmdline"));
      std::string arg;
      bool bridge = false, ours = false;
      while (std::getline(args, arg, '\0')) {
        bridge = bridge || arg == "bridge" || arg.ends_with("/blockcsi-bridge");
        ours = ours || arg.find(dir_.path() + "/") != std::string::npos;
      }
      if (bridge && ours) out.push_back(static_cast<pid_t>(std::stol(name)));
    }
    return out;
  }

  std::vector<std::string> LoopsUnderDir() {
    std::vector<std::string> out;
    auto r = MakeProcessExecutor()->Run(Command("losetup").Arg("-l").Arg("-n").Arg("-O").Arg("NAME,BACK-FILE"));
    if (!r.ok()) return {"losetup failed"};
    std::istringstream lines(r->stdout_text);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string name, file;
      if (fields >> name >> file && Under(file, dir_.path())) out.push_back(name + " on " + file);
    }
    return out;
  }

  std::vector<MountEntry> MountsUnderDir() {
    std::vector<MountEntry> out;
    for (const auto& e : ParseMountInfo(testing::ReadFileOrEmpty("/proc/self/mountinfo"))) {
      if (Under(e.target, dir_.path())) out.push_back(e);
    }
    return out;
  }

  // The node side of one staged volume: exactly one bridge, one loop
  // device, one FUSE mount, one staging mount and one session (a second of
  // any of them is what the killed attempt left behind).
  std::vector<std::string> StagedProblems(const std::string& id) {
    std::vector<std::string> problems;
    size_t bridges = BridgePids().size();
    if (bridges != 1) problems.push_back(std::to_string(bridges) + " bridges while staged");
    auto loops = LoopsUnderDir();
    if (loops.size() != 1) problems.push_back(std::to_string(loops.size()) + " loop devices while staged");
    int fuse = 0, staging = 0;
    for (const auto& m : MountsUnderDir()) {
      if (m.fs_type.rfind("fuse", 0) == 0) {
        ++fuse;
      } else if (m.target == Staging(id)) {
        ++staging;
      } else {
        problems.push_back("mount " + m.target + " (" + m.fs_type + ") while staged");
      }
    }
    if (fuse != 1) problems.push_back(std::to_string(fuse) + " FUSE mounts while staged");
    if (staging != 1) problems.push_back(std::to_string(staging) + " staging mounts");
    auto more = ExportProblems({InitiatorIqnForNode(kNodeId)});
    problems.insert(problems.end(), more.begin(), more.end());
    auto targets = ParseTgtadmTargets(tgtd_->ShowTargets());
    size_t sessions = 0;
    if (targets.ok()) {
      for (const auto& t : *targets) sessions += t.sessions.size();
    }
    if (sessions != 1) problems.push_back(std::to_string(sessions) + " iSCSI sessions while staged");
    return problems;
  }

  // After the whole teardown: nothing of ours anywhere. The shared leak
  // checker (test/support/leak_check.h) against the machine as this case
  // found it — processes, mounts, loop devices, records, pool files, tgtd's
  // targets/LUNs/ACLs/sessions and its CHAP accounts, bound or not ("tgtd
  // user <name>": an account keeps its secret in tgtd) — plus the pool's
  // own consistency.
  std::vector<std::string> EverythingGone() {
    std::vector<std::string> problems;
    PoolView pool = ReadPool(PoolDir());
    problems.insert(problems.end(), pool.problems.begin(), pool.problems.end());
    testing::LeakScope scope = LeakScope();
    for (const auto& item : testing::NewItemsAfterSettling(baseline_, scope)) problems.push_back(item);
    return problems;
  }

  testing::LeakScope LeakScope() const {
    testing::LeakScope scope;
    scope.dir = dir_.path();
    scope.state_dir = plugin_->state_dir();
    scope.pool_dir = PoolDir();
    scope.tgtd = tgtd_.get();
    if (plugin_->running()) scope.ignore_pids.push_back(plugin_->pid());
    if (agent_ && agent_->running()) scope.ignore_pids.push_back(agent_->pid());
    return scope;
  }

  void NoteLeaks(const std::vector<std::string>& problems) {
    outcome_.leaks_checked = true;
    for (const auto& p : problems) {  // the same leak seen by two checks is one row entry
      if (std::find(outcome_.leaks.begin(), outcome_.leaks.end(), p) == outcome_.leaks.end()) {
        outcome_.leaks.push_back(p);
      }
    }
    for (const auto& p : problems) ADD_FAILURE() << "leak: " << p;
  }

  // mkfs runs for `id` in the plugin's log (it is appended across restarts).
  int FormatsLogged(const std::string& id) {
    std::istringstream log(testing::ReadFileOrEmpty(plugin_->log_path()));
    std::string line;
    int n = 0;
    while (std::getline(log, line)) {
      n += line.find("formatting") != std::string::npos && line.find("volume_id=" + id) != std::string::npos;
    }
    return n;
  }

  // The filesystem UUID on the pool's image: a reformat changes it.
  std::string FsUuid(const std::string& id) {
    auto probe = MakeBlkidProbe()->Probe(ImagePath(PoolDir(), id));
    if (!probe.ok() || probe->signatures.empty()) return "";
    return probe->signatures.front().uuid;
  }

  void RunControllerCase();
  void RunNodeCase();
  void RunNodeExpandCase();

  static inline std::unique_ptr<testing::TgtdHarness> tgtd_;
  static inline std::string tgtd_error_;

  testing::TempDir dir_;
  std::unique_ptr<testing::PluginUnderTest> plugin_;
  std::unique_ptr<testing::ChildProcess> agent_;
  // What the machine held when the case began (nothing of this case's).
  testing::LeakSnapshot baseline_;
  testing::ReservedPort agent_reserved_port_{testing::ReservedPort::Use::kForServer};
  int agent_port_ = 0;
  std::map<std::string, std::string> volume_context_;
  std::map<std::string, std::string> publish_context_;
  Outcome outcome_;
  std::chrono::steady_clock::time_point start_;
};

// Controller and agent points: one armed start, the operation dies with
// the process, one unarmed restart, the same request retried.
void KillMatrixTest::RunControllerCase() {
  const KillPoint& p = GetParam();
  const std::string op = p.op;
  const std::string name = std::string("fault-") + p.name;
  if (p.side == Side::kAgent) {
    ASSERT_TRUE(StartAgent(p.armed));
    ASSERT_TRUE(StartPlugin(""));
  } else {
    ASSERT_TRUE(StartPlugin(p.armed));
  }

  // Up to the armed operation, normally.
  std::string id, snapshot_id;
  const std::string snapshot_name = name + "-snap";
  const bool keeps_data = op != "create" && op != "delete";  // the volume outlives the armed call
  if (op != "create") {
    ASSERT_GRPC_OK(CreateVolume(name, &id));
    if (op == "unpublish") {
      ASSERT_GRPC_OK(ControllerPublish(id));
    }
    // Stands for what a node wrote: it must outlive the crash and the retry
    // (and be in a snapshot's copy).
    if (keeps_data) {
      ASSERT_TRUE(WritePattern(ImagePath(PoolDir(), id)));
    }
    if (op == "delete-snapshot") {
      ASSERT_GRPC_OK(CreateSnapshot(snapshot_name, id, &snapshot_id));
    }
  }
  auto armed_call = [&]() -> grpc::Status {
    if (op == "create") return CreateVolume(name, &id);
    if (op == "publish") return ControllerPublish(id);
    if (op == "unpublish") return ControllerUnpublish(id);
    if (op == "expand") return ControllerExpand(id, kGrownBytes);
    if (op == "snapshot") return CreateSnapshot(snapshot_name, id, &snapshot_id);
    if (op == "delete-snapshot") return DeleteSnapshot(snapshot_id);
    return DeleteVolume(id);
  };
  grpc::Status killed_call = armed_call();
  bool died = ArmedProcessDied();
  outcome_.killed = died ? "yes" : "NO";
  ASSERT_TRUE(died) << p.armed << " was not reached (the call returned " << killed_call.error_code() << ")\n" << Logs();
  EXPECT_FALSE(killed_call.ok()) << "the call cannot have succeeded: its process died in it";

  // What the crash left on disk: a create's volume must be the one the retry returns.
  PoolView after_kill = ReadPool(PoolDir());
  std::string committed_id = after_kill.volumes.empty() ? "" : after_kill.volumes.begin()->first;
  if (op == "create" && !committed_id.empty()) {
    ASSERT_TRUE(WritePattern(ImagePath(PoolDir(), committed_id)));
  }
  // The crash left the state between the steps that the point names: the
  // case is about that state, so check it is the one the restart finds.
  if (op == "expand") {
    EXPECT_EQ(FileSize(ImagePath(PoolDir(), id)), static_cast<uint64_t>(kGrownBytes))
        << "the image was not grown before the kill";
    EXPECT_EQ(after_kill.volumes[id].size_bytes, static_cast<uint64_t>(kVolumeBytes))
        << "the record was written before the kill";
  }
  if (op == "snapshot") {
    EXPECT_TRUE(after_kill.snapshots.empty()) << "a snapshot record before its image was placed";
  }
  if (op == "delete-snapshot") {
    EXPECT_TRUE(after_kill.snapshots.empty()) << "the snapshot's record outlived the kill";
    EXPECT_TRUE(after_kill.images.count(snapshot_id)) << "the snapshot's image went before the kill";
  }

  ASSERT_TRUE(RestartUnarmed());
  grpc::Status retried = RetryUntilOk(armed_call);
  ASSERT_TRUE(testing::GrpcOk(retried, Logs())) << "retry of " << op << " after the kill at " << p.name;

  if (op == "create") {
    EXPECT_LE(after_kill.volumes.size(), 1u);
    if (!committed_id.empty()) {
      EXPECT_EQ(id, committed_id) << "the retry made a second volume instead of returning the committed one";
      outcome_.data = PatternIntact(ImagePath(PoolDir(), id)) ? "intact" : "LOST";
      EXPECT_EQ(outcome_.data, "intact") << "the retry rebuilt the image of " << id;
    }
    std::string again;
    ASSERT_GRPC_OK(CreateVolume(name, &again));
    EXPECT_EQ(again, id) << "CreateVolume is not idempotent after the crash";
    EXPECT_EQ(ReadPool(PoolDir()).volumes.size(), 1u);
  }
  if (op == "publish") {
    EXPECT_FALSE(publish_context_.empty());
    auto record = ReadPool(PoolDir()).volumes[id];
    ASSERT_EQ(record.grants.size(), 1u);
    EXPECT_EQ(record.grants[0].initiator_iqn, InitiatorIqnForNode(kNodeId));
  }
  if (op == "unpublish") {
    EXPECT_TRUE(ReadPool(PoolDir()).volumes[id].grants.empty());
  }
  if (op == "expand") {
    PoolView pool = ReadPool(PoolDir());
    EXPECT_EQ(pool.volumes[id].size_bytes, static_cast<uint64_t>(kGrownBytes));
    EXPECT_EQ(FileSize(ImagePath(PoolDir(), id)), static_cast<uint64_t>(kGrownBytes));
  }
  if (op == "snapshot") {
    PoolView pool = ReadPool(PoolDir());
    ASSERT_EQ(pool.snapshots.size(), 1u) << "the retry made a second snapshot or none";
    EXPECT_EQ(pool.snapshots.begin()->first, snapshot_id);
    EXPECT_TRUE(PatternIntact(ImagePath(PoolDir(), snapshot_id))) << "the snapshot lacks what the volume held";
    std::string again;
    ASSERT_GRPC_OK(CreateSnapshot(snapshot_name, id, &again));
    EXPECT_EQ(again, snapshot_id) << "CreateSnapshot is not idempotent after the crash";
  }
  if (op == "delete-snapshot") {
    PoolView pool = ReadPool(PoolDir());
    EXPECT_TRUE(pool.snapshots.empty());
    EXPECT_FALSE(pool.images.count(snapshot_id)) << "the deleted snapshot's image is still in the pool";
    ASSERT_GRPC_OK(DeleteSnapshot(snapshot_id));  // idempotent, also after the crash
  }
  if (keeps_data) {
    outcome_.data = PatternIntact(ImagePath(PoolDir(), id)) ? "intact" : "LOST";
    EXPECT_EQ(outcome_.data, "intact");
  }
  // The converged state, exactly: tgtd holds what the pool needs, no more.
  NoteLeaks(ExportProblems());

  // The rest of the volume's life, then nothing may be left.
  if (op == "create" || op == "publish") {
    if (op == "publish") {
      ASSERT_GRPC_OK(ControllerUnpublish(id));
    }
    ASSERT_GRPC_OK(DeleteVolume(id));
  } else if (op == "snapshot") {
    ASSERT_GRPC_OK(DeleteSnapshot(snapshot_id));
    ASSERT_GRPC_OK(DeleteVolume(id));
  } else if (op != "delete") {
    ASSERT_GRPC_OK(DeleteVolume(id));
  }
  ASSERT_GRPC_OK(DeleteVolume(id));  // idempotent, also after the crash
  NoteLeaks(EverythingGone());
}

// Node points: NodeStage (or NodeUnstage) dies with the plugin, the plugin
// restarts, kubelet's retry converges without a second mkfs and with the
// data written before the kill.
void KillMatrixTest::RunNodeCase() {
  const KillPoint& p = GetParam();
  const std::string op = p.op;
  ASSERT_TRUE(StartPlugin(p.armed));  // the controller calls below reach no node point
  std::string id;
  ASSERT_GRPC_OK(CreateVolume(std::string("fault-") + p.name, &id));
  ASSERT_GRPC_OK(ControllerPublish(id));
  const std::string file = "/precious";
  auto write_data = [&] {
    ASSERT_GRPC_OK(NodePublish(id));
    int fd = ::open((Target(id) + file).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    std::string data(kPrecious);
    ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
    ASSERT_GRPC_OK(NodeUnpublish(id));
  };
  auto kill_here = [&](auto call) {
    grpc::Status st = call();
    bool died = ArmedProcessDied();
    outcome_.killed = died ? "yes" : "NO";
    ASSERT_TRUE(died) << p.armed << " was not reached (the call returned " << st.error_code() << ")\n" << Logs();
  };

  std::string uuid;
  if (op == "stage") {
    // 1. The first stage of a blank volume dies; the retry formats at most once.
    ASSERT_NO_FATAL_FAILURE(kill_here([&] { return Stage(id); }));
    std::string uuid_after_kill = FsUuid(id);
    ASSERT_TRUE(StartPlugin(""));
    ASSERT_TRUE(testing::GrpcOk(RetryUntilOk([&] { return Stage(id); }), Logs()));
    uuid = FsUuid(id);
    ASSERT_FALSE(uuid.empty());
    if (!uuid_after_kill.empty()) {
      EXPECT_EQ(uuid, uuid_after_kill) << "formatted again after the kill";
    }
    NoteLeaks(StagedProblems(id));
    ASSERT_NO_FATAL_FAILURE(write_data());
    ASSERT_GRPC_OK(Unstage(id));
    // 2. A later stage of the same volume, now holding data, dies at the
    //    same point (after-mkfs is not on that path: nothing is formatted).
    ASSERT_TRUE(StartPlugin(p.armed));
    grpc::Status st = Stage(id);
    if (std::string(p.armed) == "node.stage.after-mkfs") {
      ASSERT_TRUE(testing::GrpcOk(st, Logs())) << "re-stage of a formatted volume";
    } else {
      bool died = ArmedProcessDied();
      EXPECT_TRUE(died) << "second kill at " << p.armed;
      ASSERT_TRUE(StartPlugin(""));
      ASSERT_TRUE(testing::GrpcOk(RetryUntilOk([&] { return Stage(id); }), Logs()));
    }
  } else {
    ASSERT_GRPC_OK(Stage(id));
    uuid = FsUuid(id);
    ASSERT_NO_FATAL_FAILURE(write_data());
    ASSERT_NO_FATAL_FAILURE(kill_here([&] { return Unstage(id); }));
    ASSERT_TRUE(StartPlugin(""));
    ASSERT_TRUE(testing::GrpcOk(RetryUntilOk([&] { return Unstage(id); }), Logs()));
    NoteLeaks(ExportProblems());  // the session is gone with the unstage
    if (!BridgePids().empty() || !LoopsUnderDir().empty()) NoteLeaks({"bridge or loop device after the unstage"});
    ASSERT_GRPC_OK(Stage(id));
  }
  // Staged again after everything: the data is there, the filesystem is the
  // one mkfs made the first time, and mkfs ran once in the whole log.
  outcome_.data = testing::ReadFileOrEmpty(Staging(id) + file) == kPrecious ? "intact" : "LOST";
  EXPECT_EQ(outcome_.data, "intact");
  EXPECT_EQ(FsUuid(id), uuid) << "the filesystem was made again";
  int formats = FormatsLogged(id);
  outcome_.formats = std::to_string(formats);
  EXPECT_EQ(formats, 1) << "mkfs runs of " << id << " in the plugin's log";
  NoteLeaks(StagedProblems(id));

  ASSERT_GRPC_OK(Unstage(id));
  ASSERT_GRPC_OK(ControllerUnpublish(id));
  ASSERT_GRPC_OK(DeleteVolume(id));
  NoteLeaks(EverythingGone());
}

// NodeExpandVolume of a published xfs volume the controller has grown: the
// plugin dies after the rescan, before the filesystem grew; restarted, the
// retried expand grows it (the bridge and the mounts outlived the plugin),
// nothing is formatted, the data stays.
void KillMatrixTest::RunNodeExpandCase() {
  const KillPoint& p = GetParam();
  ASSERT_TRUE(StartPlugin(p.armed));  // no controller call, stage or publish reaches it
  std::string id;
  ASSERT_GRPC_OK(CreateVolume(std::string("fault-") + p.name, &id));
  ASSERT_GRPC_OK(ControllerPublish(id));
  ASSERT_GRPC_OK(Stage(id));
  const std::string uuid = FsUuid(id);
  ASSERT_FALSE(uuid.empty());
  ASSERT_GRPC_OK(NodePublish(id));
  const std::string file = Target(id) + "/precious";
  {
    int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    std::string data(kPrecious);
    ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  ASSERT_GRPC_OK(ControllerExpand(id, GrownBytes()));

  int64_t capacity = 0;
  grpc::Status st = NodeExpand(id, &capacity);
  bool died = ArmedProcessDied();
  outcome_.killed = died ? "yes" : "NO";
  ASSERT_TRUE(died) << p.armed << " was not reached (the call returned " << st.error_code() << ")\n" << Logs();
  ASSERT_TRUE(StartPlugin(""));
  ASSERT_TRUE(testing::GrpcOk(RetryUntilOk([&] { return NodeExpand(id, &capacity); }), Logs()));
  EXPECT_GE(capacity, GrownBytes());
  // The filesystem itself grew (more than half-way from the old size to the new).
  struct statvfs fs {};
  ASSERT_EQ(::statvfs(Target(id).c_str(), &fs), 0);
  const uint64_t fs_bytes = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
  EXPECT_GT(fs_bytes, static_cast<uint64_t>(VolumeBytes() + GrownBytes()) / 2)
      << "the filesystem was not grown after the restart";

  outcome_.data = testing::ReadFileOrEmpty(file) == kPrecious ? "intact" : "LOST";
  EXPECT_EQ(outcome_.data, "intact");
  EXPECT_EQ(FsUuid(id), uuid) << "the filesystem was made again";
  int formats = FormatsLogged(id);
  outcome_.formats = std::to_string(formats);
  EXPECT_EQ(formats, 1) << "mkfs runs of " << id << " in the plugin's log";
  ASSERT_GRPC_OK(NodeUnpublish(id));
  NoteLeaks(StagedProblems(id));

  ASSERT_GRPC_OK(Unstage(id));
  ASSERT_GRPC_OK(ControllerUnpublish(id));
  ASSERT_GRPC_OK(DeleteVolume(id));
  NoteLeaks(EverythingGone());
}

TEST_P(KillMatrixTest, ConvergesWithoutLeaks) {
  if (GetParam().side == Side::kNode) {
    if (std::string(GetParam().op) == "expand") {
      RunNodeExpandCase();
    } else {
      RunNodeCase();
    }
  } else {
    RunControllerCase();
  }
}

INSTANTIATE_TEST_SUITE_P(KillPoints, KillMatrixTest, ::testing::ValuesIn(kKillPoints),
                         [](const ::testing::TestParamInfo<KillPoint>& info) {
                           std::string name = info.param.name;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace blockcsi
