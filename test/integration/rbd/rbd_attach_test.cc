// The userspace connector's RBD transport for real: a single-node Ceph
// (hack/ceph-cluster.sh, or the one ctest's rbd_cluster fixture started),
// volumes made and published by the real RbdBackend, and attachments made by
// MakeVolumeAttacher(connector "userspace") running <build>/bin/blockcsi as
// the bridge (librbd → FUSE → loop device). Needs root, the ceph packages,
// /dev/fuse and loop devices; skipped with the reason otherwise.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attach/attacher_factory.h"
#include "attach/userspace_connector.h"
#include "backend/rbd/rbd_backend.h"
#include "bridge/bridge_protocol.h"
#include "common/atomic_file.h"
#include "common/executor.h"
#include "common/host.h"
#include "common/mounter.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "support/block_io.h"
#include "support/ceph_client.h"
#include "support/ceph_test_cluster.h"
#include "support/leak_check.h"
#include "support/rbd_backend_env.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using ::blockcsi::testing::BinDir;
using ::blockcsi::testing::ChildProcess;
using ::blockcsi::testing::IsRoot;
using ::blockcsi::testing::Pattern;
using ::blockcsi::testing::ReadDirect;
using ::blockcsi::testing::ReadFileOrEmpty;
using ::blockcsi::testing::RunProgram;
using ::blockcsi::testing::TempDir;
using ::blockcsi::testing::WriteDirect;

constexpr uint64_t kMiB = 1ULL << 20;

// One "node": its own state dir and attacher (= its own bridges).
struct Node {
  std::string id;
  std::unique_ptr<TempDir> dir;
  std::string state_dir;
  std::unique_ptr<VolumeAttacher> attacher;
  testing::LeakSnapshot baseline;  // when the node was made
};

class RbdAttachTest : public testing::CephSuiteTest {
 protected:
  static void SetUpTestSuite() { AcquireCluster(Needs::kCephAndBridge); }

  void SetUp() override {
    CephSuiteTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    binary_ = BinDir() + "/blockcsi-bridge";
    ASSERT_TRUE(std::filesystem::exists(binary_)) << binary_ << " not built";
    auto backend = MakeRbdBackend(testing::RbdBackendOptionsFor(env_));
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = *backend;
    key_ = testing::KeyFromKeyring(env_["BLOCKCSI_CEPH_KEYRING"]);
    ASSERT_FALSE(key_.empty()) << "no key in " << env_["BLOCKCSI_CEPH_KEYRING"];
    // An admin's view of the images, to check what the node left on them.
    admin_ = std::make_unique<testing::CephClient>(env_["CEPH_CONF"], "admin", env_["CEPH_KEYRING"], env_["RBD_POOL"]);
    ASSERT_EQ(admin_->error(), 0) << "admin client cannot connect";
  }

  void TearDown() override {
    // Detach what the test left attached, then remove anything that
    // survived that (a failed test): bridges by pid, loop devices and mounts
    // by name, all under this test's state dirs only.
    for (auto& node : nodes_) {
      if (!node->attacher) continue;
      auto records = node->attacher->List();
      if (records.ok()) {
        for (const auto& r : *records) {
          Status st = node->attacher->Detach(r.volume_id);
          EXPECT_TRUE(st.ok()) << "detach in teardown: " << st.ToString();
        }
      }
    }
    // The detaches above are the normal path (what a CO's teardown does):
    // after a passing test they must leave nothing, checked before the
    // forced cleanup below could hide it.
    if (!HasFailure()) {
      for (auto& node : nodes_) ExpectNothingLeft(*node);
    }
    for (auto& node : nodes_) CleanUp(*node);
    // After a failure: the forced cleanup itself must have worked.
    if (HasFailure()) {
      for (auto& node : nodes_) ExpectNothingLeft(*node);
    }
    if (backend_ != nullptr) {
      for (auto it = volumes_.rbegin(); it != volumes_.rend(); ++it) {
        auto record = backend_->GetVolume(*it);
        if (record.ok()) {
          for (const auto& g : record->grants) (void)backend_->RevokeAccess(*it, g.initiator_iqn);
        }
        Status st = backend_->DeleteVolume(*it);
        EXPECT_TRUE(st.ok()) << st.ToString();
      }
    }
    nodes_.clear();
  }

  static std::vector<int> BridgePids(const Node& node) {
    std::vector<int> out;
    auto fs = MachineHost();
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(node.state_dir + "/bridges", ec)) {
      for (int pid : FindBridgePids(*fs, e.path().string() + "/ctl.sock")) out.push_back(pid);
    }
    return out;
  }
  // The shared checker's list (stacked ones first, those whose FUSE file
  // is gone too).
  static std::vector<std::string> LoopDevices(const Node& node) {
    std::vector<std::string> out;
    for (const auto& [device, backing] : testing::LoopDevicesBackedUnder(node.state_dir)) out.push_back(device);
    return out;
  }
  static std::vector<std::string> Mounts(const Node& node) {
    std::vector<std::string> out;
    auto text = ReadFileToString("/proc/self/mountinfo");
    if (!text.ok()) return out;
    for (const auto& e : ParseMountInfo(*text)) {
      if (e.target.starts_with(node.state_dir)) out.push_back(e.target);
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  static void CleanUp(const Node& node) {
    for (int pid : BridgePids(node)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, WNOHANG);
    }
    for (const auto& loop : LoopDevices(node)) RunProgram({"losetup", "-d", loop});
    for (const auto& m : Mounts(node)) ::umount2(m.c_str(), MNT_DETACH);
  }
  static testing::LeakScope Scope(const Node& node) {
    testing::LeakScope scope;
    scope.dir = node.dir->path();
    scope.state_dir = node.state_dir;
    return scope;
  }
  // The one leak checker: bridges, FUSE mounts, loop devices, attach
  // records of the node since it was made.
  static void ExpectNothingLeft(const Node& node) {
    auto left = testing::NewItemsAfterSettling(node.baseline, Scope(node));
    EXPECT_TRUE(left.empty()) << node.id << " left behind:" << testing::DescribeItems(left);
    EXPECT_TRUE(BridgePids(node).empty()) << node.id << ": bridge processes left";
  }

  Node& NewNode(const std::string& id, std::chrono::milliseconds io_timeout = std::chrono::seconds(30)) {
    auto node = std::make_unique<Node>();
    node->id = id;
    node->dir = std::make_unique<TempDir>();
    node->state_dir = node->dir->Join("state");
    node->baseline = testing::TakeLeakSnapshot(Scope(*node));
    AttacherOptions o;
    o.connector = "userspace";
    o.state_dir = node->state_dir;
    o.node_id = id;
    o.bridge_dir = BinDir();
    o.bridge_io_timeout = io_timeout;
    o.host_fs = MachineHost();
    o.state_files = MachineHost();
    auto attacher = MakeVolumeAttacher(o);
    EXPECT_TRUE(attacher.ok()) << attacher.status().ToString();
    if (attacher.ok()) node->attacher = std::move(*attacher);
    nodes_.push_back(std::move(node));
    return *nodes_.back();
  }

  std::string Unique(const std::string& what) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return std::string(info->name()) + "-" + what + "-" + std::to_string(::getpid());
  }

  StatusOr<VolumeRecord> Create(const std::string& what, uint64_t size) {
    CreateVolumeSpec spec;
    spec.name = Unique(what);
    spec.size_bytes = size;
    spec.parameters = {{"fsType", "ext4"}};
    auto record = backend_->CreateVolume(spec);
    if (record.ok()) volumes_.push_back(record->id);
    return record;
  }

  // GrantAccess for `node`; its transport_params are the publish_context.
  std::map<std::string, std::string> Publish(const std::string& volume_id, const std::string& node,
                                             const std::string& capability = "SINGLE_NODE_WRITER/block") {
    AccessGrant grant;
    grant.node_id = node;
    grant.initiator_iqn = InitiatorIqnForNode(node);
    grant.capability = capability;
    auto record = backend_->GrantAccess(volume_id, grant);
    EXPECT_TRUE(record.ok()) << record.status().ToString();
    if (!record.ok()) return {};
    auto context = record->transport_params;
    context[publish_context::kTransport] = record->transport;
    return context;
  }

  std::map<std::string, std::string> Secrets() const {
    return {{secret_keys::kCephUserId, env_.at("BLOCKCSI_CEPH_USER")}, {secret_keys::kCephUserKey, key_}};
  }

  AttachSpec SpecFor(const std::string& volume_id, const std::map<std::string, std::string>& context,
                     const std::string& node, std::map<std::string, std::string> secrets = {}) {
    if (secrets.empty()) secrets = Secrets();
    auto spec = ParseAttachSpec(volume_id, context, secrets, InitiatorIqnForNode(node));
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    return spec.ok() ? *spec : AttachSpec{};
  }

  static uint64_t DeviceSize(const std::string& device) {
    std::string out;
    if (RunProgram({"blockdev", "--getsize64", device}, &out) != 0) return 0;
    return std::stoull(out);
  }

  static std::string ImageOf(const std::map<std::string, std::string>& context) {
    return context.at(publish_context::kRbdImage);
  }

  // What most tests open with: a volume created, published to a new node
  // and attached there.
  struct Attached {
    std::optional<VolumeRecord> volume;
    std::map<std::string, std::string> context;  // the publish_context
    std::optional<AttachRecord> record;
    Node* node = nullptr;
  };
  // Fatal failures end the caller: wrap in ASSERT_NO_FATAL_FAILURE.
  void CreateAndAttach(uint64_t size, const std::string& node_id, Attached* out) {
    auto volume = Create("vol", size);
    ASSERT_TRUE(volume.ok()) << volume.status().ToString();
    out->volume = *volume;
    out->context = Publish(volume->id, node_id);
    out->node = &NewNode(node_id);
    ASSERT_TRUE(out->node->attacher);
    auto record = out->node->attacher->Attach(SpecFor(volume->id, out->context, node_id));
    ASSERT_TRUE(record.ok()) << record.status().ToString();
    out->record = *record;
  }
  // CreateAndAttach, then 64 KiB of Pattern(fill) written at `offset` of
  // the device: `*data`. Fatal failures end the caller, as there.
  void CreateAttachAndWrite(uint64_t size, const std::string& node_id, uint64_t offset, char fill, Attached* out,
                            std::string* data) {
    ASSERT_NO_FATAL_FAILURE(CreateAndAttach(size, node_id, out));
    *data = Pattern(64 * 1024, fill);
    ASSERT_EQ(WriteDirect(out->record->device_path, offset, *data), 0);
  }
  // The node's NodeUnstage: detached, and nothing of it left. A failed
  // detach is fatal to the caller: wrap in ASSERT_NO_FATAL_FAILURE.
  static void DetachLeavingNothing(const Node& node, const std::string& volume_id) {
    ASSERT_TRUE(node.attacher->Detach(volume_id).ok());
    ExpectNothingLeft(node);
  }

  std::string binary_;
  std::shared_ptr<VolumeBackend> backend_;
  std::unique_ptr<testing::CephClient> admin_;
  std::string key_;
  std::vector<std::string> volumes_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST_F(RbdAttachTest, AttachWriteReadDetachReattachKeepsTheBytes) {
  Attached attached;
  ASSERT_NO_FATAL_FAILURE(CreateAndAttach(64 * kMiB, "node-a", &attached));
  auto& [volume, context, record, node_ptr] = attached;
  Node& node = *node_ptr;

  EXPECT_EQ(record->state, "attached");
  EXPECT_EQ(record->transport, "rbd");
  EXPECT_EQ(record->connector, "userspace");
  EXPECT_EQ(record->expected_serial, context.at(publish_context::kRbdImageId));
  EXPECT_TRUE(record->device_path.starts_with("/dev/loop")) << record->device_path;
  EXPECT_EQ(record->size_bytes, 64 * kMiB);
  EXPECT_EQ(DeviceSize(record->device_path), 64 * kMiB);
  EXPECT_FALSE(node.attacher->Check(volume->id).abnormal) << node.attacher->Check(volume->id).message;

  // The bridge registered its rados client for fencing, and that client is
  // the one watching (and locking) the image.
  std::string client = admin_->Metadata(ImageOf(context), "blockcsi.client.node-a").value_or("");
  ASSERT_FALSE(client.empty()) << "no blockcsi.client.node-a metadata";
  auto watchers = admin_->Watchers(ImageOf(context));
  EXPECT_NE(std::find(watchers.begin(), watchers.end(), client), watchers.end()) << client;
  EXPECT_EQ(admin_->LockOwners(ImageOf(context)), std::vector<std::string>{client});

  std::string data = Pattern(kMiB + 8192, 'a');
  ASSERT_EQ(WriteDirect(record->device_path, 3 * kMiB, data), 0);
  EXPECT_EQ(ReadDirect(record->device_path, 3 * kMiB, data.size()), data);
  // An unaligned reader of the FUSE file sees the same bytes.
  std::string lun_file = record->connector_state.at("mountpoint") + "/lun";
  EXPECT_EQ(ReadFileOrEmpty(lun_file).substr(3 * kMiB + 5, 100), data.substr(5, 100));

  ASSERT_NO_FATAL_FAILURE(DetachLeavingNothing(node, volume->id));
  EXPECT_EQ(node.attacher->Get(volume->id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(admin_->Metadata(ImageOf(context), "blockcsi.client.node-a"), std::nullopt) << "registration left";
  EXPECT_TRUE(admin_->LockOwners(ImageOf(context)).empty()) << "exclusive lock still held";

  auto again = node.attacher->Attach(SpecFor(volume->id, context, "node-a"));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ReadDirect(again->device_path, 3 * kMiB, data.size()), data);
  ASSERT_NO_FATAL_FAILURE(DetachLeavingNothing(node, volume->id));
}

TEST_F(RbdAttachTest, WrongImageIdIsRefusedAndLeavesNothing) {
  auto volume = Create("vol", 16 * kMiB);
  ASSERT_TRUE(volume.ok()) << volume.status().ToString();
  auto context = Publish(volume->id, "node-a");
  const std::string real_id = context.at(publish_context::kRbdImageId);
  context[publish_context::kRbdImageId] = "0badc0ffee00";
  Node& node = NewNode("node-a");
  ASSERT_TRUE(node.attacher);

  auto record = node.attacher->Attach(SpecFor(volume->id, context, "node-a"));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kFailedPrecondition) << record.status().ToString();
  EXPECT_NE(record.status().message().find(volume->id), std::string::npos) << record.status().message();
  EXPECT_NE(record.status().message().find(real_id), std::string::npos) << record.status().message();
  EXPECT_NE(record.status().message().find("0badc0ffee00"), std::string::npos) << record.status().message();
  EXPECT_EQ(node.attacher->Get(volume->id).status().code(), StatusCode::kNotFound) << "record left";
  ExpectNothingLeft(node);
  // The wrong image was never locked nor registered on.
  EXPECT_TRUE(admin_->LockOwners(ImageOf(context)).empty());
  EXPECT_EQ(admin_->Metadata(ImageOf(context), "blockcsi.client.node-a"), std::nullopt);
}

TEST_F(RbdAttachTest, KeyIsNeverInArgvRecordRepliesOrLogs) {
  auto volume = Create("vol", 16 * kMiB);
  ASSERT_TRUE(volume.ok()) << volume.status().ToString();
  auto context = Publish(volume->id, "node-a");
  Node& node = NewNode("node-a");
  ASSERT_TRUE(node.attacher);

  // Everything this process and its bridges log goes to stderr: capture it.
  const std::string log_path = node.dir->Join("stderr.log");
  int saved = ::dup(STDERR_FILENO);
  int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(log_fd, 0);
  ::dup2(log_fd, STDERR_FILENO);
  ::close(log_fd);
  auto record = node.attacher->Attach(SpecFor(volume->id, context, "node-a"));
  auto check = node.attacher->Check(volume->id);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_FALSE(check.abnormal) << check.message;

  int pid = std::stoi(record->connector_state.at("bridge_pid"));
  std::string cmdline = ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/cmdline");
  ASSERT_NE(cmdline.find("bridge"), std::string::npos) << "pid " << pid << " is not the bridge";
  EXPECT_NE(cmdline.find(context.at(publish_context::kRbdImage)), std::string::npos);
  EXPECT_EQ(cmdline.find(key_), std::string::npos) << "cephx key in the bridge's argv";

  std::error_code ec;
  int files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(node.state_dir + "/attachments", ec)) {
    if (!e.is_regular_file()) continue;
    ++files;
    EXPECT_EQ(ReadFileOrEmpty(e.path().string()).find(key_), std::string::npos) << "key in " << e.path();
  }
  EXPECT_GT(files, 0) << "no record file";

  auto reply = CallBridge(record->connector_state.at("control_socket"), {{"op", "status"}}, std::chrono::seconds(10));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->dump().find(key_), std::string::npos) << "key in the status reply";

  std::string log = ReadFileOrEmpty(log_path);
  EXPECT_NE(log.find("bridge opened rbd image"), std::string::npos) << "the bridge's log was not captured:\n" << log;
  EXPECT_EQ(log.find(key_), std::string::npos) << "cephx key in the log";
}

TEST_F(RbdAttachTest, ResizeThenRescanGrowsTheLoopDevice) {
  Attached attached;
  ASSERT_NO_FATAL_FAILURE(CreateAndAttach(32 * kMiB, "node-a", &attached));
  auto& [volume, context, record, node_ptr] = attached;
  Node& node = *node_ptr;
  EXPECT_EQ(DeviceSize(record->device_path), 32 * kMiB);
  // Past the old end: nothing there yet.
  EXPECT_NE(WriteDirect(record->device_path, 40 * kMiB, Pattern(4096, 'z')), 0);

  auto grown = backend_->ExpandVolume(volume->id, 64 * kMiB);
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  auto size = node.attacher->Rescan(volume->id);
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, 64 * kMiB);
  EXPECT_EQ(DeviceSize(record->device_path), 64 * kMiB);
  auto after = node.attacher->Get(volume->id);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->size_bytes, 64 * kMiB);

  std::string data = Pattern(kMiB, 'g');
  ASSERT_EQ(WriteDirect(record->device_path, 60 * kMiB, data), 0);
  EXPECT_EQ(ReadDirect(record->device_path, 60 * kMiB, data.size()), data);
}

TEST_F(RbdAttachTest, FencedNodeGetsIoErrorsAndAnotherNodeTakesOver) {
  Attached attached;
  ASSERT_NO_FATAL_FAILURE(CreateAndAttach(32 * kMiB, "node-a", &attached));
  auto& [volume, context_a, record_a, a_ptr] = attached;
  Node& a = *a_ptr;
  std::string before = Pattern(kMiB, 'f');
  ASSERT_EQ(WriteDirect(record_a->device_path, 2 * kMiB, before), 0);

  // The controller takes the volume away from node-a: its client is
  // blocklisted and its lock broken.
  ASSERT_TRUE(backend_->RevokeAccess(volume->id, InitiatorIqnForNode("node-a")).ok());
  // The OSDs learn of the blocklist from the next osdmap; keep writing until
  // they refuse (bounded, not a timing assertion).
  int err = 0;
  for (int i = 0; i < 60 && err == 0; ++i) {
    err = WriteDirect(record_a->device_path, 8 * kMiB, Pattern(64 * 1024, 'x'));
    if (err == 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_EQ(err, EIO) << std::strerror(err);
  AttachHealth health = a.attacher->Check(volume->id);
  EXPECT_TRUE(health.abnormal);
  EXPECT_NE(health.message.find("blocklisted (fenced)"), std::string::npos) << health.message;

  // Node-b, published now, attaches with a client of its own and sees what
  // node-a wrote before the fence.
  auto context_b = Publish(volume->id, "node-b");
  Node& b = NewNode("node-b");
  ASSERT_TRUE(b.attacher);
  auto record_b = b.attacher->Attach(SpecFor(volume->id, context_b, "node-b"));
  ASSERT_TRUE(record_b.ok()) << record_b.status().ToString();
  EXPECT_EQ(ReadDirect(record_b->device_path, 2 * kMiB, before.size()), before);
  EXPECT_EQ(WriteDirect(record_b->device_path, 8 * kMiB, Pattern(64 * 1024, 'y')), 0);
  EXPECT_FALSE(b.attacher->Check(volume->id).abnormal) << b.attacher->Check(volume->id).message;

  // The fenced attachment still detaches cleanly (NodeUnstage on node-a).
  EXPECT_TRUE(a.attacher->Detach(volume->id).ok());
  ExpectNothingLeft(a);
  EXPECT_TRUE(b.attacher->Detach(volume->id).ok());
  ExpectNothingLeft(b);
}

TEST_F(RbdAttachTest, IdleFencedAttachmentIsReportedAndReplacedOnReattach) {
  Attached attached;
  std::string data;
  ASSERT_NO_FATAL_FAILURE(CreateAttachAndWrite(16 * kMiB, "node-a", 0, 'i', &attached, &data));
  auto& [volume, context, first, node_ptr] = attached;
  Node& node = *node_ptr;

  ASSERT_TRUE(backend_->RevokeAccess(volume->id, InitiatorIqnForNode("node-a")).ok());
  // No I/O at all: the bridge's own probe must notice the fence (bounded wait).
  AttachHealth health;
  for (int i = 0; i < 120 && !health.abnormal; ++i) {
    health = node.attacher->Check(volume->id);
    if (!health.abnormal) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_TRUE(health.abnormal) << "an idle fenced attachment still looks healthy";
  EXPECT_NE(health.message.find("blocklisted (fenced)"), std::string::npos) << health.message;

  // Published to the same node again (a new VolumeAttachment): the retry
  // replaces the fenced bridge with a fresh client instead of reusing it.
  auto again_context = Publish(volume->id, "node-a");
  auto second = node.attacher->Attach(SpecFor(volume->id, again_context, "node-a"));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_NE(second->connector_state.at("bridge_pid"), first->connector_state.at("bridge_pid"));
  EXPECT_FALSE(node.attacher->Check(volume->id).abnormal) << node.attacher->Check(volume->id).message;
  EXPECT_EQ(ReadDirect(second->device_path, 0, data.size()), data);
  EXPECT_EQ(WriteDirect(second->device_path, kMiB, data), 0);
}

TEST_F(RbdAttachTest, SecondWriterIsRefusedWhileTheFirstHoldsTheLock) {
  auto volume = Create("vol", 16 * kMiB);
  ASSERT_TRUE(volume.ok()) << volume.status().ToString();
  // Published to both (a multi-writer capability, so the backend allows it):
  // the exclusive lock alone must keep the second writer out.
  auto context_a = Publish(volume->id, "node-a", "MULTI_NODE_MULTI_WRITER/block");
  auto context_b = Publish(volume->id, "node-b", "MULTI_NODE_MULTI_WRITER/block");
  Node& a = NewNode("node-a");
  Node& b = NewNode("node-b");
  ASSERT_TRUE(a.attacher && b.attacher);
  auto record_a = a.attacher->Attach(SpecFor(volume->id, context_a, "node-a"));
  ASSERT_TRUE(record_a.ok()) << record_a.status().ToString();
  std::string holder = admin_->Metadata(ImageOf(context_a), "blockcsi.client.node-a").value_or("");

  auto record_b = b.attacher->Attach(SpecFor(volume->id, context_b, "node-b"));
  ASSERT_FALSE(record_b.ok()) << "two writers hold " << volume->id;
  EXPECT_TRUE(record_b.status().code() == StatusCode::kFailedPrecondition ||
              record_b.status().code() == StatusCode::kUnavailable)
      << record_b.status().ToString();
  EXPECT_NE(record_b.status().message().find(volume->id), std::string::npos) << record_b.status().message();
  EXPECT_NE(record_b.status().message().find("locked"), std::string::npos) << record_b.status().message();
  if (!holder.empty()) {
    EXPECT_NE(record_b.status().message().find(holder), std::string::npos) << record_b.status().message();
  }
  EXPECT_EQ(b.attacher->Get(volume->id).status().code(), StatusCode::kNotFound);
  ExpectNothingLeft(b);
  EXPECT_EQ(admin_->Metadata(ImageOf(context_a), "blockcsi.client.node-b"), std::nullopt);

  // The first writer is untouched.
  EXPECT_EQ(WriteDirect(record_a->device_path, 0, Pattern(4096, 'q')), 0);
  EXPECT_FALSE(a.attacher->Check(volume->id).abnormal);
  EXPECT_EQ(admin_->LockOwners(ImageOf(context_a)), std::vector<std::string>{holder});
}

TEST_F(RbdAttachTest, ReadOnlyAttachmentReadsButNeverWritesOrLocks) {
  Attached attached;
  std::string data;
  ASSERT_NO_FATAL_FAILURE(CreateAttachAndWrite(16 * kMiB, "node-a", kMiB, 'r', &attached, &data));
  auto& [volume, context, record, writer_ptr] = attached;
  Node& writer = *writer_ptr;
  ASSERT_TRUE(writer.attacher->Detach(volume->id).ok());
  ASSERT_TRUE(backend_->RevokeAccess(volume->id, InitiatorIqnForNode("node-a")).ok());

  AccessGrant grant;
  grant.node_id = "node-b";
  grant.initiator_iqn = InitiatorIqnForNode("node-b");
  grant.capability = "SINGLE_NODE_READER_ONLY/block";
  grant.read_only = true;
  auto published = backend_->GrantAccess(volume->id, grant);
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  auto ro_context = published->transport_params;
  ro_context[publish_context::kTransport] = "rbd";
  ro_context[publish_context::kReadOnly] = "true";
  Node& reader = NewNode("node-b");
  ASSERT_TRUE(reader.attacher);
  auto ro = reader.attacher->Attach(SpecFor(volume->id, ro_context, "node-b"));
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  EXPECT_TRUE(ro->read_only);
  EXPECT_EQ(ReadDirect(ro->device_path, kMiB, data.size()), data);
  EXPECT_NE(WriteDirect(ro->device_path, kMiB, Pattern(4096, 'w')), 0) << "a read-only attachment wrote";
  EXPECT_EQ(ReadDirect(ro->device_path, kMiB, data.size()), data);
  EXPECT_TRUE(admin_->LockOwners(ImageOf(ro_context)).empty()) << "a reader took the exclusive lock";
  EXPECT_FALSE(reader.attacher->Check(volume->id).abnormal) << reader.attacher->Check(volume->id).message;
  ASSERT_NO_FATAL_FAILURE(DetachLeavingNothing(reader, volume->id));
}

TEST_F(RbdAttachTest, ErrorsCarryTheirCodeAndNameTheVolume) {
  auto volume = Create("vol", 16 * kMiB);
  ASSERT_TRUE(volume.ok()) << volume.status().ToString();
  auto context = Publish(volume->id, "node-a");
  Node& node = NewNode("node-a", std::chrono::seconds(3));
  ASSERT_TRUE(node.attacher);
  auto expect = [&](const AttachSpec& spec, StatusCode code, const std::string& what) {
    auto record = node.attacher->Attach(spec);
    ASSERT_FALSE(record.ok()) << what;
    EXPECT_EQ(record.status().code(), code) << what << ": " << record.status().ToString();
    EXPECT_NE(record.status().message().find(spec.volume_id), std::string::npos) << record.status().message();
    EXPECT_EQ(record.status().message().find(key_), std::string::npos) << "key in the error";
    EXPECT_EQ(node.attacher->Get(spec.volume_id).status().code(), StatusCode::kNotFound) << what;
    ExpectNothingLeft(node);
  };

  // Nobody listens there: the cluster cannot be reached.
  auto unreachable = context;
  unreachable[publish_context::kCephMonitors] = "127.0.0.1:1";
  expect(SpecFor(volume->id, unreachable, "node-a"), StatusCode::kUnavailable, "unreachable monitors");

  // A well-formed key that is not the user's: cephx says no.
  std::string wrong = key_;
  ASSERT_GT(wrong.size(), 30u);
  wrong[25] = wrong[25] == 'A' ? 'B' : 'A';
  expect(SpecFor(volume->id, context, "node-a",
                 {{secret_keys::kCephUserId, env_.at("BLOCKCSI_CEPH_USER")}, {secret_keys::kCephUserKey, wrong}}),
         StatusCode::kPermissionDenied, "wrong key");

  // The image was deleted after it was published.
  ASSERT_TRUE(backend_->RevokeAccess(volume->id, InitiatorIqnForNode("node-a")).ok());
  ASSERT_TRUE(backend_->DeleteVolume(volume->id).ok());
  expect(SpecFor(volume->id, context, "node-a"), StatusCode::kNotFound, "deleted image");
}

// publish_context without monitors: the bridge finds the cluster (and,
// without a key, the keyring) through the node's ceph.conf (--ceph-conf).
// The bridge is run directly here, as the connector would run it.
TEST_F(RbdAttachTest, BridgeWithoutMonitorsUsesTheNodesCephConf) {
  auto volume = Create("vol", 16 * kMiB);
  ASSERT_TRUE(volume.ok()) << volume.status().ToString();
  auto context = Publish(volume->id, "node-a");
  auto node = std::make_unique<Node>();
  node->id = "node-a";
  node->dir = std::make_unique<TempDir>();
  node->state_dir = node->dir->Join("state");
  nodes_.push_back(std::move(node));
  const Node& n = *nodes_.back();
  BridgePaths p = BridgePathsFor(n.state_dir, volume->id);
  ASSERT_TRUE(MakeDirectories(p.dir, 0700).ok());

  ChildProcess bridge({BinDir() + "/blockcsi-bridge",
                       "--transport",
                       "rbd",
                       "--volume-id",
                       volume->id,
                       "--control-socket",
                       p.control_socket,
                       "--mountpoint",
                       p.mountpoint,
                       "--rbd-pool",
                       env_["RBD_POOL"],
                       "--rbd-image",
                       ImageOf(context),
                       "--expected-serial",
                       context.at(publish_context::kRbdImageId),
                       "--ceph-user",
                       "admin",
                       "--ceph-conf",
                       env_["CEPH_CONF"],
                       "--node-id",
                       "node-a"},
                      n.dir->Join("bridge.log"));
  ASSERT_TRUE(::blockcsi::testing::WaitForSocket(p.control_socket, std::chrono::seconds(60)))
      << ReadFileOrEmpty(n.dir->Join("bridge.log"));
  auto status = CallBridge(p.control_socket, {{"op", "status"}, {"refresh_identity", true}}, std::chrono::seconds(10));
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  ASSERT_TRUE(StatusFromReply(*status).ok()) << status->dump();
  EXPECT_EQ(status->value("transport", ""), "rbd");
  EXPECT_EQ(status->value("serial", ""), context.at(publish_context::kRbdImageId));
  EXPECT_TRUE(status->value("healthy", false));
  std::string device = status->value("device", "");
  ASSERT_TRUE(device.starts_with("/dev/loop")) << status->dump();
  std::string data = Pattern(64 * 1024, 'c');
  EXPECT_EQ(WriteDirect(device, 0, data), 0);
  EXPECT_EQ(ReadDirect(device, 0, data.size()), data);

  auto down = CallBridge(p.control_socket, {{"op", "shutdown"}}, std::chrono::seconds(60));
  ASSERT_TRUE(down.ok()) << down.status().ToString();
  EXPECT_TRUE(StatusFromReply(*down).ok()) << down->dump();
  EXPECT_EQ(bridge.Wait(std::chrono::seconds(60)), 0);
  ExpectNothingLeft(n);
}

// Not an assertion: the closing note's figures. Sequential 1 MiB direct I/O
// through the loop device (queue depth 1, as dd does) next to `rbd bench`
// on the same cluster.
// A measurement, not a test: disabled so that it is never counted as a pass
// (issue #22). Run it by hand: --gtest_also_run_disabled_tests
// --gtest_filter='*Report*'.
TEST_F(RbdAttachTest, DISABLED_ThroughputReport) {
  constexpr uint64_t kTotal = 64 * kMiB;
  Attached attached;
  ASSERT_NO_FATAL_FAILURE(CreateAndAttach(2 * kTotal, "node-a", &attached));
  auto& [volume, context, record, node_ptr] = attached;
  Node& node = *node_ptr;

  auto mib_per_s = [&](const std::vector<std::string>& argv, std::string* out) {
    auto start = std::chrono::steady_clock::now();
    int code = RunProgram(argv, out);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(code, 0) << *out;
    return code == 0 && s > 0 ? static_cast<double>(kTotal) / kMiB / s : 0.0;
  };
  std::string out;
  double loop_write = mib_per_s(
      {"dd", "if=/dev/zero", "of=" + record->device_path, "bs=1M", "count=64", "oflag=direct", "conv=fsync"}, &out);
  std::string dd_write = out.substr(out.rfind("copied") == std::string::npos ? 0 : out.rfind("copied"));
  double loop_read =
      mib_per_s({"dd", "if=" + record->device_path, "of=/dev/null", "bs=1M", "count=64", "iflag=direct"}, &out);
  std::string dd_read = out.substr(out.rfind("copied") == std::string::npos ? 0 : out.rfind("copied"));
  ASSERT_TRUE(node.attacher->Detach(volume->id).ok());  // rbd bench needs the lock

  const std::string spec = env_["RBD_POOL"] + "/" + ImageOf(context);
  auto bench = [&](const std::string& type, const std::string& threads) {
    std::string text;
    double v = mib_per_s({"rbd", "-c", env_["CEPH_CONF"], "--id", env_["BLOCKCSI_CEPH_USER"], "--keyring",
                          env_["BLOCKCSI_CEPH_KEYRING"], "bench", "--io-type", type, "--io-size", "1M", "--io-total",
                          "64M", "--io-pattern", "seq", "--io-threads", threads, spec},
                         &text);
    size_t at = text.rfind("elapsed:");
    std::string summary = at == std::string::npos ? "" : text.substr(at, text.find('\n', at) - at);
    return std::make_pair(v, summary);
  };
  auto bench_write16 = bench("write", "16");
  auto bench_read16 = bench("read", "16");
  auto bench_write1 = bench("write", "1");
  auto bench_read1 = bench("read", "1");
  std::printf(
      "RBD throughput, 64 MiB in 1 MiB blocks (MiB/s, wall clock incl. process start):\n"
      "  loop device (userspace bridge, dd direct, qd 1):  write %.1f  read %.1f\n"
      "  rbd bench, 16 threads (its default):              write %.1f  read %.1f\n"
      "  rbd bench, 1 thread:                              write %.1f  read %.1f\n"
      "  dd's own figures: write [%s] read [%s]\n"
      "  rbd bench summaries: write16 [%s] read16 [%s] write1 [%s] read1 [%s]\n",
      loop_write, loop_read, bench_write16.first, bench_read16.first, bench_write1.first, bench_read1.first,
      dd_write.substr(0, dd_write.find('\n')).c_str(), dd_read.substr(0, dd_read.find('\n')).c_str(),
      bench_write16.second.c_str(), bench_read16.second.c_str(), bench_write1.second.c_str(),
      bench_read1.second.c_str());
}

// Discard through the RBD transport: 256 MiB written, blkdiscard of that
// range on the loop device gives >= 90 % back in the pool (`rbd du`), and
// the data around it reads back intact.
TEST_F(RbdAttachTest, BlkdiscardGivesTheImagesSpaceBack) {
  Attached attached;
  ASSERT_NO_FATAL_FAILURE(CreateAndAttach(320 * kMiB, "node-a", &attached));
  const std::string dev = attached.record->device_path;
  const std::string spec = env_.at("RBD_POOL") + "/" + ImageOf(attached.context);
  auto used = [&] {
    std::string out;
    int code = RunProgram({"rbd", "-c", env_.at("CEPH_CONF"), "--keyring", env_.at("CEPH_KEYRING"), "--id", "admin",
                           "du", "--format", "json", spec},
                          &out);
    EXPECT_EQ(code, 0) << out;
    // The JSON alone: rbd adds a warning (no fast-diff) on stderr.
    size_t open = std::min(out.find('{'), out.size()), close = out.rfind('}');
    auto j =
        nlohmann::json::parse(close == std::string::npos ? "" : out.substr(open, close + 1 - open), nullptr, false);
    if (j.is_discarded() || !j.contains("images") || j["images"].empty()) {
      ADD_FAILURE() << "rbd du: " << out;
      return uint64_t{0};
    }
    return j["images"][0].value("used_size", uint64_t{0});
  };
  for (uint64_t at = 0; at < 320 * kMiB; at += 8 * kMiB) {
    ASSERT_EQ(WriteDirect(dev, at, Pattern(8 * kMiB, static_cast<char>('a' + at / (8 * kMiB)))), 0);
  }
  const uint64_t before = used();
  ASSERT_GE(before, 300 * kMiB);
  std::string out;
  ASSERT_EQ(RunProgram({"blkdiscard", "-o", std::to_string(32 * kMiB), "-l", std::to_string(256 * kMiB), dev}, &out), 0)
      << out;
  const uint64_t after = used();
  const uint64_t freed = before > after ? before - after : 0;
  std::printf("[ figures ] rbd du used %.1f MiB -> %.1f MiB after a 256 MiB blkdiscard (%.1f %% freed)\n",
              before / double(kMiB), after / double(kMiB), 100.0 * freed / double(256 * kMiB));
  EXPECT_GE(freed, 256 * kMiB * 9 / 10);
  for (uint64_t at : {uint64_t{0}, 24 * kMiB, 288 * kMiB, 312 * kMiB}) {
    EXPECT_TRUE(ReadDirect(dev, at, 8 * kMiB) == Pattern(8 * kMiB, static_cast<char>('a' + at / (8 * kMiB))))
        << "data at " << at / kMiB << " MiB changed";
  }
  EXPECT_TRUE(ReadDirect(dev, 100 * kMiB, kMiB) == std::string(kMiB, '\0')) << "a discarded range must read as zeros";
  // A hole smaller than librbd's discard granularity (64 KiB) reads as zeros
  // too: the loop device's write-zeroes is such a punch.
  ASSERT_EQ(RunProgram({"fallocate", "--punch-hole", "--keep-size", "-o", std::to_string(300 * kMiB + 4096), "-l",
                        "4096", dev},
                       &out),
            0)
      << out;
  std::string expected = Pattern(8 * kMiB, static_cast<char>('a' + 296 / 8));
  std::fill_n(expected.begin() + (300 * kMiB + 4096 - 296 * kMiB), 4096, '\0');
  EXPECT_TRUE(ReadDirect(dev, 296 * kMiB, 8 * kMiB) == expected) << "a 4 KiB hole did not read back as zeros";
  ASSERT_NO_FATAL_FAILURE(DetachLeavingNothing(*attached.node, attached.volume->id));
}

}  // namespace
}  // namespace blockcsi
