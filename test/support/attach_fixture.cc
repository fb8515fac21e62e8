#include "support/attach_fixture.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "attach/userspace_connector.h"
#include "common/atomic_file.h"
#include "common/executor.h"
#include "common/host.h"
#include "common/loop_devices.h"
#include "common/mounter.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"

namespace blockcsi::testing {

void AttachIntegrationTest::SetUp() {
  if (!IsRoot()) GTEST_SKIP() << "requires root (tgtd, FUSE, loop devices)";
  if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "requires /dev/fuse";
  std::string error;
  tgtd_ = TgtdHarness::Start(&error);
  BLOCKCSI_REQUIRE_TGTD(tgtd_, error);
  tmp_ = std::make_unique<TempDir>();
  state_dir_ = tmp_->Join("state");
  const char* path = std::getenv("BLOCKCSI_TEST_FUSE_PATH");
  if (::access(FuseUringParameter::kPath, W_OK) == 0)
    fuse_uring_.Set(path == nullptr || std::string(path) != "dev_fuse");
  baseline_ = TakeLeakSnapshot(Scope());
}

LeakScope AttachIntegrationTest::Scope() const {
  LeakScope scope;
  scope.dir = tmp_->path();
  scope.state_dir = state_dir_;
  scope.tgtd = tgtd_.get();
  return scope;
}

void AttachIntegrationTest::TearDown() {
  if (!tmp_) return;
  // Before anything is cleaned: a test that passed must have left nothing.
  if (!HasFailure()) ExpectNothingLeft();
  // Whatever the test left: bridges, filesystems mounted on loop devices,
  // loop devices, FUSE mounts. By pid and by name, never by pattern. The
  // loop devices are listed first: a lazy unmount of their FUSE file below
  // would hide its path (the kernel then shows "/lun").
  const auto loops = LoopDevicesBackedUnder(tmp_->path());
  auto mounts_under_tmp = [&] {
    std::vector<std::string> out;
    auto text = ReadFileToString("/proc/self/mountinfo");
    if (!text.ok()) return out;
    for (const auto& e : ParseMountInfo(*text)) {
      if (e.target.rfind(tmp_->path(), 0) == 0) out.push_back(e.target);
    }
    std::reverse(out.begin(), out.end());  // the newest (innermost) first
    return out;
  };
  for (const auto& m : mounts_under_tmp()) ::umount2(m.c_str(), MNT_DETACH);
  for (int pid : BridgePids()) ::kill(pid, SIGKILL);
  for (const auto& [loop, backing] : loops) RunProgram({"losetup", "-d", loop});
  for (const auto& m : mounts_under_tmp()) ::umount2(m.c_str(), MNT_DETACH);
  tgtd_.reset();
  tmp_.reset();
}

TestTarget AttachIntegrationTest::MakeTarget(const std::string& name, uint64_t size_bytes,
                                             const std::string& acl_node) {
  TestTarget t;
  t.tid = next_tid_++;
  t.iqn = "iqn.2026-11.io.blockcsi.test:" + name;
  t.backing_file = tmp_->Join(name + ".img");
  t.size_bytes = size_bytes;
  t.serial = "bcsn" + name;
  // tgt turns the scsi_id's hex digits into the NAA 6 designator of VPD 0x83.
  char wwn[33];
  std::snprintf(wwn, sizeof wwn, "6%015x%016x", 0xb10c, t.tid * 1000 + static_cast<int>(name.size()));
  t.wwn = wwn;
  int fd = ::open(t.backing_file.c_str(), O_CREAT | O_RDWR, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(size_bytes)), 0);
  ::close(fd);
  int code = 0;
  std::string tid = std::to_string(t.tid);
  tgtd_->Tgtadm({"--op", "new", "--mode", "target", "--tid", tid, "-T", t.iqn}, &code);
  EXPECT_EQ(code, 0);
  EXPECT_TRUE(AddLun(t));
  if (!acl_node.empty()) {
    tgtd_->Tgtadm({"--op", "bind", "--mode", "target", "--tid", tid, "--initiator-name", InitiatorIqnForNode(acl_node)},
                  &code);
    EXPECT_EQ(code, 0);
  }
  return t;
}

::testing::AssertionResult AttachIntegrationTest::AddLun(const TestTarget& t) {
  int code = 0;
  std::string tid = std::to_string(t.tid);
  tgtd_->Tgtadm({"--op", "new", "--mode", "logicalunit", "--tid", tid, "--lun", "1", "-b", t.backing_file}, &code);
  if (code != 0) return ::testing::AssertionFailure() << "tgtadm: new LUN 1 of tid " << tid << ": exit " << code;
  tgtd_->Tgtadm({"--op", "update", "--mode", "logicalunit", "--tid", tid, "--lun", "1", "--params",
                 "scsi_sn=" + t.serial + ",scsi_id=" + t.wwn},
                &code);
  if (code != 0)
    return ::testing::AssertionFailure() << "tgtadm: identity of LUN 1 of tid " << tid << ": exit " << code;
  return ::testing::AssertionSuccess();
}

void AttachIntegrationTest::AddChap(const TestTarget& t, const std::string& user, const std::string& password) {
  int code = 0;
  tgtd_->Tgtadm({"--op", "new", "--mode", "account", "--user", user, "--password", password}, &code);
  EXPECT_EQ(code, 0);
  tgtd_->Tgtadm({"--op", "bind", "--mode", "account", "--tid", std::to_string(t.tid), "--user", user}, &code);
  EXPECT_EQ(code, 0);
}

std::map<std::string, std::string> AttachIntegrationTest::ContextFor(const TestTarget& t) const {
  return {{publish_context::kPortals, tgtd_->portal()},
          {publish_context::kTargetIqn, t.iqn},
          {publish_context::kLun, "1"},
          {publish_context::kSerial, t.serial},
          {publish_context::kWwn, t.wwn}};
}

StatusOr<std::unique_ptr<VolumeAttacher>> AttachIntegrationTest::NewAttacher(int bridge_sessions,
                                                                             const std::string& bridge_dir) {
  AttacherOptions o;
  o.connector = "userspace";
  o.state_dir = state_dir_;
  o.node_id = kNodeId;
  o.bridge_dir = bridge_dir.empty() ? BinDir() : bridge_dir;
  o.bridge_io_timeout = std::chrono::seconds(5);
  o.bridge_sessions = bridge_sessions;
  o.host_fs = MachineHost();
  o.state_files = MachineHost();
  return MakeVolumeAttacher(o);
}

StatusOr<AttachRecord> AttachIntegrationTest::AttachEdited(const TestTarget& t, const ContextEdit& edit,
                                                           const std::map<std::string, std::string>& secrets) {
  auto attacher = NewAttacher();
  if (!attacher.ok()) {
    ADD_FAILURE() << "no attacher: " << attacher.status().ToString();
    return attacher.status();
  }
  attacher_ = std::move(*attacher);
  auto context = ContextFor(t);
  edit(context);
  auto spec = ParseAttachSpec("vol-a", context, secrets, InitiatorIqnForNode(kNodeId));
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return attacher_->Attach(spec.ok() ? *spec : AttachSpec{});
}

std::vector<int> AttachIntegrationTest::BridgePids() const {
  std::vector<int> out;
  auto fs = MachineHost();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(state_dir_ + "/bridges", ec)) {
    for (int pid : FindBridgePids(*fs, e.path().string() + "/ctl.sock")) out.push_back(pid);
  }
  return out;
}

std::vector<std::string> AttachIntegrationTest::LoopDevicesUnderState() const {
  std::vector<std::string> out;
  auto fs = MachineHost();
  auto names = fs->ListDir("/sys/block");
  if (!names.ok()) return out;
  for (const auto& n : *names) {
    auto backing = ReadTrimmed(*fs, "/sys/block/" + n + "/loop/backing_file");
    if (backing.ok() && backing->rfind(state_dir_, 0) == 0) out.push_back("/dev/" + n);
  }
  return out;
}

std::vector<std::string> AttachIntegrationTest::MountsUnderState() const {
  std::vector<std::string> out;
  auto text = ReadFileToString("/proc/self/mountinfo");
  if (!text.ok()) return out;
  for (const auto& e : ParseMountInfo(*text)) {
    if (e.target.rfind(state_dir_, 0) == 0) out.push_back(e.target);
  }
  return out;
}

void AttachIntegrationTest::ExpectNothingLeft() {
  // Targets, LUNs, ACLs and accounts are the test's own set-up (MakeTarget,
  // AddChap); an attacher only logs in, so of tgtd only a session can leak.
  auto left = WithoutTgtdSetUp(NewItemsAfterSettling(baseline_, Scope()));
  EXPECT_TRUE(left.empty()) << "left behind:" << DescribeItems(left);
  // A bridge found by its control socket (its argv names the state dir, so
  // the checker sees it too; this also finds one that renamed itself).
  EXPECT_TRUE(BridgePids().empty()) << "bridge processes left";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(state_dir_ + "/bridges", ec)) {
    ADD_FAILURE() << "bridge dir left: " << e.path();
  }
}

}  // namespace blockcsi::testing
