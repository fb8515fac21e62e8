// Conformance of our own for the Node service: the real `blockcsi --mode all
// --backend local --connector userspace` on a real tgtd (libiscsi bridge →
// FUSE file → loop device), driven as the kubelet would over the CSI socket,
// one test per rule of the CSI spec for the Node RPCs we implement: required
// fields, stage/publish ordering, idempotency and ALREADY_EXISTS for an
// incompatible repeat, NOT_FOUND for stats, expansion, attach limits,
// ABORTED for a concurrent call, read-only publishes, snapshot and clone
// contents. One tgtd and one plugin serve a whole test suite (the tests
// clean up their volumes), so a suite costs one start and one stop.
// Needs root, tgt and FUSE; skips with the reason otherwise.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "csi.grpc.pb.h"
#include "support/csi_requests.h"
#include "support/leak_check.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;
using Code = grpc::StatusCode;
using Rpc = csi::v1::NodeServiceCapability::RPC;
using testing::BlockCapability;
using testing::CapabilityFor;
using testing::Deadline;
using testing::MountCapability;

constexpr int64_t kMiB = 1 << 20;
constexpr char kNodeId[] = "conf-node";
constexpr int kMaxVolumesPerNode = 3;

// xfsprogs 5.19+ refuses filesystems under 300 MiB; the images are sparse,
// so the size costs nothing.
int64_t SmallSize(const std::string& fs) { return fs == "xfs" ? 320 * kMiB : 64 * kMiB; }

bool HasCapSysResource() {
  constexpr int kCapSysResource = 24;
  std::istringstream status(testing::ReadFileOrEmpty("/proc/self/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> kCapSysResource) & 1U;
  }
  return false;
}

std::string Describe(const grpc::Status& st) {
  return "code " + std::to_string(static_cast<int>(st.error_code())) + ": " + st.error_message();
}

struct Volume {
  std::string id;
  std::string fs;  // ext4 | xfs | block
  int64_t capacity = 0;
  std::map<std::string, std::string> context;
  std::map<std::string, std::string> publish_context;
};

// One tgtd + plugin for the suite that runs now; torn down after its last test.
struct SuiteEnvironment {
  testing::TempDir dir;
  std::unique_ptr<testing::TgtdHarness> tgtd;
  std::unique_ptr<testing::PluginUnderTest> plugin;
  std::string skip_reason;
  std::string start_error;
};

class NodeConformanceTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    env_ = new SuiteEnvironment();
    if (!testing::IsRoot()) {
      env_->skip_reason = "needs root: tgtd, FUSE, loop devices and mount";
      return;
    }
    if (::access("/dev/fuse", R_OK | W_OK) != 0) {
      env_->skip_reason = "needs /dev/fuse";
      return;
    }
    std::string error;
    env_->tgtd = testing::TgtdHarness::Start(&error);
    if (!env_->tgtd) {
      // A machine that could run tgtd and did not is a failed setup, not a skip.
      env_->skip_reason = testing::TgtdHarness::MissingCapability();
      env_->start_error = "cannot start tgtd: " + error;
      return;
    }
    env_->plugin = std::make_unique<testing::PluginUnderTest>(env_->dir.path(), env_->tgtd.get());
    testing::PluginOptions options;
    options.node_id = kNodeId;
    options.extra_args = {"--known-node-ids", "limit-node", "--max-volumes-per-node",
                          std::to_string(kMaxVolumesPerNode),
                          // Nothing changes tgtd behind the backend's back here.
                          "--reconcile-interval", "1h"};
    if (!env_->plugin->Start(options, &error)) env_->start_error = error;
  }

  static void TearDownTestSuite() {
    if (env_ == nullptr) return;
    if (env_->plugin) env_->plugin->Stop();
    testing::CleanUpUnder(env_->dir.path());
    env_->plugin.reset();
    env_->tgtd.reset();
    delete env_;
    env_ = nullptr;
  }

 protected:
  void SetUp() override {
    if (!env_->skip_reason.empty()) GTEST_SKIP() << env_->skip_reason;
    ASSERT_TRUE(env_->start_error.empty()) << "plugin did not start: " << env_->start_error;
    ASSERT_TRUE(Plugin().running()) << "the shared plugin died in an earlier test:\n" << Plugin().LogTail();
    baseline_ = testing::TakeLeakSnapshot(Scope());
    have_baseline_ = true;
  }

  // What the suite's plugin can leave on the machine: processes, mounts and
  // loop devices under its directory, attach records, pool files, tgtd's
  // targets, ACLs and sessions (the plugin itself is not a leak).
  static testing::LeakScope Scope() {
    testing::LeakScope scope;
    scope.dir = env_->dir.path();
    scope.state_dir = Plugin().state_dir();
    scope.pool_dir = Plugin().pool_dir();
    scope.tgtd = env_->tgtd.get();
    scope.ignore_pids = {Plugin().pid()};
    return scope;
  }

  // A case unpublishes and unstages what it staged; its volumes (pool
  // files, targets, ACLs) stay for the CO's ControllerUnpublish and
  // DeleteVolume below. So: first look at the node, before anything is
  // cleaned (a mount, loop device, bridge, record or session new since
  // SetUp is a leak); only a case that failed gets the node-side fallback;
  // then the CO's deletes, after which nothing new may be left anywhere.
  void TearDown() override {
    if (env_ == nullptr || !env_->plugin || !Plugin().running()) return;
    if (have_baseline_) {
      auto left = testing::NewItemsAfterSettling(baseline_, Scope(), testing::NodeSideItems);
      EXPECT_TRUE(left.empty()) << "left on the node by the test's own calls, before the fixture cleans:"
                                << testing::DescribeItems(left) << "\n"
                                << Plugin().LogTail();
    }
    if (HasFailure()) {
      for (auto it = volumes_.rbegin(); it != volumes_.rend(); ++it) {
        for (const auto& target : {Target(*it), Target(*it) + "-2"}) (void)Unpublish(*it, target);
        for (const auto& staging : {Staging(*it), SecondStaging(*it)}) (void)Unstage(*it, staging);
      }
    }
    for (auto it = volumes_.rbegin(); it != volumes_.rend(); ++it) {
      (void)ControllerUnpublish(it->id, kNodeId);
      (void)ControllerUnpublish(it->id, "limit-node");
    }
    // Volumes made from a snapshot or a volume first, then the snapshots,
    // then the sources; a second pass for any a dependency held back.
    for (int pass = 0; pass < 2; ++pass) {
      for (auto it = volumes_.rbegin(); it != volumes_.rend(); ++it) (void)DeleteVolume(it->id);
      for (const auto& id : snapshots_) (void)DeleteSnapshot(id);
    }
    volumes_.clear();
    snapshots_.clear();
    // Only the CO's controller calls ran since the node check: after a
    // passing test nothing may be left that the test did not find at SetUp.
    if (have_baseline_ && !HasFailure()) {
      EXPECT_TRUE(testing::NothingLeftSince(baseline_, Scope(), "the CO's ControllerUnpublish and DeleteVolume"))
          << Plugin().LogTail();
    }
  }

  // The suite's scope without tgtd, for a check while tgtd is stopped
  // (SIGSTOP): tgtadm cannot answer then, and a stopped tgtd changes nothing.
  static testing::LeakScope NodeSideScope() {
    testing::LeakScope scope = Scope();
    scope.tgtd = nullptr;
    return scope;
  }

  // A refused call that could have made something: its code (and the
  // volume named), and right after it, before anything cleans, nothing new
  // in `scope` (the shared leak checker): no mount, loop device, bridge,
  // record, pool file, target, ACL or session.
  ::testing::AssertionResult Refused(const std::function<grpc::Status()>& call, Code code, const std::string& volume_id,
                                     const testing::LeakScope& scope = Scope()) {
    const testing::LeakSnapshot before = testing::TakeLeakSnapshot(scope);
    const grpc::Status st = call();
    const auto left = testing::NewItemsAfterSettling(before, scope);
    ::testing::AssertionResult coded = IsCode(st, code, volume_id);
    if (coded && left.empty()) return coded;
    ::testing::AssertionResult failed = ::testing::AssertionFailure();
    if (!coded) failed << coded.message() << "\n";
    if (!left.empty())
      failed << "left behind by the refused call (" << Describe(st) << "):" << testing::DescribeItems(left);
    return failed;
  }

  static testing::PluginUnderTest& Plugin() { return *env_->plugin; }
  static csi::v1::Node::Stub& Node() { return Plugin().node(); }
  static csi::v1::Controller::Stub& Controller() { return Plugin().controller(); }

  ::testing::AssertionResult Ok(const grpc::Status& st) { return testing::GrpcOk(st, Plugin().LogTail()); }

  // The code the spec names, with a message that names the volume.
  ::testing::AssertionResult IsCode(const grpc::Status& st, Code code, const std::string& volume_id) {
    if (st.error_code() != code) {
      return ::testing::AssertionFailure() << "want code " << static_cast<int>(code) << ", got " << Describe(st);
    }
    if (!volume_id.empty() && st.error_message().find(volume_id) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "the message does not name volume " << volume_id << ": " << st.error_message();
    }
    return ::testing::AssertionSuccess();
  }

  std::string Staging(const Volume& v) const { return Plugin().staging_path(v.id); }
  std::string SecondStaging(const Volume& v) const { return Plugin().dir() + "/staging2/" + v.id; }
  std::string Target(const Volume& v) const { return Plugin().target_path(v.id); }

  // CreateVolume (+ ControllerPublishVolume to this node); the teardown
  // removes it again whatever happens.
  Volume Create(const std::string& name, const std::string& fs, int64_t bytes = 0,
                const csi::v1::VolumeContentSource* source = nullptr, bool publish = true) {
    csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(bytes > 0 ? bytes : SmallSize(fs));
    *req.add_volume_capabilities() = CapabilityFor(fs);
    if (source != nullptr) *req.mutable_volume_content_source() = *source;
    csi::v1::CreateVolumeResponse resp;
    grpc::Status st = Controller().CreateVolume(Deadline().get(), req, &resp);
    EXPECT_TRUE(Ok(st)) << "CreateVolume " << name;
    Volume v;
    v.id = resp.volume().volume_id();
    v.fs = fs;
    v.capacity = resp.volume().capacity_bytes();
    v.context = {resp.volume().volume_context().begin(), resp.volume().volume_context().end()};
    if (v.id.empty()) return v;
    volumes_.push_back(v);
    if (publish) {
      csi::v1::ControllerPublishVolumeResponse presp;
      st = ControllerPublish(v.id, kNodeId, fs, &presp);
      EXPECT_TRUE(Ok(st)) << "ControllerPublishVolume " << name;
      v.publish_context = {presp.publish_context().begin(), presp.publish_context().end()};
      volumes_.back() = v;
    }
    return v;
  }

  grpc::Status ControllerPublish(const std::string& id, const std::string& node, const std::string& fs,
                                 csi::v1::ControllerPublishVolumeResponse* resp = nullptr) {
    csi::v1::ControllerPublishVolumeRequest req;
    req.set_volume_id(id);
    req.set_node_id(node);
    *req.mutable_volume_capability() = CapabilityFor(fs);
    csi::v1::ControllerPublishVolumeResponse local;
    return Controller().ControllerPublishVolume(Deadline().get(), req, resp != nullptr ? resp : &local);
  }

  grpc::Status ControllerUnpublish(const std::string& id, const std::string& node) {
    csi::v1::ControllerUnpublishVolumeRequest req;
    req.set_volume_id(id);
    req.set_node_id(node);
    csi::v1::ControllerUnpublishVolumeResponse resp;
    return Controller().ControllerUnpublishVolume(Deadline().get(), req, &resp);
  }

  grpc::Status DeleteVolume(const std::string& id) {
    csi::v1::DeleteVolumeRequest req;
    req.set_volume_id(id);
    csi::v1::DeleteVolumeResponse resp;
    return Controller().DeleteVolume(Deadline().get(), req, &resp);
  }

  grpc::Status DeleteSnapshot(const std::string& id) {
    csi::v1::DeleteSnapshotRequest req;
    req.set_snapshot_id(id);
    csi::v1::DeleteSnapshotResponse resp;
    return Controller().DeleteSnapshot(Deadline().get(), req, &resp);
  }

  csi::v1::NodeStageVolumeRequest StageRequest(const Volume& v, const std::string& staging = "") {
    csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_staging_target_path(staging.empty() ? Staging(v) : staging);
    *req.mutable_volume_capability() = CapabilityFor(v.fs);
    for (const auto& [k, val] : v.publish_context) (*req.mutable_publish_context())[k] = val;
    for (const auto& [k, val] : v.context) (*req.mutable_volume_context())[k] = val;
    return req;
  }
  grpc::Status Stage(const csi::v1::NodeStageVolumeRequest& req) {
    std::filesystem::create_directories(req.staging_target_path());
    csi::v1::NodeStageVolumeResponse resp;
    return Node().NodeStageVolume(Deadline().get(), req, &resp);
  }
  grpc::Status Stage(const Volume& v, const std::string& staging = "") { return Stage(StageRequest(v, staging)); }

  csi::v1::NodePublishVolumeRequest PublishRequest(const Volume& v, bool readonly = false,
                                                   const std::string& target = "") {
    csi::v1::NodePublishVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_staging_target_path(Staging(v));
    req.set_target_path(target.empty() ? Target(v) : target);
    req.set_readonly(readonly);
    *req.mutable_volume_capability() = CapabilityFor(v.fs);
    for (const auto& [k, val] : v.publish_context) (*req.mutable_publish_context())[k] = val;
    for (const auto& [k, val] : v.context) (*req.mutable_volume_context())[k] = val;
    return req;
  }
  grpc::Status Publish(const csi::v1::NodePublishVolumeRequest& req) {
    csi::v1::NodePublishVolumeResponse resp;
    return Node().NodePublishVolume(Deadline().get(), req, &resp);
  }
  grpc::Status Publish(const Volume& v, bool readonly = false) { return Publish(PublishRequest(v, readonly)); }

  grpc::Status Unpublish(const Volume& v, const std::string& target = "") {
    csi::v1::NodeUnpublishVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_target_path(target.empty() ? Target(v) : target);
    csi::v1::NodeUnpublishVolumeResponse resp;
    return Node().NodeUnpublishVolume(Deadline().get(), req, &resp);
  }

  grpc::Status Unstage(const Volume& v, const std::string& staging = "") {
    csi::v1::NodeUnstageVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_staging_target_path(staging.empty() ? Staging(v) : staging);
    csi::v1::NodeUnstageVolumeResponse resp;
    return Node().NodeUnstageVolume(Deadline().get(), req, &resp);
  }

  grpc::Status Stats(const std::string& id, const std::string& path, csi::v1::NodeGetVolumeStatsResponse* resp) {
    csi::v1::NodeGetVolumeStatsRequest req;
    req.set_volume_id(id);
    req.set_volume_path(path);
    return Node().NodeGetVolumeStats(Deadline().get(), req, resp);
  }

  grpc::Status ControllerExpand(const Volume& v, int64_t bytes, csi::v1::ControllerExpandVolumeResponse* resp) {
    const auto cap = CapabilityFor(v.fs);
    return Controller().ControllerExpandVolume(Deadline().get(), testing::ExpandRequest(v.id, bytes, &cap), resp);
  }

  grpc::Status NodeExpand(const Volume& v, const std::string& path, int64_t bytes,
                          csi::v1::NodeExpandVolumeResponse* resp) {
    csi::v1::NodeExpandVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_volume_path(path);
    req.set_staging_target_path(Staging(v));
    req.mutable_capacity_range()->set_required_bytes(bytes);
    *req.mutable_volume_capability() = CapabilityFor(v.fs);
    return Node().NodeExpandVolume(Deadline().get(), req, resp);
  }

  // Lines of the plugin's log saying it formats this volume.
  int FormatsLogged(const Volume& v) {
    std::istringstream log(testing::ReadFileOrEmpty(Plugin().log_path()));
    std::string line;
    int n = 0;
    while (std::getline(log, line)) {
      n += line.find("formatting") != std::string::npos && line.find("volume_id=" + v.id) != std::string::npos;
    }
    return n;
  }

  // Data a test puts on a volume through its published path: a file for a
  // filesystem, bytes at an offset for raw block. Synced, so that a
  // snapshot or clone taken next sees it.
  static constexpr off_t kBlockOffset = 1 << 20;
  static ::testing::AssertionResult WriteData(const Volume& v, const std::string& path, const std::string& data) {
    bool block = v.fs == "block";
    std::string file = block ? path : path + "/data";
    int fd = ::open(file.c_str(), block ? O_WRONLY | O_CLOEXEC : O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ::testing::AssertionFailure() << "open " << file << ": " << std::strerror(errno);
    ssize_t n = ::pwrite(fd, data.data(), data.size(), block ? kBlockOffset : 0);
    int err = errno;
    bool synced = ::fsync(fd) == 0 && ::syncfs(fd) == 0;
    ::close(fd);
    if (n != static_cast<ssize_t>(data.size())) {
      return ::testing::AssertionFailure() << "write " << file << ": " << std::strerror(err);
    }
    if (!synced) return ::testing::AssertionFailure() << "fsync " << file;
    return ::testing::AssertionSuccess();
  }
  static std::string ReadData(const Volume& v, const std::string& path, size_t size) {
    if (v.fs != "block") return testing::ReadFileOrEmpty(path + "/data");
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "";
    std::string out(size, '\0');
    ssize_t n = ::pread(fd, out.data(), size, kBlockOffset);
    ::close(fd);
    return n == static_cast<ssize_t>(size) ? out : "";
  }

  static SuiteEnvironment* env_;
  std::vector<Volume> volumes_;
  testing::LeakSnapshot baseline_;
  bool have_baseline_ = false;
  std::vector<std::string> snapshots_;
};

SuiteEnvironment* NodeConformanceTest::env_ = nullptr;

// ---- Rules that need no volume, or only an unstaged one. ----

TEST_F(NodeConformanceTest, NodeStageRequiresVolumeIdStagingPathAndCapability) {
  const std::string id = "conf-missing-fields";
  csi::v1::NodeStageVolumeResponse resp;
  csi::v1::NodeStageVolumeRequest req;
  req.set_staging_target_path(Plugin().dir() + "/staging/x");
  *req.mutable_volume_capability() = MountCapability("ext4");
  auto stage = [&] { return Node().NodeStageVolume(Deadline().get(), req, &resp); };
  EXPECT_TRUE(Refused(stage, Code::INVALID_ARGUMENT, ""));

  req.set_volume_id(id);
  req.clear_staging_target_path();
  EXPECT_TRUE(Refused(stage, Code::INVALID_ARGUMENT, id));

  req.set_staging_target_path(Plugin().dir() + "/staging/x");
  req.clear_volume_capability();
  EXPECT_TRUE(Refused(stage, Code::INVALID_ARGUMENT, id));

  // A capability without an access type is as good as none.
  req.mutable_volume_capability()->mutable_access_mode()->set_mode(
      csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  EXPECT_TRUE(Refused(stage, Code::INVALID_ARGUMENT, id));
}

TEST_F(NodeConformanceTest, NodePublishRequiresVolumeIdTargetPathAndCapability) {
  const std::string id = "conf-missing-fields";
  csi::v1::NodePublishVolumeResponse resp;
  csi::v1::NodePublishVolumeRequest req;
  req.set_staging_target_path(Plugin().dir() + "/staging/x");
  req.set_target_path(Plugin().dir() + "/pods/x/mount");
  *req.mutable_volume_capability() = MountCapability("ext4");
  auto publish = [&] { return Node().NodePublishVolume(Deadline().get(), req, &resp); };
  EXPECT_TRUE(Refused(publish, Code::INVALID_ARGUMENT, ""));

  req.set_volume_id(id);
  req.clear_target_path();
  EXPECT_TRUE(Refused(publish, Code::INVALID_ARGUMENT, id));

  req.set_target_path(Plugin().dir() + "/pods/x/mount");
  req.clear_volume_capability();
  EXPECT_TRUE(Refused(publish, Code::INVALID_ARGUMENT, id));

  // The spec's own row: STAGE_UNSTAGE_VOLUME is advertised, so a publish
  // without a staging path is FAILED_PRECONDITION.
  *req.mutable_volume_capability() = MountCapability("ext4");
  req.clear_staging_target_path();
  EXPECT_TRUE(Refused(publish, Code::FAILED_PRECONDITION, id));
}

TEST_F(NodeConformanceTest, UnpublishUnstageStatsAndExpandRequireTheirFields) {
  const std::string id = "conf-missing-fields";
  const std::string path = Plugin().dir() + "/pods/x/mount";
  {
    csi::v1::NodeUnpublishVolumeRequest req;
    csi::v1::NodeUnpublishVolumeResponse resp;
    req.set_target_path(path);
    EXPECT_TRUE(IsCode(Node().NodeUnpublishVolume(Deadline().get(), req, &resp), Code::INVALID_ARGUMENT, ""));
    req.set_volume_id(id);
    req.clear_target_path();
    EXPECT_TRUE(IsCode(Node().NodeUnpublishVolume(Deadline().get(), req, &resp), Code::INVALID_ARGUMENT, id));
  }
  {
    csi::v1::NodeUnstageVolumeRequest req;
    csi::v1::NodeUnstageVolumeResponse resp;
    req.set_staging_target_path(path);
    EXPECT_TRUE(IsCode(Node().NodeUnstageVolume(Deadline().get(), req, &resp), Code::INVALID_ARGUMENT, ""));
    req.set_volume_id(id);
    req.clear_staging_target_path();
    EXPECT_TRUE(IsCode(Node().NodeUnstageVolume(Deadline().get(), req, &resp), Code::INVALID_ARGUMENT, id));
  }
  {
    csi::v1::NodeGetVolumeStatsRequest req;
    csi::v1::NodeGetVolumeStatsResponse resp;
    req.set_volume_path(path);
    EXPECT_TRUE(IsCode(Node().NodeGetVolumeStats(Deadline().get(), req, &resp), Code::INVALID_ARGUMENT, ""));
    req.set_volume_id(id);
    req.clear_volume_path();
    EXPECT_TRUE(IsCode(Node().NodeGetVolumeStats(Deadline().get(), req, &resp), Code::INVALID_ARGUMENT, id));
  }
  {
    csi::v1::NodeExpandVolumeRequest req;
    csi::v1::NodeExpandVolumeResponse resp;
    req.set_volume_path(path);
    EXPECT_TRUE(IsCode(Node().NodeExpandVolume(Deadline().get(), req, &resp), Code::INVALID_ARGUMENT, ""));
    req.set_volume_id(id);
    req.clear_volume_path();
    EXPECT_TRUE(IsCode(Node().NodeExpandVolume(Deadline().get(), req, &resp), Code::INVALID_ARGUMENT, id));
  }
}

TEST_F(NodeConformanceTest, UnpublishAndUnstageOfUnknownVolumeOrPathAreOk) {
  Volume unknown;
  unknown.id = "conf-never-created";
  unknown.fs = "ext4";
  EXPECT_TRUE(Ok(Unpublish(unknown)));
  EXPECT_TRUE(Ok(Unstage(unknown)));
  // The directories need not exist either.
  EXPECT_FALSE(std::filesystem::exists(Target(unknown)));
  EXPECT_TRUE(Ok(Unpublish(unknown, Plugin().dir() + "/no/such/dir")));
  EXPECT_TRUE(Ok(Unstage(unknown, Plugin().dir() + "/no/such/dir")));
}

TEST_F(NodeConformanceTest, StatsAndExpandOfUnknownVolumeOrPathAreNotFound) {
  csi::v1::NodeGetVolumeStatsResponse stats;
  EXPECT_TRUE(IsCode(Stats("conf-never-created", Plugin().dir() + "/pods/none/mount", &stats), Code::NOT_FOUND,
                     "conf-never-created"));
  Volume unknown;
  unknown.id = "conf-never-created";
  unknown.fs = "ext4";
  csi::v1::NodeExpandVolumeResponse expanded;
  EXPECT_TRUE(Refused([&] { return NodeExpand(unknown, Plugin().dir() + "/pods/none/mount", 0, &expanded); },
                      Code::NOT_FOUND, unknown.id));

  // A staged volume asked about at a path that does not exist.
  Volume v = Create("conf-stats-missing-path", "ext4");
  ASSERT_FALSE(v.id.empty());
  ASSERT_TRUE(Ok(Stage(v)));
  EXPECT_TRUE(Refused([&] { return Stats(v.id, Target(v), &stats); }, Code::NOT_FOUND, v.id));
  ASSERT_TRUE(Ok(Unstage(v)));
}

// Issue #15: a 64 MiB PVC of xfs or btrfs used to be made at 64 MiB and then
// never stage (mkfs refuses it). CreateVolume now makes it as large as the
// filesystem needs on this host and says so in capacity_bytes; it stages.
TEST_F(NodeConformanceTest, SmallXfsAndBtrfsVolumesAreMadeLargeEnoughToStage) {
  for (const auto& [fs, minimum] : {std::pair<std::string, int64_t>{"xfs", 300 * kMiB}, {"btrfs", 114294784}}) {
    Volume v = Create("conf-small-" + fs, fs, 64 * kMiB);
    ASSERT_FALSE(v.id.empty()) << fs;
    EXPECT_EQ(v.capacity, minimum) << fs << ": capacity_bytes is not the real size";
    EXPECT_TRUE(Ok(Stage(v))) << fs;
    EXPECT_TRUE(Ok(Unstage(v))) << fs;
  }
}

TEST_F(NodeConformanceTest, PublishBeforeStageIsFailedPrecondition) {
  for (const std::string fs : {"ext4", "block"}) {
    Volume v = Create("conf-order-" + fs, fs);
    ASSERT_FALSE(v.id.empty());
    EXPECT_TRUE(Refused([&] { return Publish(v); }, Code::FAILED_PRECONDITION, v.id)) << fs;
    EXPECT_FALSE(std::filesystem::exists(Target(v))) << fs << ": a refused publish left its target";
  }
}

TEST_F(NodeConformanceTest, NodeGetInfoAndCapabilities) {
  csi::v1::NodeGetInfoResponse info;
  ASSERT_TRUE(Ok(Node().NodeGetInfo(Deadline().get(), {}, &info)));
  EXPECT_EQ(info.node_id(), kNodeId);
  EXPECT_EQ(info.max_volumes_per_node(), kMaxVolumesPerNode);
  EXPECT_FALSE(info.accessible_topology().segments().empty());

  csi::v1::NodeGetCapabilitiesResponse caps;
  ASSERT_TRUE(Ok(Node().NodeGetCapabilities(Deadline().get(), {}, &caps)));
  std::set<int> rpcs;
  for (const auto& c : caps.capabilities()) rpcs.insert(c.rpc().type());
  for (auto want : {Rpc::STAGE_UNSTAGE_VOLUME, Rpc::GET_VOLUME_STATS, Rpc::EXPAND_VOLUME, Rpc::VOLUME_CONDITION}) {
    EXPECT_TRUE(rpcs.contains(want)) << Rpc::Type_Name(want);
  }
}

// What NodeGetInfo advertises, the controller enforces: the CO never
// publishes more, and a CO that tries anyway gets RESOURCE_EXHAUSTED.
TEST_F(NodeConformanceTest, AttachLimitIsAdvertisedAndEnforced) {
  const std::string node = "limit-node";
  std::vector<Volume> volumes;
  for (int i = 0; i <= kMaxVolumesPerNode; ++i) {
    volumes.push_back(Create("conf-limit-" + std::to_string(i), "block", 16 * kMiB, nullptr, /*publish=*/false));
    ASSERT_FALSE(volumes.back().id.empty());
  }
  for (int i = 0; i < kMaxVolumesPerNode; ++i) {
    ASSERT_TRUE(Ok(ControllerPublish(volumes[i].id, node, "block"))) << i;
  }
  const std::string& last = volumes.back().id;
  EXPECT_TRUE(Refused([&] { return ControllerPublish(last, node, "block"); }, Code::RESOURCE_EXHAUSTED, last));
  // Publishing one of the published ones again is no new attachment.
  EXPECT_TRUE(Ok(ControllerPublish(volumes[0].id, node, "block")));
  // Other nodes have their own budget.
  EXPECT_TRUE(Ok(ControllerPublish(last, kNodeId, "block")));
  ASSERT_TRUE(Ok(ControllerUnpublish(last, kNodeId)));
  // A freed slot can be used.
  ASSERT_TRUE(Ok(ControllerUnpublish(volumes[0].id, node)));
  EXPECT_TRUE(Ok(ControllerPublish(last, node, "block")));
}

// A call on a volume that has one in flight is ABORTED, deterministically:
// tgtd is paused (SIGSTOP) so the first stage waits in its iSCSI login,
// holding the volume, while the others arrive.
TEST_F(NodeConformanceTest, CallsOnAVolumeWithAStageInFlightAreAborted) {
  Volume v = Create("conf-inflight", "ext4");
  ASSERT_FALSE(v.id.empty());
  const pid_t tgtd = env_->tgtd->pid();
  ASSERT_EQ(::kill(tgtd, SIGSTOP), 0);
  struct Resume {
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{tgtd};
  auto first = std::async(std::launch::async, [&] { return Stage(v); });
  // The attacher logs this once the stage holds the volume.
  const std::string marker = "attaching volume volume_id=" + v.id;
  bool in_flight = false;
  for (int i = 0; i < 600 && !in_flight; ++i) {
    in_flight = testing::ReadFileOrEmpty(Plugin().log_path()).find(marker) != std::string::npos;
    if (!in_flight) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(in_flight) << Plugin().LogTail();
  // Each refused call leaves the node as the stage in flight holds it. That
  // stage starts its bridge (its argv names the volume), which then waits
  // in the login: from there on the node holds still, and what is new after
  // a refused call is that call's.
  testing::LeakScope node_side = NodeSideScope();
  node_side.volume_id = v.id;
  auto bridge_waits = [&] {
    const auto items = testing::TakeLeakSnapshot(node_side).items;
    return std::any_of(items.begin(), items.end(),
                       [&](const std::string& i) { return i.starts_with("process ") && i.find(v.id) != i.npos; });
  };
  for (int i = 0; i < 600 && !bridge_waits(); ++i) std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(bridge_waits()) << "no bridge for the stage in flight:\n" << Plugin().LogTail();
  for (int i = 0; i < 50; ++i) {
    const auto was = testing::TakeLeakSnapshot(node_side).items;
    std::this_thread::sleep_for(200ms);
    if (testing::TakeLeakSnapshot(node_side).items == was) break;
  }
  EXPECT_TRUE(Refused([&] { return Stage(v); }, Code::ABORTED, v.id, node_side)) << "a second NodeStageVolume";
  EXPECT_TRUE(Refused([&] { return Unstage(v); }, Code::ABORTED, v.id, node_side)) << "NodeUnstageVolume";
  EXPECT_TRUE(Refused([&] { return Publish(v); }, Code::ABORTED, v.id, node_side)) << "NodePublishVolume";
  csi::v1::NodeExpandVolumeResponse expanded;
  EXPECT_TRUE(Refused([&] { return NodeExpand(v, Staging(v), 0, &expanded); }, Code::ABORTED, v.id, node_side))
      << "NodeExpandVolume";
  // Another volume id on the same staging path, or with the same LUN.
  Volume other = v;
  other.id = "conf-inflight-other";
  EXPECT_TRUE(Refused([&] { return Stage(StageRequest(other, Staging(v))); }, Code::ABORTED, other.id, node_side))
      << "same staging path";
  EXPECT_TRUE(
      Refused([&] { return Stage(other, Plugin().dir() + "/staging-other"); }, Code::ABORTED, other.id, node_side))
      << "same LUN";
  // Other volumes are not held up by it.
  Volume unknown;
  unknown.id = "conf-other-volume";
  unknown.fs = "ext4";
  EXPECT_TRUE(Ok(Unstage(unknown)));
  ::kill(tgtd, SIGCONT);
  EXPECT_TRUE(Ok(first.get())) << "the stage in flight completes once tgtd answers";
  EXPECT_EQ(FormatsLogged(v), 1);
  ASSERT_TRUE(Ok(Unstage(v)));
}

// ---- The node acts only on what its records give to the volume named. ----

// A mount the test makes itself (something of the host's, not the
// plugin's), unmounted lazily at the end whatever happens.
struct ForeignMount {
  std::string path;
  bool mounted = false;
  ForeignMount(const std::string& where, const char* source, const char* fs_type, unsigned long flags) : path(where) {
    std::filesystem::create_directories(path);
    mounted = ::mount(source, path.c_str(), fs_type, flags, nullptr) == 0;
  }
  ~ForeignMount() {
    if (mounted) ::umount2(path.c_str(), MNT_DETACH);
  }
};

class NodeOwnershipTest : public NodeConformanceTest {
 protected:
  // The leak checker's view is the same right after `call` as before it:
  // nothing new (a session, loop device, mount, record) and nothing gone (a
  // foreign mount, the other volume's mounts).
  ::testing::AssertionResult Unchanged(const testing::LeakSnapshot& before, const std::string& call) {
    if (auto left = testing::NothingLeftSince(before, Scope(), call); !left) return left;
    testing::LeakSnapshot now = testing::TakeLeakSnapshot(Scope());
    std::vector<std::string> gone;
    for (const auto& item : before.items) {
      if (!now.items.contains(item)) gone.push_back(item);
    }
    if (gone.empty()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "gone after " << call << ":\n" << testing::DescribeItems(gone);
  }
};

TEST_F(NodeOwnershipTest, UnknownVolumeIdsTouchNoFileAndNoMount) {
  Volume ghost;
  ghost.id = "conf-ghost";
  ghost.fs = "ext4";
  const std::string foreign = Plugin().dir() + "/foreign";
  std::filesystem::create_directories(foreign);
  const std::string file = foreign + "/kubelet.conf";
  {
    std::ofstream out(file);
    out << "not the plugin's";
  }
  ForeignMount tmpfs(foreign + "/tmpfs", "tmpfs", "tmpfs", 0);
  ForeignMount bind(foreign + "/bind", foreign.c_str(), nullptr, MS_BIND);
  ASSERT_TRUE(tmpfs.mounted && bind.mounted) << std::strerror(errno);

  testing::LeakSnapshot before = testing::TakeLeakSnapshot(Scope());
  EXPECT_TRUE(Ok(Unpublish(ghost, file)));
  EXPECT_TRUE(Unchanged(before, "NodeUnpublish of an unknown volume at a regular file"));
  EXPECT_EQ(testing::ReadFileOrEmpty(file), "not the plugin's") << "the file was unlinked";
  EXPECT_TRUE(Ok(Unpublish(ghost, tmpfs.path)));
  EXPECT_TRUE(Unchanged(before, "NodeUnpublish of an unknown volume at a tmpfs"));
  EXPECT_TRUE(std::filesystem::is_directory(tmpfs.path));
  EXPECT_TRUE(Ok(Unstage(ghost, bind.path)));
  EXPECT_TRUE(Unchanged(before, "NodeUnstage of an unknown volume at a bind mount"));

  // Volume E, staged and published: an unknown id at its staging path.
  Volume e = Create("conf-own-e", "ext4");
  ASSERT_FALSE(e.id.empty());
  ASSERT_TRUE(Ok(Stage(e)));
  ASSERT_TRUE(Ok(Publish(e)));
  ASSERT_TRUE(WriteData(e, Target(e), "still E's"));
  before = testing::TakeLeakSnapshot(Scope());
  EXPECT_TRUE(Ok(Unstage(ghost, Staging(e))));
  EXPECT_TRUE(Unchanged(before, "NodeUnstage of an unknown volume at E's staging path"));
  EXPECT_EQ(ReadData(e, Target(e), 9), "still E's");
  ASSERT_TRUE(Ok(Unpublish(e)));
  ASSERT_TRUE(Ok(Unstage(e)));
}

TEST_F(NodeOwnershipTest, AnotherVolumesTargetOrStagingPathIsRefusedNamingBoth) {
  Volume e = Create("conf-own-e2", "ext4");
  Volume f = Create("conf-own-f2", "ext4");
  ASSERT_FALSE(e.id.empty() || f.id.empty());
  for (const Volume* v : {&e, &f}) {
    ASSERT_TRUE(Ok(Stage(*v)));
    ASSERT_TRUE(Ok(Publish(*v)));
  }
  ASSERT_TRUE(WriteData(f, Target(f), "still F's"));
  testing::LeakSnapshot before = testing::TakeLeakSnapshot(Scope());
  grpc::Status st = Unpublish(e, Target(f));
  EXPECT_TRUE(IsCode(st, Code::FAILED_PRECONDITION, e.id));
  EXPECT_NE(st.error_message().find(f.id), std::string::npos) << st.error_message();
  EXPECT_TRUE(Unchanged(before, "NodeUnpublish of E at F's target"));
  st = Unstage(e, Staging(f));
  EXPECT_TRUE(IsCode(st, Code::FAILED_PRECONDITION, e.id));
  EXPECT_NE(st.error_message().find(f.id), std::string::npos) << st.error_message();
  EXPECT_TRUE(Unchanged(before, "NodeUnstage of E at F's staging path"));
  EXPECT_TRUE(IsCode(Publish(PublishRequest(e, false, Target(f))), Code::FAILED_PRECONDITION, e.id));
  EXPECT_TRUE(Unchanged(before, "NodePublish of E at F's target"));
  EXPECT_EQ(ReadData(f, Target(f), 9), "still F's");
  for (const Volume* v : {&e, &f}) {
    ASSERT_TRUE(Ok(Unpublish(*v)));
    ASSERT_TRUE(Ok(Unstage(*v)));
  }
}

TEST_F(NodeOwnershipTest, SymlinkedTargetIsRefusedAndNothingIsMountedAtItsDestination) {
  Volume e = Create("conf-own-link", "ext4");
  ASSERT_FALSE(e.id.empty());
  ASSERT_TRUE(Ok(Stage(e)));
  const std::string destination = Plugin().dir() + "/foreign/link-destination";
  std::filesystem::create_directories(destination);
  std::filesystem::create_directories(std::filesystem::path(Target(e)).parent_path());
  std::filesystem::remove(Target(e));
  std::filesystem::create_directory_symlink(destination, Target(e));
  testing::LeakSnapshot before = testing::TakeLeakSnapshot(Scope());
  grpc::Status st = Publish(e);
  EXPECT_TRUE(IsCode(st, Code::FAILED_PRECONDITION, e.id));
  EXPECT_TRUE(Unchanged(before, "NodePublish at a symbolic link"));
  EXPECT_TRUE(testing::MountsUnder(destination).empty()) << "mounted at the link's destination";
  EXPECT_TRUE(Ok(Unpublish(e)));
  EXPECT_TRUE(std::filesystem::is_symlink(Target(e)));
  std::filesystem::remove(Target(e));
  ASSERT_TRUE(Ok(Unstage(e)));
}

// Volume G's publish_context names E's LUN (its IQN, LUN number and
// serial): staging it would mount E's filesystem a second time, read-write,
// through a second loop device.
TEST_F(NodeOwnershipTest, StageOfAnotherVolumeIdWithAStagedVolumesLunIsRefused) {
  Volume e = Create("conf-own-lun", "ext4");
  ASSERT_FALSE(e.id.empty());
  ASSERT_TRUE(Ok(Stage(e)));
  ASSERT_TRUE(Ok(Publish(e)));
  for (bool is_static : {false, true}) {
    Volume g = e;
    g.id = std::string("conf-own-g") + (is_static ? "-static" : "");
    if (is_static) g.publish_context["static"] = "true";
    testing::LeakSnapshot before = testing::TakeLeakSnapshot(Scope());
    grpc::Status st = Stage(g, Plugin().dir() + "/staging-g/" + g.id);
    EXPECT_TRUE(IsCode(st, Code::FAILED_PRECONDITION, g.id)) << "static=" << is_static;
    EXPECT_NE(st.error_message().find(e.id), std::string::npos) << st.error_message();
    EXPECT_TRUE(Unchanged(before, "NodeStage of G with E's LUN (static=" + std::to_string(is_static) + ")"));
  }
  ASSERT_TRUE(Ok(Unpublish(e)));
  ASSERT_TRUE(Ok(Unstage(e)));
}

// ---- Rules per access type: ext4, xfs, raw block. ----

class NodeVolumeTest : public NodeConformanceTest, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string Fs() const { return GetParam(); }
  bool Block() const { return GetParam() == "block"; }
  std::string Name(const std::string& what) const { return "conf-" + what + "-" + GetParam(); }
};

TEST_P(NodeVolumeTest, StageAndPublishAreIdempotentAndRefuseIncompatibleRepeats) {
  Volume v = Create(Name("idem"), Fs());
  ASSERT_FALSE(v.id.empty());
  ASSERT_TRUE(Ok(Stage(v)));
  EXPECT_TRUE(Ok(Stage(v))) << "a repeated NodeStageVolume is OK";
  ASSERT_TRUE(Ok(Publish(v)));
  EXPECT_TRUE(Ok(Publish(v))) << "a repeated NodePublishVolume is OK";
  ASSERT_TRUE(WriteData(v, Target(v), "idempotent"));

  // Same target path, incompatible request: ALREADY_EXISTS, nothing changed.
  EXPECT_TRUE(Refused([&] { return Publish(v, /*readonly=*/true); }, Code::ALREADY_EXISTS, v.id))
      << "read-only flag differs";
  auto other_type = PublishRequest(v);
  *other_type.mutable_volume_capability() = Block() ? MountCapability("ext4") : BlockCapability();
  EXPECT_TRUE(Refused([&] { return Publish(other_type); }, Code::ALREADY_EXISTS, v.id)) << "access type differs";
  if (!Block()) {
    auto other_fs = PublishRequest(v);
    *other_fs.mutable_volume_capability() = MountCapability(Fs() == "xfs" ? "ext4" : "xfs");
    EXPECT_TRUE(Refused([&] { return Publish(other_fs); }, Code::ALREADY_EXISTS, v.id)) << "fs_type differs";
    // The same at the staging path.
    auto restage = StageRequest(v);
    *restage.mutable_volume_capability() = MountCapability(Fs() == "xfs" ? "ext4" : "xfs");
    EXPECT_TRUE(Refused([&] { return Stage(restage); }, Code::ALREADY_EXISTS, v.id)) << "staged fs_type differs";
  }
  auto restage = StageRequest(v);
  *restage.mutable_volume_capability() = Block() ? MountCapability("ext4") : BlockCapability();
  EXPECT_TRUE(Refused([&] { return Stage(restage); }, Code::ALREADY_EXISTS, v.id)) << "staged access type differs";
  EXPECT_EQ(ReadData(v, Target(v), 10), "idempotent");
  if (!Block()) {
    EXPECT_EQ(FormatsLogged(v), 1);
  }

  // A second target path for the same staged volume is a second publish.
  auto second = PublishRequest(v, false, Target(v) + "-2");
  ASSERT_TRUE(Ok(Publish(second)));
  EXPECT_EQ(ReadData(v, Target(v) + "-2", 10), "idempotent");
  EXPECT_TRUE(Ok(Unpublish(v, Target(v) + "-2")));

  EXPECT_TRUE(Ok(Unpublish(v)));
  EXPECT_TRUE(Ok(Unpublish(v))) << "a repeated NodeUnpublishVolume is OK";
  EXPECT_FALSE(std::filesystem::exists(Target(v))) << "the target path is removed";
  EXPECT_TRUE(Ok(Unstage(v)));
  EXPECT_TRUE(Ok(Unstage(v))) << "a repeated NodeUnstageVolume is OK";
  EXPECT_TRUE(testing::MountsUnder(Staging(v)).empty());
}

TEST_P(NodeVolumeTest, UnpublishAndUnstageAtPathsOfNoUseAreOkAndChangeNothing) {
  Volume v = Create(Name("otherpath"), Fs());
  ASSERT_FALSE(v.id.empty());
  ASSERT_TRUE(Ok(Stage(v)));
  ASSERT_TRUE(Ok(Publish(v)));
  EXPECT_TRUE(Ok(Unpublish(v, Plugin().dir() + "/pods/never-published/mount")));
  EXPECT_TRUE(Ok(Unstage(v, Plugin().dir() + "/staging/never-staged")));
  csi::v1::NodeGetVolumeStatsResponse stats;
  ASSERT_TRUE(Ok(Stats(v.id, Target(v), &stats)));
  EXPECT_FALSE(stats.volume_condition().abnormal()) << stats.volume_condition().message();
  ASSERT_TRUE(Ok(Unpublish(v)));
  ASSERT_TRUE(Ok(Unstage(v)));
}

// The bug this suite found: a second staging path mounted the volume twice.
TEST_P(NodeVolumeTest, StageAtASecondStagingPathIsRefusedNamingTheFirst) {
  Volume v = Create(Name("twostage"), Fs());
  ASSERT_FALSE(v.id.empty());
  ASSERT_TRUE(Ok(Stage(v)));
  grpc::Status st;
  EXPECT_TRUE(Refused([&] { return st = Stage(v, SecondStaging(v)); }, Code::FAILED_PRECONDITION, v.id));
  EXPECT_NE(st.error_message().find(Staging(v)), std::string::npos) << st.error_message();
  EXPECT_TRUE(testing::MountsUnder(SecondStaging(v)).empty()) << "mounted a second time";
  // The first staging still serves.
  ASSERT_TRUE(Ok(Publish(v)));
  ASSERT_TRUE(WriteData(v, Target(v), "staged once"));
  ASSERT_TRUE(Ok(Unpublish(v)));
  ASSERT_TRUE(Ok(Unstage(v)));
  // Once unstaged, another staging path is fine.
  ASSERT_TRUE(Ok(Stage(v, SecondStaging(v))));
  if (!Block()) {
    EXPECT_EQ(testing::ReadFileOrEmpty(SecondStaging(v) + "/data"), "staged once");
    EXPECT_EQ(FormatsLogged(v), 1);
  }
  ASSERT_TRUE(Ok(Unstage(v, SecondStaging(v))));
}

TEST_P(NodeVolumeTest, StatsReportUsageAndCondition) {
  Volume v = Create(Name("stats"), Fs());
  ASSERT_FALSE(v.id.empty());
  ASSERT_TRUE(Ok(Stage(v)));
  ASSERT_TRUE(Ok(Publish(v)));
  csi::v1::NodeGetVolumeStatsResponse stats;
  ASSERT_TRUE(Ok(Stats(v.id, Target(v), &stats)));
  EXPECT_FALSE(stats.volume_condition().abnormal()) << stats.volume_condition().message();
  EXPECT_NE(stats.volume_condition().message().find(v.id), std::string::npos) << stats.volume_condition().message();
  if (Block()) {
    ASSERT_EQ(stats.usage_size(), 1);
    EXPECT_EQ(stats.usage(0).unit(), csi::v1::VolumeUsage::BYTES);
    EXPECT_EQ(stats.usage(0).total(), v.capacity);
  } else {
    ASSERT_EQ(stats.usage_size(), 2);
    std::map<int, csi::v1::VolumeUsage> by_unit;
    for (const auto& u : stats.usage()) by_unit[u.unit()] = u;
    ASSERT_TRUE(by_unit.contains(csi::v1::VolumeUsage::BYTES));
    ASSERT_TRUE(by_unit.contains(csi::v1::VolumeUsage::INODES));
    const auto& bytes = by_unit[csi::v1::VolumeUsage::BYTES];
    EXPECT_GT(bytes.total(), 0);
    EXPECT_LE(bytes.total(), v.capacity);
    EXPECT_GT(bytes.available(), 0);
    EXPECT_LE(bytes.used() + bytes.available(), bytes.total());
    EXPECT_GT(by_unit[csi::v1::VolumeUsage::INODES].total(), 0);
    // Usage follows the data.
    std::string blob(4 * kMiB, 'u');
    ASSERT_TRUE(WriteData(v, Target(v), blob));
    csi::v1::NodeGetVolumeStatsResponse after;
    ASSERT_TRUE(Ok(Stats(v.id, Target(v), &after)));
    for (const auto& u : after.usage()) {
      if (u.unit() == csi::v1::VolumeUsage::BYTES) {
        EXPECT_GE(u.used(), bytes.used() + 3 * kMiB);
      }
    }
    // The staging path answers too.
    ASSERT_TRUE(Ok(Stats(v.id, Staging(v), &after)));
    EXPECT_FALSE(after.volume_condition().abnormal()) << after.volume_condition().message();
  }
  ASSERT_TRUE(Ok(Unpublish(v)));
  EXPECT_TRUE(IsCode(Stats(v.id, Target(v), &stats), Code::NOT_FOUND, v.id)) << "unpublished target";
  ASSERT_TRUE(Ok(Unstage(v)));
}

TEST_P(NodeVolumeTest, ExpandThroughControllerThenNodeIsVisibleInStats) {
  Volume v = Create(Name("expand"), Fs());
  ASSERT_FALSE(v.id.empty());
  ASSERT_TRUE(Ok(Stage(v)));
  ASSERT_TRUE(Ok(Publish(v)));
  ASSERT_TRUE(WriteData(v, Target(v), "kept across the grow"));
  csi::v1::NodeGetVolumeStatsResponse before;
  ASSERT_TRUE(Ok(Stats(v.id, Target(v), &before)));
  ASSERT_GE(before.usage_size(), 1);

  const int64_t grown = v.capacity + 128 * kMiB;
  csi::v1::ControllerExpandVolumeResponse cresp;
  ASSERT_TRUE(Ok(ControllerExpand(v, grown, &cresp)));
  EXPECT_GE(cresp.capacity_bytes(), grown);
  csi::v1::NodeExpandVolumeResponse nresp;
  if (Fs() == "ext4" && !HasCapSysResource()) {
    // The kernel lets only CAP_SYS_RESOURCE grow a mounted ext4; the plugin
    // (our child, our capabilities) must say so instead of failing oddly.
    EXPECT_TRUE(Refused([&] { return NodeExpand(v, Target(v), grown, &nresp); }, Code::FAILED_PRECONDITION, v.id));
    // Unstaged like any case: TearDown looks at the node before it cleans.
    ASSERT_TRUE(Ok(Unpublish(v)));
    ASSERT_TRUE(Ok(Unstage(v)));
    GTEST_SKIP() << "growing a mounted ext4 needs CAP_SYS_RESOURCE, which this test process lacks";
  }
  ASSERT_TRUE(Ok(NodeExpand(v, Target(v), grown, &nresp)));
  EXPECT_GE(nresp.capacity_bytes(), grown);
  // Idempotent: the same expansion again.
  ASSERT_TRUE(Ok(NodeExpand(v, Target(v), grown, &nresp)));

  csi::v1::NodeGetVolumeStatsResponse after;
  ASSERT_TRUE(Ok(Stats(v.id, Target(v), &after)));
  ASSERT_GE(after.usage_size(), 1);
  if (Block()) {
    EXPECT_EQ(after.usage(0).total(), cresp.capacity_bytes());
  } else {
    EXPECT_GT(after.usage(0).total(), before.usage(0).total() + 96 * kMiB);
  }
  EXPECT_EQ(ReadData(v, Target(v), 20), "kept across the grow");
  ASSERT_TRUE(Ok(Unpublish(v)));
  ASSERT_TRUE(Ok(Unstage(v)));
}

TEST_P(NodeVolumeTest, ReadOnlyPublishRefusesWrites) {
  Volume v = Create(Name("ro"), Fs());
  ASSERT_FALSE(v.id.empty());
  ASSERT_TRUE(Ok(Stage(v)));
  // Something to protect, written through a writable publish first.
  ASSERT_TRUE(Ok(Publish(v)));
  ASSERT_TRUE(WriteData(v, Target(v), "original"));
  ASSERT_TRUE(Ok(Unpublish(v)));

  ASSERT_TRUE(Ok(Publish(v, /*readonly=*/true)));
  EXPECT_TRUE(Ok(Publish(v, /*readonly=*/true))) << "idempotent";
  EXPECT_FALSE(WriteData(v, Target(v), "overwrite")) << "a read-only publish took a write";
  if (!Block()) {
    int fd = ::open((Target(v) + "/new").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    int err = errno;
    EXPECT_LT(fd, 0);
    EXPECT_EQ(err, EROFS);
    if (fd >= 0) ::close(fd);
  }
  EXPECT_EQ(ReadData(v, Target(v), 8), "original");
  ASSERT_TRUE(Ok(Unpublish(v)));
  ASSERT_TRUE(Ok(Unstage(v)));
}

// Two stages of one volume at once: one may be ABORTED (the other is in
// flight) or both succeed, and the device is formatted once.
TEST_P(NodeVolumeTest, ConcurrentStageOfOneVolumeIsAbortedOrOkAndFormatsOnce) {
  Volume v = Create(Name("race"), Fs());
  ASSERT_FALSE(v.id.empty());
  auto request = StageRequest(v);
  std::vector<std::future<grpc::Status>> calls;
  for (int i = 0; i < 3; ++i) calls.push_back(std::async(std::launch::async, [&] { return Stage(request); }));
  int ok = 0;
  for (auto& call : calls) {
    grpc::Status st = call.get();
    if (st.ok()) {
      ++ok;
    } else {
      EXPECT_TRUE(IsCode(st, Code::ABORTED, v.id));
    }
  }
  EXPECT_GE(ok, 1);
  ASSERT_TRUE(Ok(Stage(v)));
  if (!Block()) {
    EXPECT_EQ(FormatsLogged(v), 1);
  }
  EXPECT_LE(testing::MountsUnder(Staging(v)).size(), 1u) << "mounted twice";
  ASSERT_TRUE(Ok(Unstage(v)));
}

// Data written to a volume is in a snapshot of it and in a volume restored
// from that snapshot; writes to the source after the snapshot are not.
TEST_P(NodeVolumeTest, SnapshotRestoreCarriesTheData) {
  Volume source = Create(Name("snapsrc"), Fs());
  ASSERT_FALSE(source.id.empty());
  ASSERT_TRUE(Ok(Stage(source)));
  ASSERT_TRUE(Ok(Publish(source)));
  ASSERT_TRUE(WriteData(source, Target(source), "in the snapshot"));

  csi::v1::CreateSnapshotRequest sreq;
  sreq.set_name(Name("snap"));
  sreq.set_source_volume_id(source.id);
  csi::v1::CreateSnapshotResponse sresp;
  ASSERT_TRUE(Ok(Controller().CreateSnapshot(Deadline().get(), sreq, &sresp)));
  const std::string snapshot = sresp.snapshot().snapshot_id();
  ASSERT_FALSE(snapshot.empty());
  snapshots_.push_back(snapshot);
  EXPECT_TRUE(sresp.snapshot().ready_to_use());
  ASSERT_TRUE(WriteData(source, Target(source), "after the snapshot"));

  csi::v1::VolumeContentSource content;
  content.mutable_snapshot()->set_snapshot_id(snapshot);
  Volume restored = Create(Name("restored"), Fs(), source.capacity, &content);
  ASSERT_FALSE(restored.id.empty());
  // Staged while the source is still mounted (xfs needs distinct UUIDs or nouuid).
  ASSERT_TRUE(Ok(Stage(restored)));
  ASSERT_TRUE(Ok(Publish(restored)));
  EXPECT_EQ(ReadData(restored, Target(restored), 15), "in the snapshot");
  if (!Block()) {
    EXPECT_EQ(FormatsLogged(restored), 0) << "a restored volume is never formatted";
  }
  EXPECT_EQ(ReadData(source, Target(source), 18), "after the snapshot");

  ASSERT_TRUE(Ok(Unpublish(restored)));
  ASSERT_TRUE(Ok(Unstage(restored)));
  ASSERT_TRUE(Ok(Unpublish(source)));
  ASSERT_TRUE(Ok(Unstage(source)));
}

TEST_P(NodeVolumeTest, CloneCarriesTheData) {
  Volume source = Create(Name("clonesrc"), Fs());
  ASSERT_FALSE(source.id.empty());
  ASSERT_TRUE(Ok(Stage(source)));
  ASSERT_TRUE(Ok(Publish(source)));
  ASSERT_TRUE(WriteData(source, Target(source), "cloned bytes"));

  csi::v1::VolumeContentSource content;
  content.mutable_volume()->set_volume_id(source.id);
  Volume clone = Create(Name("clone"), Fs(), source.capacity, &content);
  ASSERT_FALSE(clone.id.empty());
  ASSERT_TRUE(Ok(Stage(clone)));
  ASSERT_TRUE(Ok(Publish(clone)));
  EXPECT_EQ(ReadData(clone, Target(clone), 12), "cloned bytes");
  if (!Block()) {
    EXPECT_EQ(FormatsLogged(clone), 0) << "a clone is never formatted";
  }
  // The two are independent.
  ASSERT_TRUE(WriteData(clone, Target(clone), "clone writes"));
  EXPECT_EQ(ReadData(source, Target(source), 12), "cloned bytes");

  ASSERT_TRUE(Ok(Unpublish(clone)));
  ASSERT_TRUE(Ok(Unstage(clone)));
  ASSERT_TRUE(Ok(Unpublish(source)));
  ASSERT_TRUE(Ok(Unstage(source)));
}

INSTANTIATE_TEST_SUITE_P(AccessTypes, NodeVolumeTest, ::testing::Values("ext4", "xfs", "block"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace blockcsi
