// Whole rollback (issue #15): a NodeStageVolume, NodePublishVolume,
// ControllerPublishVolume or CreateVolume that fails with a final code
// leaves the node, the target and the pool exactly as they were before the
// call — no bridge process, FUSE mount, loop device, iSCSI session, ACL,
// attach record or image. Each failure is caused for real on the real
// plugin (userspace connector, private tgtd): mkfs refuses its options, the
// kernel refuses a mount option, the LUN is not the published one, e2fsck
// cannot repair the filesystem, the LUN does not exist, the device is too
// small for the filesystem, an argument is bad. The shared leak checker
// compares the machine right after the failing call with its state right
// before it, before any cleanup. Failures kubelet treats as uncertain may
// keep state; the one case here that gives one (storage unreachable)
// checks that NodeUnstageVolume then clears it.
//
// Needs root, tgtd, /dev/fuse and loop devices; skips with the reason
// otherwise.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/executor.h"
#include "common/status.h"
#include "contract/publish_context.h"
#include "support/leak_check.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;
using Code = grpc::StatusCode;

constexpr char kNodeId[] = "rollback-node";
constexpr int64_t kSmall = 64LL << 20;

struct Volume {
  std::string id;
  std::map<std::string, std::string> publish_context;
  std::map<std::string, std::string> volume_context;
};

bool Uncertain(Code code) {
  return code == Code::DEADLINE_EXCEEDED || code == Code::ABORTED || code == Code::UNAVAILABLE ||
         code == Code::RESOURCE_EXHAUSTED || code == Code::CANCELLED;
}

class RollbackTest : public ::testing::Test {
 protected:
  struct Env {
    testing::TempDir dir;
    std::unique_ptr<testing::TgtdHarness> tgtd;
    std::unique_ptr<testing::PluginUnderTest> plugin;
    std::string skip, error;
  };
  static inline Env* env_ = nullptr;

  static void SetUpTestSuite() {
    env_ = new Env();
    if (!testing::IsRoot()) {
      env_->skip = "needs root: tgtd, FUSE, loop devices and mount";
      return;
    }
    if (::access("/dev/fuse", R_OK | W_OK) != 0) {
      env_->skip = "needs /dev/fuse";
      return;
    }
    env_->tgtd = testing::TgtdHarness::Start(&env_->error);
    if (!env_->tgtd) return;
    env_->plugin = std::make_unique<testing::PluginUnderTest>(env_->dir.path(), env_->tgtd.get());
    testing::PluginOptions options;
    options.node_id = kNodeId;
    // Short, so that the unreachable-storage case ends in seconds.
    options.extra_args = {"--reconcile-interval", "1h", "--log-level", "debug", "--bridge-io-timeout", "5s"};
    if (!env_->plugin->Start(options, &env_->error)) env_->plugin.reset();
  }

  static void TearDownTestSuite() {
    if (env_->plugin) env_->plugin->Stop();
    testing::CleanUpUnder(env_->dir.path());
    delete env_;
    env_ = nullptr;
  }

  void SetUp() override {
    if (!env_->skip.empty()) GTEST_SKIP() << env_->skip;
    ASSERT_TRUE(env_->tgtd) << "cannot start tgtd: " << env_->error;
    ASSERT_TRUE(env_->plugin) << "plugin did not start: " << env_->error;
    ASSERT_TRUE(Plugin().running()) << "the plugin died in an earlier test:\n" << Plugin().LogTail();
  }

  void TearDown() override {
    if (!env_->plugin || !Plugin().running()) return;
    for (const auto& v : volumes_) {
      (void)Unstage(v);
      csi::v1::ControllerUnpublishVolumeRequest u;
      u.set_volume_id(v.id);
      u.set_node_id(kNodeId);
      csi::v1::ControllerUnpublishVolumeResponse ur;
      (void)Plugin().controller().ControllerUnpublishVolume(testing::Deadline().get(), u, &ur);
      csi::v1::DeleteVolumeRequest d;
      d.set_volume_id(v.id);
      csi::v1::DeleteVolumeResponse dr;
      (void)Plugin().controller().DeleteVolume(testing::Deadline().get(), d, &dr);
    }
  }

  static testing::PluginUnderTest& Plugin() { return *env_->plugin; }

  testing::LeakScope Scope(const std::string& volume_id = "") const {
    testing::LeakScope scope;
    scope.dir = env_->dir.path();
    scope.volume_id = volume_id;
    scope.state_dir = Plugin().state_dir();
    scope.pool_dir = Plugin().pool_dir();
    scope.tgtd = env_->tgtd.get();
    return scope;
  }

  // Created and published to kNodeId as a `fs` ("block" for raw) volume.
  Volume Make(const std::string& name, const std::string& fs, int64_t bytes = kSmall) {
    csi::v1::CreateVolumeRequest req;
    req.set_name(name);
    req.mutable_capacity_range()->set_required_bytes(bytes);
    *req.add_volume_capabilities() = testing::CapabilityFor(fs);
    csi::v1::CreateVolumeResponse resp;
    EXPECT_TRUE(
        testing::GrpcOk(Plugin().controller().CreateVolume(testing::Deadline().get(), req, &resp), Plugin().LogTail()));
    Volume v;
    v.id = resp.volume().volume_id();
    v.volume_context = {resp.volume().volume_context().begin(), resp.volume().volume_context().end()};
    if (v.id.empty()) return v;
    volumes_.push_back(v);
    csi::v1::ControllerPublishVolumeRequest p;
    p.set_volume_id(v.id);
    p.set_node_id(kNodeId);
    *p.mutable_volume_capability() = testing::CapabilityFor(fs);
    csi::v1::ControllerPublishVolumeResponse presp;
    EXPECT_TRUE(testing::GrpcOk(Plugin().controller().ControllerPublishVolume(testing::Deadline().get(), p, &presp),
                                Plugin().LogTail()));
    v.publish_context = {presp.publish_context().begin(), presp.publish_context().end()};
    volumes_.back() = v;
    return v;
  }

  std::string Staging(const Volume& v) const { return Plugin().staging_path(v.id); }

  csi::v1::NodeStageVolumeRequest StageRequest(const Volume& v, const std::string& fs) {
    csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_staging_target_path(Staging(v));
    *req.mutable_volume_capability() = testing::CapabilityFor(fs);
    for (const auto& [k, val] : v.publish_context) (*req.mutable_publish_context())[k] = val;
    for (const auto& [k, val] : v.volume_context) (*req.mutable_volume_context())[k] = val;
    return req;
  }

  grpc::Status Stage(const csi::v1::NodeStageVolumeRequest& req) {
    csi::v1::NodeStageVolumeResponse resp;
    return Plugin().node().NodeStageVolume(testing::Deadline().get(), req, &resp);
  }

  grpc::Status Unstage(const Volume& v) {
    csi::v1::NodeUnstageVolumeRequest req;
    req.set_volume_id(v.id);
    req.set_staging_target_path(Staging(v));
    csi::v1::NodeUnstageVolumeResponse resp;
    return Plugin().node().NodeUnstageVolume(testing::Deadline().get(), req, &resp);
  }

  // Runs `call`, which must fail with a final code, and checks right after
  // it that nothing is left of it. The staging directory is made (as
  // kubelet does) before the "before" snapshot.
  template <typename Call>
  void ExpectFinalFailureLeavesNothing(const std::string& what, const std::string& volume_id, Call call,
                                       const std::string& message_part = "") {
    testing::LeakSnapshot before = testing::TakeLeakSnapshot(Scope(volume_id));
    grpc::Status st = call();
    std::vector<std::string> leaks = testing::NewItemsAfterSettling(before, Scope(volume_id));
    ASSERT_FALSE(st.ok()) << what << " succeeded";
    EXPECT_FALSE(Uncertain(st.error_code()))
        << what << ": want a final code, got " << st.error_code() << ": " << st.error_message();
    if (!volume_id.empty()) {
      EXPECT_NE(st.error_message().find(volume_id), std::string::npos) << st.error_message();
    }
    if (!message_part.empty()) {
      EXPECT_NE(st.error_message().find(message_part), std::string::npos) << st.error_message();
    }
    EXPECT_EQ(st.error_message().find('\n'), std::string::npos) << "not one line: " << st.error_message();
    EXPECT_TRUE(leaks.empty()) << what << " (code " << st.error_code() << ": " << st.error_message()
                               << ") left behind:" << testing::DescribeItems(leaks) << "\nplugin log:\n"
                               << Plugin().LogTail();
  }

  std::vector<Volume> volumes_;
};

TEST_F(RollbackTest, MkfsFailsLeavesNothing) {
  Volume v = Make("rb-mkfs", "ext4");
  ASSERT_FALSE(v.id.empty());
  auto req = StageRequest(v, "ext4");
  // Accepted by the option rules, refused by mke2fs on 64 MiB.
  (*req.mutable_volume_context())["mkfsOptions"] = "-N 100000000";
  std::filesystem::create_directories(Staging(v));
  ExpectFinalFailureLeavesNothing(
      "NodeStageVolume with mkfs failing", v.id, [&] { return Stage(req); }, "too big");
}

TEST_F(RollbackTest, MountFailsLeavesNothing) {
  Volume v = Make("rb-mount", "ext4");
  ASSERT_FALSE(v.id.empty());
  auto req = StageRequest(v, "ext4");
  // Passes the flag rules (commit=<token>), refused by the kernel.
  req.mutable_volume_capability()->mutable_mount()->add_mount_flags("commit=never");
  std::filesystem::create_directories(Staging(v));
  ExpectFinalFailureLeavesNothing("NodeStageVolume with the mount failing", v.id, [&] { return Stage(req); });
}

TEST_F(RollbackTest, IdentityMismatchLeavesNothing) {
  Volume v = Make("rb-identity", "ext4");
  ASSERT_FALSE(v.id.empty());
  auto req = StageRequest(v, "ext4");
  (*req.mutable_publish_context())[publish_context::kSerial] = "not-this-volumes-serial";
  req.mutable_publish_context()->erase(publish_context::kWwn);
  std::filesystem::create_directories(Staging(v));
  ExpectFinalFailureLeavesNothing("NodeStageVolume of the wrong LUN", v.id, [&] { return Stage(req); });
}

TEST_F(RollbackTest, DeviceNeverAppearsLeavesNothing) {
  Volume v = Make("rb-nolun", "ext4");
  ASSERT_FALSE(v.id.empty());
  auto req = StageRequest(v, "ext4");
  (*req.mutable_publish_context())[publish_context::kLun] = "7";  // no such LUN on the target
  std::filesystem::create_directories(Staging(v));
  ExpectFinalFailureLeavesNothing("NodeStageVolume of a LUN that is not there", v.id, [&] { return Stage(req); });
}

TEST_F(RollbackTest, DeviceTooSmallForTheFilesystemLeavesNothing) {
  // A 64 MiB volume made for ext4, staged as xfs (as a static PV could ask).
  Volume v = Make("rb-small", "ext4");
  ASSERT_FALSE(v.id.empty());
  auto req = StageRequest(v, "xfs");
  req.mutable_volume_context()->erase("fsType");
  std::filesystem::create_directories(Staging(v));
  ExpectFinalFailureLeavesNothing(
      "NodeStageVolume of a too small device", v.id, [&] { return Stage(req); }, "too small for xfs");
}

TEST_F(RollbackTest, FsckFailsLeavesNothing) {
  Volume v = Make("rb-fsck", "ext4");
  ASSERT_FALSE(v.id.empty());
  std::filesystem::create_directories(Staging(v));
  ASSERT_TRUE(testing::GrpcOk(Stage(StageRequest(v, "ext4")), Plugin().LogTail()));
  ASSERT_TRUE(testing::GrpcOk(Unstage(v), Plugin().LogTail()));
  // Damage e2fsck -p will not repair unattended: the root inode cleared and
  // the superblock marked as having errors.
  const std::string image = Plugin().pool_dir() + "/images/" + v.id + ".img";
  auto exec = MakeProcessExecutor();
  auto damaged = RunChecked(*exec, Command("debugfs").Arg("-w").Arg("-R").Arg("clri <2>").Arg(image));
  ASSERT_TRUE(damaged.ok()) << damaged.status().ToString();
  auto marked = RunChecked(*exec, Command("debugfs").Arg("-w").Arg("-R").Arg("ssv state 2").Arg(image));
  ASSERT_TRUE(marked.ok()) << marked.status().ToString();
  std::filesystem::create_directories(Staging(v));
  ExpectFinalFailureLeavesNothing(
      "NodeStageVolume of a filesystem e2fsck cannot fix", v.id, [&] { return Stage(StageRequest(v, "ext4")); },
      "e2fsck");
}

TEST_F(RollbackTest, PublishFailsLeavesNothing) {
  Volume v = Make("rb-publish", "block");
  ASSERT_FALSE(v.id.empty());
  std::filesystem::create_directories(Staging(v));
  ASSERT_TRUE(testing::GrpcOk(Stage(StageRequest(v, "block")), Plugin().LogTail()));
  // The target's parent is a file: the bind target cannot be made.
  const std::string blocker = env_->dir.Join("pods-file");
  { std::ofstream(blocker) << "x"; }
  csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id(v.id);
  req.set_staging_target_path(Staging(v));
  req.set_target_path(blocker + "/dev");
  req.set_readonly(true);  // would add a read-only loop layer first
  *req.mutable_volume_capability() = testing::CapabilityFor("block");
  ExpectFinalFailureLeavesNothing("NodePublishVolume to an impossible target", "", [&] {
    csi::v1::NodePublishVolumeResponse resp;
    return Plugin().node().NodePublishVolume(testing::Deadline().get(), req, &resp);
  });
  ASSERT_TRUE(testing::GrpcOk(Unstage(v), Plugin().LogTail()));
}

TEST_F(RollbackTest, ControllerPublishToUnknownNodeLeavesNothing) {
  Volume v = Make("rb-cpublish", "ext4");
  ASSERT_FALSE(v.id.empty());
  csi::v1::ControllerPublishVolumeRequest req;
  req.set_volume_id(v.id);
  req.set_node_id("no-such-node");
  *req.mutable_volume_capability() = testing::CapabilityFor("ext4");
  ExpectFinalFailureLeavesNothing("ControllerPublishVolume to an unknown node", v.id, [&] {
    csi::v1::ControllerPublishVolumeResponse resp;
    return Plugin().controller().ControllerPublishVolume(testing::Deadline().get(), req, &resp);
  });
}

TEST_F(RollbackTest, CreateVolumeRefusedLeavesNothing) {
  for (const auto& [param, value] : std::map<std::string, std::string>{{"mkfsOptions", "-F; touch /x"}}) {
    csi::v1::CreateVolumeRequest req;
    req.set_name("rb-create-" + param);
    req.mutable_capacity_range()->set_required_bytes(kSmall);
    (*req.mutable_parameters())[param] = value;
    *req.add_volume_capabilities() = testing::CapabilityFor("ext4");
    ExpectFinalFailureLeavesNothing(
        "CreateVolume with " + param + "=" + value, "",
        [&] {
          csi::v1::CreateVolumeResponse resp;
          return Plugin().controller().CreateVolume(testing::Deadline().get(), req, &resp);
        },
        "-F;");
  }
  // Below the filesystem's minimum and not allowed to grow to it.
  csi::v1::CreateVolumeRequest req;
  req.set_name("rb-create-xfs-small");
  req.mutable_capacity_range()->set_required_bytes(kSmall);
  req.mutable_capacity_range()->set_limit_bytes(kSmall);
  *req.add_volume_capabilities() = testing::CapabilityFor("xfs");
  ExpectFinalFailureLeavesNothing(
      "CreateVolume of a too small xfs volume", "",
      [&] {
        csi::v1::CreateVolumeResponse resp;
        return Plugin().controller().CreateVolume(testing::Deadline().get(), req, &resp);
      },
      "xfs needs at least");
}

// The storage stops answering between the attach and mkfs (the plugin is
// paused at its "node.stage.after-attach" fault point while the test stops tgtd): mkfs
// gets I/O errors once the bridge's I/O timeout (5 s here) passes, which is
// a final failure, so the stage must take its bridge, loop device, FUSE
// mount and record down again although the storage is unreachable.
TEST_F(RollbackTest, IoTimeoutDuringMkfsLeavesNothing) {
  Volume v = Make("rb-iotimeout", "ext4");
  ASSERT_FALSE(v.id.empty());
  std::filesystem::create_directories(Staging(v));
  const std::string pause_dir = env_->dir.Join("pause");
  std::filesystem::create_directories(pause_dir);
  testing::PluginOptions options;
  options.node_id = kNodeId;
  options.extra_args = {"--reconcile-interval", "1h", "--log-level", "debug", "--bridge-io-timeout", "5s"};
  options.env = {{"BLOCKCSI_FAULT_PAUSE", "node.stage.after-attach"}, {"BLOCKCSI_FAULT_PAUSE_DIR", pause_dir}};
  std::string error;
  ASSERT_TRUE(Plugin().Start(options, &error)) << error;

  testing::LeakScope node_side = Scope(v.id);
  node_side.tgtd = nullptr;  // tgtadm cannot answer while tgtd is stopped
  testing::LeakSnapshot before = testing::TakeLeakSnapshot(node_side);
  testing::LeakSnapshot before_target = testing::TakeLeakSnapshot(Scope(v.id));
  grpc::Status st;
  std::thread stage([&] { st = Stage(StageRequest(v, "ext4")); });
  const std::string marker = pause_dir + "/node.stage.after-attach";
  for (int i = 0; i < 600 && !std::filesystem::exists(marker); ++i) std::this_thread::sleep_for(100ms);
  bool paused = std::filesystem::exists(marker);
  if (paused) {
    EXPECT_EQ(::kill(env_->tgtd->pid(), SIGSTOP), 0);  // SIGCONT below whatever happens
  }
  std::filesystem::remove(marker);
  stage.join();
  std::vector<std::string> leaks = testing::NewItemsAfterSettling(before, node_side);
  ::kill(env_->tgtd->pid(), SIGCONT);
  ASSERT_TRUE(paused) << "the plugin never reached node.stage.after-attach: " << st.error_message() << "\n"
                      << Plugin().LogTail();
  std::cout << "stage with tgtd stopped after the attach: code " << st.error_code() << ": " << st.error_message()
            << "\n";
  ASSERT_FALSE(st.ok());
  if (Uncertain(st.error_code())) {
    ASSERT_TRUE(testing::GrpcOk(Unstage(v), Plugin().LogTail()));
    leaks = testing::NewItemsAfterSettling(before, node_side);
  }
  EXPECT_TRUE(leaks.empty()) << "left on the node (code " << st.error_code() << "):" << testing::DescribeItems(leaks)
                             << "\nplugin log:\n"
                             << Plugin().LogTail();
  // tgtd drops the dead session once it runs again and sees the closed connection.
  std::vector<std::string> target_leaks;
  for (int i = 0; i < 100; ++i) {
    target_leaks = testing::NewItems(before_target, testing::TakeLeakSnapshot(Scope(v.id)));
    if (target_leaks.empty()) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(target_leaks.empty()) << "left:" << testing::DescribeItems(target_leaks);

  options.env.clear();  // the rest of the suite runs unpaused
  ASSERT_TRUE(Plugin().Start(options, &error)) << error;
}

// Storage unreachable (tgtd stopped) during the stage: an uncertain code may
// keep state, which NodeUnstageVolume must then clear completely; a final
// code must leave nothing at once.
TEST_F(RollbackTest, StorageUnreachableEitherLeavesNothingOrUnstageClears) {
  Volume v = Make("rb-io", "ext4");
  ASSERT_FALSE(v.id.empty());
  std::filesystem::create_directories(Staging(v));
  testing::LeakSnapshot before = testing::TakeLeakSnapshot(Scope(v.id));
  ASSERT_EQ(::kill(env_->tgtd->pid(), SIGSTOP), 0);
  grpc::Status st = Stage(StageRequest(v, "ext4"));
  ::kill(env_->tgtd->pid(), SIGCONT);
  ASSERT_FALSE(st.ok()) << "staged with the storage stopped";
  std::cout << "stage with tgtd stopped: code " << st.error_code() << ": " << st.error_message() << "\n";
  std::vector<std::string> leaks = testing::NewItemsAfterSettling(before, Scope(v.id));
  if (!Uncertain(st.error_code())) {
    EXPECT_TRUE(leaks.empty()) << "final code " << st.error_code() << " left:" << testing::DescribeItems(leaks);
    return;
  }
  ASSERT_TRUE(testing::GrpcOk(Unstage(v), Plugin().LogTail()));
  leaks = testing::NewItemsAfterSettling(before, Scope(v.id));
  EXPECT_TRUE(leaks.empty()) << "NodeUnstageVolume after an uncertain failure left:" << testing::DescribeItems(leaks);
}

}  // namespace
}  // namespace blockcsi
