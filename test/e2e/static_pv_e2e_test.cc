// Static PVs (issue #24), end to end through the CO simulator: an "array"
// (a tgtd of its own, not the plugin's) exports a LUN made by hand with
// tgtadm, with an ext4 filesystem and a file already on it, and an ACL the
// array's admin wrote for the node's initiator. A PV names it with the
// in-tree iscsi fields; the plugin (mode all, userspace connector) attaches,
// stages and publishes it to a pod. The file reads back intact, the
// filesystem is the same one (not formatted), the array's ACLs are as the
// admin left them, and after the pod, the detach and DeleteVolume nothing of
// ours is left (the shared leak checker). A portal or IQN that cannot be
// reached is UNAVAILABLE and leaves nothing behind. Needs root, tgtd, FUSE
// and mkfs.ext4 with -d; skips otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/executor.h"
#include "contract/initiator.h"
#include "e2e/co_simulator.h"
#include "support/leak_check.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;

constexpr char kNode[] = "static-node";
constexpr char kArrayIqn[] = "iqn.2003-01.org.example:array.disk1";
constexpr char kArraySerial[] = "ARRAY0001";
constexpr char kContent[] = "written by the array's admin before blockcsi ever saw this LUN\n";

struct ExecResult {
  int code = -1;
  std::string out;
};

ExecResult Exec(const std::vector<std::string>& argv) {
  auto r = MakeProcessExecutor()->Run(Command(argv.front()).Args({argv.begin() + 1, argv.end()}).Timeout(120s));
  if (!r.ok()) return {-1, r.status().ToString()};
  return {r->exit_code, r->stdout_text + r->stderr_text};
}

// tgtd's ACL and account lines: what the array's admin owns. Sessions come
// and go with the attachment and are left to the leak checker.
std::set<std::string> AdminConfig(const testing::TgtdHarness& array) {
  std::set<std::string> out;
  for (const auto& item : testing::TgtdItems(array.ShowTargets())) {
    if (item.find("session") == std::string::npos && item.find("nexus") == std::string::npos) out.insert(item);
  }
  return out;
}

class StaticPvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::IsRoot()) GTEST_SKIP() << "requires root (tgtd, FUSE, loop devices, mounts)";
    if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "requires /dev/fuse (userspace connector)";
    if (::access("/usr/sbin/tgtd", X_OK) != 0) GTEST_SKIP() << "requires /usr/sbin/tgtd (Debian package tgt)";
    std::string error;
    array_ = testing::TgtdHarness::Start(&error);
    ASSERT_TRUE(array_) << "cannot start the array's tgtd: " << error;
    plugin_tgtd_ = testing::TgtdHarness::Start(&error);
    ASSERT_TRUE(plugin_tgtd_) << "cannot start the plugin's tgtd: " << error;

    // The admin's LUN: an ext4 image with a file on it, made without
    // mounting (mkfs.ext4 -d), exported by hand.
    const std::string seed = dir_.Join("seed");
    std::filesystem::create_directories(seed);
    std::ofstream(seed + "/hello.txt") << kContent;
    image_ = dir_.Join("array-disk1.img");
    ExecResult mkfs = Exec({"mkfs.ext4", "-q", "-F", "-d", seed, image_, "64M"});
    if (mkfs.code != 0) {
      if (std::string why = testing::MissingProgramOption("mkfs.ext4", "-d"); !why.empty()) GTEST_SKIP() << why;
      FAIL() << "mkfs.ext4 -d failed although it has the option: " << mkfs.out;
    }
    uuid_ = Uuid();
    ASSERT_FALSE(uuid_.empty());
    Tgtadm({"--op", "new", "--mode", "target", "--tid", "7", "-T", kArrayIqn});
    Tgtadm({"--op", "new", "--mode", "logicalunit", "--tid", "7", "--lun", "1", "-b", image_});
    Tgtadm({"--op", "update", "--mode", "logicalunit", "--tid", "7", "--lun", "1", "--params",
            std::string("scsi_sn=") + kArraySerial});
    Tgtadm({"--op", "bind", "--mode", "target", "--tid", "7", "--initiator-name", InitiatorIqnForNode(kNode)});
    admin_config_ = AdminConfig(*array_);
    ASSERT_FALSE(admin_config_.empty());

    plugin_ = std::make_unique<testing::PluginUnderTest>(dir_.Join("plugin"), plugin_tgtd_.get());
    testing::PluginOptions options;
    options.node_id = kNode;
    ASSERT_TRUE(plugin_->Start(options, &error)) << error;
    e2e::CoSimulatorOptions sim_options;
    sim_options.retry_budget = std::chrono::seconds(60);
    sim_ = std::make_unique<e2e::CoSimulator>(&plugin_->controller(), sim_options);
    sim_->AddNode(kNode, &plugin_->node(), dir_.Join("kubelet"));
    baseline_ = testing::TakeLeakSnapshot(Scope(""));
    have_baseline_ = true;
  }

  void TearDown() override {
    if (!testing::IsRoot()) return;
    // Before anything is cleaned: a test that passed left nothing on the
    // node and no session on the array (whose targets the tests change by hand).
    if (have_baseline_ && !HasFailure()) {
      auto left = testing::WithoutTgtdSetUp(testing::NewItemsAfterSettling(baseline_, Scope("")));
      EXPECT_TRUE(left.empty()) << "left behind by the test (before the fixture cleans):"
                                << testing::DescribeItems(left);
    }
    sim_.reset();
    if (plugin_) plugin_->Stop();
    testing::CleanUpUnder(dir_.path());
  }

  void Tgtadm(const std::vector<std::string>& args) {
    int code = -1;
    std::string out = array_->Tgtadm(args, &code);
    ASSERT_EQ(code, 0) << "tgtadm failed: " << out;
  }

  std::string Uuid() {
    ExecResult r = Exec({"blkid", "-p", "-o", "value", "-s", "UUID", image_});
    return r.code == 0 ? r.out : "";
  }

  e2e::PersistentVolume StaticPv(const std::string& handle, std::map<std::string, std::string> extra = {}) {
    e2e::PersistentVolume pv;
    pv.name = handle;
    pv.volume_id = handle;
    pv.capability = testing::MountCapability("ext4");
    pv.volume_context = {{"targetPortal", array_->portal()},
                         {"iqn", kArrayIqn},
                         {"lun", "1"},
                         {"fsType", "ext4"},
                         {"serial", kArraySerial}};
    for (auto& [k, v] : extra) pv.volume_context[k] = v;
    return pv;
  }

  // Attaches `pv` and stages it once, a stage the test expects refused: that
  // stage's status, once the one leak checker found it left nothing of the
  // volume. Fatal failures end the caller: wrap in ASSERT_NO_FATAL_FAILURE.
  void AttachAndStageRefused(const e2e::PersistentVolume& pv, grpc::Status* st) {
    ASSERT_TRUE(testing::GrpcOk(sim_->Attach(pv, kNode), plugin_->LogTail())) << pv.volume_id;
    const auto* va = sim_->FindAttachment(pv.volume_id, kNode);
    ASSERT_NE(va, nullptr);
    testing::LeakSnapshot before = testing::TakeLeakSnapshot(Scope(pv.volume_id));
    *st = sim_->StageOnce(kNode, pv, va->attachment_metadata, sim_->StagingPath(kNode, pv.volume_id));
    std::vector<std::string> leaked = testing::NewItemsAfterSettling(before, Scope(pv.volume_id));
    EXPECT_TRUE(leaked.empty()) << pv.volume_id << ":\n" << testing::DescribeItems(leaked);
  }

  testing::LeakScope Scope(const std::string& volume_id) {
    testing::LeakScope scope;
    scope.dir = dir_.path();
    scope.volume_id = volume_id;
    scope.state_dir = plugin_->state_dir();
    scope.tgtd = array_.get();
    scope.ignore_pids = {plugin_->pid()};
    return scope;
  }

  ExecResult Blockctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {testing::BinDir() + "/blockctl", "--state-dir", plugin_->state_dir(), "--endpoint",
                                     "unix://" + plugin_->socket()};
    argv.insert(argv.end(), args.begin(), args.end());
    return Exec(argv);
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::TgtdHarness> array_;
  std::unique_ptr<testing::TgtdHarness> plugin_tgtd_;
  std::unique_ptr<testing::PluginUnderTest> plugin_;
  std::unique_ptr<e2e::CoSimulator> sim_;
  testing::LeakSnapshot baseline_;  // at the end of SetUp
  bool have_baseline_ = false;
  std::string image_;
  std::string uuid_;
  std::set<std::string> admin_config_;
};

TEST_F(StaticPvTest, AnExistingLunIsUsedAsIsAndLeftAsTheAdminMadeIt) {
  e2e::PersistentVolume pv = StaticPv("array-a-disk1");
  testing::LeakSnapshot before = testing::TakeLeakSnapshot(Scope(pv.volume_id));

  ASSERT_TRUE(testing::GrpcOk(sim_->Attach(pv, kNode), plugin_->LogTail())) << sim_->EventLog();
  e2e::Pod pod;
  ASSERT_TRUE(testing::GrpcOk(sim_->RunPod("reader", kNode, pv, &pod), plugin_->LogTail())) << sim_->EventLog();

  // The admin's data, through tgtd -> libiscsi -> FUSE -> loop -> ext4.
  EXPECT_EQ(testing::ReadFileOrEmpty(pod.volume_path + "/hello.txt"), kContent);
  EXPECT_EQ(AdminConfig(*array_), admin_config_) << "the array's ACLs changed";

  // blockctl shows it as a static volume.
  ExecResult volumes = Blockctl({"-o", "json", "volumes"});
  ASSERT_EQ(volumes.code, 0) << volumes.out;
  auto rows = nlohmann::json::parse(volumes.out);
  ASSERT_EQ(rows.size(), 1u) << volumes.out;
  EXPECT_EQ(rows[0]["volume"], pv.volume_id);
  EXPECT_EQ(rows[0]["origin"], "static") << volumes.out;
  EXPECT_EQ(rows[0]["serial"], kArraySerial) << volumes.out;
  ExecResult status = Blockctl({"status"});
  EXPECT_EQ(status.code, 0) << status.out;
  EXPECT_NE(status.out.find(std::string("static LUN ") + kArrayIqn + " lun 1"), std::string::npos) << status.out;

  ASSERT_TRUE(testing::GrpcOk(sim_->DeletePod(pod), plugin_->LogTail())) << sim_->EventLog();
  ASSERT_TRUE(testing::GrpcOk(sim_->Detach(pv, kNode), plugin_->LogTail())) << sim_->EventLog();
  // A static PV is Retain; a Delete policy by mistake must not touch it.
  ASSERT_TRUE(testing::GrpcOk(sim_->Deprovision(pv), plugin_->LogTail())) << sim_->EventLog();

  std::vector<std::string> leaked = testing::NewItemsAfterSettling(before, Scope(pv.volume_id));
  EXPECT_TRUE(leaked.empty()) << testing::DescribeItems(leaked);
  EXPECT_EQ(AdminConfig(*array_), admin_config_) << "the array's ACLs changed";
  EXPECT_EQ(Uuid(), uuid_) << "the LUN was formatted";
  // Its LUN is still exported, with the data: read it again through a
  // second attachment.
  ASSERT_TRUE(testing::GrpcOk(sim_->Attach(pv, kNode), plugin_->LogTail()));
  ASSERT_TRUE(testing::GrpcOk(sim_->RunPod("reader-2", kNode, pv, &pod), plugin_->LogTail()));
  EXPECT_EQ(testing::ReadFileOrEmpty(pod.volume_path + "/hello.txt"), kContent);
  ASSERT_TRUE(testing::GrpcOk(sim_->DeletePod(pod), plugin_->LogTail()));
  ASSERT_TRUE(testing::GrpcOk(sim_->Detach(pv, kNode), plugin_->LogTail()));
}

TEST_F(StaticPvTest, WithoutSerialTheLunIsNamedByTargetAndNumberAlone) {
  // An in-tree PV has no serial: the LUN is taken by IQN and number, as the
  // in-tree plugin did, and the record keeps an empty identity.
  e2e::PersistentVolume pv = StaticPv("array-a-no-serial");
  pv.volume_context.erase("serial");
  testing::LeakSnapshot before = testing::TakeLeakSnapshot(Scope(pv.volume_id));
  ASSERT_TRUE(testing::GrpcOk(sim_->Attach(pv, kNode), plugin_->LogTail())) << sim_->EventLog();
  e2e::Pod pod;
  ASSERT_TRUE(testing::GrpcOk(sim_->RunPod("reader", kNode, pv, &pod), plugin_->LogTail())) << sim_->EventLog();
  EXPECT_EQ(testing::ReadFileOrEmpty(pod.volume_path + "/hello.txt"), kContent);
  csi::v1::NodeGetVolumeStatsResponse stats;
  ASSERT_TRUE(testing::GrpcOk(sim_->VolumeStats(pod, &stats), plugin_->LogTail()));
  ASSERT_GE(stats.usage_size(), 1);
  EXPECT_GT(stats.usage(0).total(), 0);
  ASSERT_TRUE(testing::GrpcOk(sim_->DeletePod(pod), plugin_->LogTail())) << sim_->EventLog();
  ASSERT_TRUE(testing::GrpcOk(sim_->Detach(pv, kNode), plugin_->LogTail())) << sim_->EventLog();
  std::vector<std::string> leaked = testing::NewItemsAfterSettling(before, Scope(pv.volume_id));
  EXPECT_TRUE(leaked.empty()) << testing::DescribeItems(leaked);
  EXPECT_EQ(Uuid(), uuid_) << "the LUN was formatted";
}

TEST_F(StaticPvTest, InitiatorNameLogsInAsTheInitiatorTheArraysAclNames) {
  // The admin's ACL names another initiator than the node's (a PV moved
  // from the in-tree plugin with initiatorName set).
  const std::string custom = "iqn.1994-05.com.example:worker-legacy";
  Tgtadm({"--op", "unbind", "--mode", "target", "--tid", "7", "--initiator-name", InitiatorIqnForNode(kNode)});
  Tgtadm({"--op", "bind", "--mode", "target", "--tid", "7", "--initiator-name", custom});
  admin_config_ = AdminConfig(*array_);

  // Without initiatorName the node's own initiator is refused by the ACL.
  e2e::PersistentVolume plain = StaticPv("array-a-plain");
  ASSERT_TRUE(testing::GrpcOk(sim_->Attach(plain, kNode), plugin_->LogTail()));
  const auto* va = sim_->FindAttachment(plain.volume_id, kNode);
  ASSERT_NE(va, nullptr);
  grpc::Status st = sim_->StageOnce(kNode, plain, va->attachment_metadata, sim_->StagingPath(kNode, plain.volume_id));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  ASSERT_TRUE(testing::GrpcOk(sim_->Detach(plain, kNode), plugin_->LogTail()));

  e2e::PersistentVolume pv = StaticPv("array-a-legacy", {{"initiatorName", custom}});
  ASSERT_TRUE(testing::GrpcOk(sim_->Attach(pv, kNode), plugin_->LogTail())) << sim_->EventLog();
  e2e::Pod pod;
  ASSERT_TRUE(testing::GrpcOk(sim_->RunPod("reader", kNode, pv, &pod), plugin_->LogTail())) << sim_->EventLog();
  EXPECT_EQ(testing::ReadFileOrEmpty(pod.volume_path + "/hello.txt"), kContent);
  // The array's session is logged in as that initiator (tgtd's own view).
  EXPECT_TRUE(
      testing::TgtdItems(array_->ShowTargets()).contains(std::string("tgtd session ") + kArrayIqn + " " + custom))
      << array_->ShowTargets();
  ASSERT_TRUE(testing::GrpcOk(sim_->DeletePod(pod), plugin_->LogTail())) << sim_->EventLog();
  ASSERT_TRUE(testing::GrpcOk(sim_->Detach(pv, kNode), plugin_->LogTail())) << sim_->EventLog();
  EXPECT_EQ(AdminConfig(*array_), admin_config_) << "the array's ACLs changed";
}

TEST_F(StaticPvTest, ChapAuthSessionLogsInWithTheNodeStageSecret) {
  const std::string password = "array-chap-Secret-42";
  Tgtadm({"--op", "new", "--mode", "account", "--user", "k8s-node", "--password", password});
  Tgtadm({"--op", "bind", "--mode", "account", "--tid", "7", "--user", "k8s-node"});
  admin_config_ = AdminConfig(*array_);

  e2e::PersistentVolume pv = StaticPv("array-a-chap", {{"chapAuthSession", "true"}});
  ASSERT_TRUE(testing::GrpcOk(sim_->Attach(pv, kNode), plugin_->LogTail()));
  EXPECT_EQ(sim_->FindAttachment(pv.volume_id, kNode)->attachment_metadata.at("chapRequired"), "true");
  // No node-stage secret: the node says which key is missing.
  grpc::Status st = sim_->StageOnce(kNode, pv, sim_->FindAttachment(pv.volume_id, kNode)->attachment_metadata,
                                    sim_->StagingPath(kNode, pv.volume_id));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("chap-username"), std::string::npos) << st.error_message();

  pv.node_stage_secrets = {{"chap-username", "k8s-node"}, {"chap-password", password}};
  e2e::Pod pod;
  ASSERT_TRUE(testing::GrpcOk(sim_->RunPod("reader", kNode, pv, &pod), plugin_->LogTail())) << sim_->EventLog();
  EXPECT_EQ(testing::ReadFileOrEmpty(pod.volume_path + "/hello.txt"), kContent);
  ASSERT_TRUE(testing::GrpcOk(sim_->DeletePod(pod), plugin_->LogTail())) << sim_->EventLog();
  ASSERT_TRUE(testing::GrpcOk(sim_->Detach(pv, kNode), plugin_->LogTail())) << sim_->EventLog();
  EXPECT_EQ(AdminConfig(*array_), admin_config_) << "the array's ACLs or accounts changed";
  EXPECT_EQ(testing::ReadFileOrEmpty(plugin_->log_path()).find(password), std::string::npos)
      << "the CHAP password reached the plugin's log";
}

TEST_F(StaticPvTest, AnotherFilesystemThanThePvSaysIsRefusedNeverFormatted) {
  // The PV says xfs; the LUN carries the admin's ext4: never mkfs over it.
  e2e::PersistentVolume pv = StaticPv("array-a-xfs", {{"fsType", "xfs"}});
  pv.capability = testing::MountCapability("xfs");
  grpc::Status st;
  ASSERT_NO_FATAL_FAILURE(AttachAndStageRefused(pv, &st));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_EQ(Uuid(), uuid_) << "the LUN was formatted";
  ASSERT_TRUE(testing::GrpcOk(sim_->Detach(pv, kNode), plugin_->LogTail()));
}

// A PVC resize of a static PV, as external-resizer and kubelet drive it:
// ControllerExpandVolume grows nothing (the array's admin owns the LUN) and
// asks for node expansion; the node refuses while the LUN is still smaller
// than asked (OUT_OF_RANGE, one line naming the volume, filesystem as it
// was), and grows the filesystem online once the admin grew the LUN.
TEST_F(StaticPvTest, APvcResizeGrowsTheFilesystemOnceTheAdminGrewTheLun) {
  // xfs: a mounted ext4 grows only with CAP_SYS_RESOURCE, which this
  // machine's root lacks; xfs grows online here.
  const std::string image = dir_.Join("array-disk2.img");
  ExecResult mkfs = Exec({"truncate", "-s", "320M", image});
  ASSERT_EQ(mkfs.code, 0) << mkfs.out;
  mkfs = Exec({"mkfs.xfs", "-q", "-f", image});
  if (mkfs.code != 0) {
    if (!testing::HaveProgram("mkfs.xfs")) GTEST_SKIP() << "requires mkfs.xfs (Debian package xfsprogs)";
    FAIL() << "mkfs.xfs failed: " << mkfs.out;
  }
  const std::string iqn = "iqn.2003-01.org.example:array.disk2";
  Tgtadm({"--op", "new", "--mode", "target", "--tid", "8", "-T", iqn});
  Tgtadm({"--op", "new", "--mode", "logicalunit", "--tid", "8", "--lun", "1", "-b", image});
  Tgtadm({"--op", "bind", "--mode", "target", "--tid", "8", "--initiator-name", InitiatorIqnForNode(kNode)});

  e2e::PersistentVolume pv = StaticPv("array-a-disk2", {{"iqn", iqn}, {"fsType", "xfs"}});
  pv.volume_context.erase("serial");
  pv.capability = testing::MountCapability("xfs");
  pv.capacity_bytes = 320LL << 20;
  ASSERT_TRUE(testing::GrpcOk(sim_->Attach(pv, kNode), plugin_->LogTail()));
  e2e::Pod pod;
  ASSERT_TRUE(testing::GrpcOk(sim_->RunPod("grower", kNode, pv, &pod), plugin_->LogTail())) << sim_->EventLog();
  std::ofstream(pod.volume_path + "/kept.txt") << "kept across the grow\n";
  csi::v1::NodeGetVolumeStatsResponse before;
  ASSERT_TRUE(testing::GrpcOk(sim_->VolumeStats(pod, &before), plugin_->LogTail()));
  ASSERT_GE(before.usage_size(), 1);
  const auto admin_config = AdminConfig(*array_);

  // The PVC asks for 640 MiB before the admin grew the LUN.
  grpc::Status st = sim_->ResizePvc(&pv, 640LL << 20, pod);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE) << sim_->EventLog();
  EXPECT_NE(st.error_message().find("array-a-disk2"), std::string::npos) << st.error_message();
  EXPECT_EQ(st.error_message().find('\n'), std::string::npos) << st.error_message();
  EXPECT_NE(sim_->EventLog().find("ControllerExpandVolume array-a-disk2 671088640 -> OK"), std::string::npos)
      << sim_->EventLog();
  csi::v1::NodeGetVolumeStatsResponse refused;
  ASSERT_TRUE(testing::GrpcOk(sim_->VolumeStats(pod, &refused), plugin_->LogTail()));
  EXPECT_EQ(refused.usage(0).total(), before.usage(0).total());

  // The admin grows the LUN. tgtd re-reads a LUN's size only when the LU is
  // made again (`--op update` changes no size); an idle session survives.
  ASSERT_EQ(Exec({"truncate", "-s", "640M", image}).code, 0);
  Tgtadm({"--op", "delete", "--mode", "logicalunit", "--tid", "8", "--lun", "1"});
  Tgtadm({"--op", "new", "--mode", "logicalunit", "--tid", "8", "--lun", "1", "-b", image});

  // The resizer and kubelet retry: now it grows.
  ASSERT_TRUE(testing::GrpcOk(sim_->ResizePvc(&pv, 640LL << 20, pod), plugin_->LogTail())) << sim_->EventLog();
  EXPECT_EQ(pv.capacity_bytes, 640LL << 20);
  csi::v1::NodeGetVolumeStatsResponse after;
  ASSERT_TRUE(testing::GrpcOk(sim_->VolumeStats(pod, &after), plugin_->LogTail()));
  ASSERT_GE(after.usage_size(), 1);
  EXPECT_GT(after.usage(0).total(), before.usage(0).total() + (200LL << 20));
  EXPECT_EQ(testing::ReadFileOrEmpty(pod.volume_path + "/kept.txt"), "kept across the grow\n");
  // Nothing of the array's configuration was touched by the resize.
  EXPECT_EQ(AdminConfig(*array_), admin_config);
  ASSERT_TRUE(testing::GrpcOk(sim_->DeletePod(pod), plugin_->LogTail())) << sim_->EventLog();
  ASSERT_TRUE(testing::GrpcOk(sim_->Detach(pv, kNode), plugin_->LogTail())) << sim_->EventLog();
}

TEST_F(StaticPvTest, AWrongSerialIsRefusedAndLeavesNothing) {
  e2e::PersistentVolume pv = StaticPv("array-a-wrong", {{"serial", "SOMETHINGELSE"}});
  grpc::Status st;
  ASSERT_NO_FATAL_FAILURE(AttachAndStageRefused(pv, &st));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_EQ(Uuid(), uuid_);
}

TEST_F(StaticPvTest, AnUnreachablePortalOrIqnIsUnavailableAndLeavesNothing) {
  // Held bound and never listening: a portal that stays dead under ctest -j.
  testing::ReservedPort dead(testing::ReservedPort::Use::kDead);
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> cases = {
      {"array-gone", {{"targetPortal", "127.0.0.1:" + std::to_string(dead.port())}}},
      {"array-no-such-iqn", {{"iqn", "iqn.2003-01.org.example:array.nothing-here"}}},
  };
  for (const auto& [handle, extra] : cases) {
    e2e::PersistentVolume pv = StaticPv(handle, extra);
    grpc::Status st;
    ASSERT_NO_FATAL_FAILURE(AttachAndStageRefused(pv, &st));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << handle << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(handle), std::string::npos) << st.error_message();
    EXPECT_EQ(st.error_message().find('\n'), std::string::npos) << "not one line: " << st.error_message();
    ASSERT_TRUE(testing::GrpcOk(sim_->Detach(pv, kNode), plugin_->LogTail())) << handle;
  }
  EXPECT_EQ(AdminConfig(*array_), admin_config_);
}

TEST_F(StaticPvTest, BadAttributesAreInvalidArgumentAtAttach) {
  e2e::PersistentVolume pv = StaticPv("array-a-bad", {{"lun", "70000"}});
  grpc::Status st = sim_->Attach(pv, kNode);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("lun"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("array-a-bad"), std::string::npos) << st.error_message();
}

}  // namespace
}  // namespace blockcsi
