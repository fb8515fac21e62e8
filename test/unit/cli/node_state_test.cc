// The verdict and cleanup logic of blockctl status/cleanup on fabricated
// snapshots: records, mountinfo, bridges, sessions and loop devices.
#include "cli/node_state.h"

#include "attach/userspace_connector.h"
#include "cli/table.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace blockcsi::cli {
namespace {

constexpr char kState[] = "/var/lib/blockcsi";

AttachRecord Record(const std::string& id, const std::string& device, const std::string& staged = "") {
  AttachRecord r;
  r.volume_id = id;
  r.connector = "userspace";
  r.transport = "iscsi";
  r.target_iqn = "iqn.2026-11.io.blockcsi:" + id;
  r.lun = 1;
  r.expected_serial = "serial-" + id;
  r.state = "attached";
  r.device_path = device;
  r.size_bytes = 1 << 30;
  std::string dir = std::string(kState) + "/bridges/" + id;
  r.connector_state = {{"bridge_dir", dir}, {"control_socket", dir + "/ctl.sock"}, {"mountpoint", dir + "/fuse"}};
  if (!staged.empty()) r.annotations["node.staged"] = staged;
  return r;
}

BridgeObservation Bridge(const std::string& id, const std::string& device, bool answered = true) {
  BridgeObservation b;
  b.volume_id = id;
  b.dir = std::string(kState) + "/bridges/" + id;
  b.control_socket = b.dir + "/ctl.sock";
  b.mountpoint = b.dir + "/fuse";
  b.answered = answered;
  b.fuse_mounted = answered;
  if (answered) {
    b.pids = {4242};
    b.device = device;
    b.serial = "serial-" + id;
  }
  return b;
}

MountEntry Mount(const std::string& target, const std::string& mm, const std::string& fs = "ext4",
                 const std::string& options = "rw,relatime", const std::string& root = "/") {
  MountEntry m;
  m.major_minor = mm;
  m.root = root;
  m.target = target;
  m.fs_type = fs;
  m.options = options;
  return m;
}

// A healthy, staged and published volume on /dev/loop3.
NodeSnapshot Healthy() {
  NodeSnapshot s;
  s.state_dir = kState;
  s.records = {Record("vol-a", "/dev/loop3", "mount,ext4,/stage/vol-a")};
  s.bridges = {Bridge("vol-a", "/dev/loop3")};
  s.loops = {{"/dev/loop3", "7:3", std::string(kState) + "/bridges/vol-a/fuse/lun"}};
  s.device_numbers = {{"/dev/loop3", "7:3"}};
  s.mounts = {Mount("/stage/vol-a", "7:3"), Mount("/var/lib/kubelet/pods/p1/volumes/vol-a/mount", "7:3")};
  s.usage["/stage/vol-a"] = {.total_bytes = 1000, .used_bytes = 250};
  return s;
}

// `s` classifies as exactly one finding, of `verdict`, whose detail holds
// `detail_part`.
::testing::AssertionResult OneFinding(const NodeSnapshot& s, const std::string& verdict,
                                      const std::string& detail_part = "") {
  auto findings = Classify(s);
  if (findings.size() != 1) return ::testing::AssertionFailure() << findings.size() << " findings, not 1";
  if (findings[0].verdict != verdict) {
    return ::testing::AssertionFailure() << "verdict " << findings[0].verdict << ", not " << verdict;
  }
  if (findings[0].detail.find(detail_part) == std::string::npos) {
    return ::testing::AssertionFailure() << "detail without \"" << detail_part << "\": " << findings[0].detail;
  }
  return ::testing::AssertionSuccess();
}

const Finding* FindingFor(const std::vector<Finding>& findings, const std::string& subject) {
  for (const auto& f : findings) {
    if (f.subject == subject) return &f;
  }
  return nullptr;
}

std::vector<std::string> Actions(const CleanupPlan& plan) {
  std::vector<std::string> out;
  for (const auto& s : plan.steps) out.push_back(s.target);
  return out;
}

TEST(NodeStateTest, ParsesTheStagedAnnotationWithACommaInThePath) {
  AttachRecord r = Record("v", "", "mount,xfs,/a,b/c");
  StagedAnnotation a = ParseStagedAnnotation(r);
  EXPECT_EQ(a.access_type, "mount");
  EXPECT_EQ(a.fs_type, "xfs");
  EXPECT_EQ(a.staging_path, "/a,b/c");
  EXPECT_EQ(ParseStagedAnnotation(Record("v", "")).staging_path, "");
}

TEST(NodeStateTest, DescribesStagingPublishAndUse) {
  auto views = DescribeVolumes(Healthy());
  ASSERT_EQ(views.size(), 1u);
  const VolumeView& v = views[0];
  EXPECT_EQ(v.device, "/dev/loop3");
  EXPECT_TRUE(v.device_present);
  EXPECT_TRUE(v.staging_mounted);
  EXPECT_EQ(v.fs_type, "ext4");
  EXPECT_EQ(v.publish_paths, std::vector<std::string>{"/var/lib/kubelet/pods/p1/volumes/vol-a/mount"});
  ASSERT_TRUE(v.usage.has_value());
  EXPECT_EQ(v.usage->used_bytes, 250u);
  EXPECT_EQ(v.serial, "serial-vol-a");
  EXPECT_EQ(v.attachment, "bridge pid 4242 running");
}

TEST(NodeStateTest, HealthyVolumeHasNothingToCleanUp) {
  auto findings = Classify(Healthy());
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].verdict, kVerdictHealthy) << findings[0].detail;
  CleanupPlan plan = PlanCleanup(Healthy());
  EXPECT_TRUE(plan.steps.empty());
  EXPECT_TRUE(plan.skipped.empty());
}

TEST(NodeStateTest, RawBlockPublishIsABindOfTheDeviceNode) {
  NodeSnapshot s = Healthy();
  s.records[0].annotations["node.staged"] = "block,,/stage/vol-a";
  s.mounts = {Mount("/var/lib/kubelet/pods/p1/volumeDevices/vol-a", "0:5", "devtmpfs", "rw", "/loop3")};
  s.usage.clear();
  auto views = DescribeVolumes(s);
  EXPECT_EQ(views[0].publish_paths, std::vector<std::string>{"/var/lib/kubelet/pods/p1/volumeDevices/vol-a"});
  EXPECT_EQ(Classify(s)[0].verdict, kVerdictHealthy);
}

TEST(NodeStateTest, DeadBridgeAndNoDeviceIsAStaleRecordCleanedByDetach) {
  NodeSnapshot s = Healthy();
  s.bridges = {Bridge("vol-a", "", false)};
  s.loops.clear();
  s.device_numbers.clear();
  s.mounts.clear();
  ASSERT_TRUE(OneFinding(s, kVerdictStaleRecord, "/dev/loop3 is gone"));
  CleanupPlan plan = PlanCleanup(s);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].kind, CleanupStep::Kind::kDetachRecord);
  EXPECT_NE(plan.steps[0].description.find("/var/lib/blockcsi/attachments/vol-a.json"), std::string::npos)
      << plan.steps[0].description;
}

TEST(NodeStateTest, AttachedButNeverStagedIsStale) {
  // The plugin was killed between attach and mkfs: the bridge runs on, the
  // record has no staging facts and nothing mounts the device.
  NodeSnapshot s = Healthy();
  s.records[0].annotations.clear();
  s.mounts.clear();
  ASSERT_TRUE(OneFinding(s, kVerdictStaleRecord, "never staged"));
  CleanupPlan plan = PlanCleanup(s);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_NE(plan.steps[0].description.find("stop bridge pid 4242"), std::string::npos) << plan.steps[0].description;
  EXPECT_NE(plan.steps[0].description.find("detach loop device /dev/loop3"), std::string::npos);
  EXPECT_NE(plan.steps[0].description.find("unmount FUSE"), std::string::npos);
}

TEST(NodeStateTest, YoungRecordOfARunningPluginMayBeAStageInFlight) {
  NodeSnapshot s = Healthy();
  s.records[0].annotations.clear();
  s.mounts.clear();
  s.plugin_reachable = true;
  s.record_age_seconds["vol-a"] = 5;
  CleanupPlan plan = PlanCleanup(s);
  EXPECT_TRUE(plan.steps.empty());
  ASSERT_EQ(plan.skipped.size(), 1u);
  EXPECT_NE(plan.skipped[0].detail.find("in flight"), std::string::npos);
  s.record_age_seconds["vol-a"] = kInFlightGraceSeconds + 1;
  EXPECT_EQ(PlanCleanup(s).steps.size(), 1u);
  s.record_age_seconds["vol-a"] = 5;
  s.plugin_reachable = false;  // killed mid-stage: nothing is in flight
  EXPECT_EQ(PlanCleanup(s).steps.size(), 1u);
}

TEST(NodeStateTest, AttachingRecordWithARunningBridgeIsStale) {
  NodeSnapshot s = Healthy();
  s.records[0].state = "attaching";
  EXPECT_EQ(Classify(s)[0].verdict, kVerdictStaleRecord);
}

TEST(NodeStateTest, StaleRecordStillUsedByAPodIsLeftAlone) {
  NodeSnapshot s = Healthy();
  s.bridges = {Bridge("vol-a", "", false)};  // bridge died, loop device and mounts remain
  auto findings = Classify(s);
  EXPECT_EQ(findings[0].verdict, kVerdictStaleRecord);
  CleanupPlan plan = PlanCleanup(s);
  EXPECT_TRUE(plan.steps.empty());
  ASSERT_EQ(plan.skipped.size(), 1u);
  EXPECT_NE(plan.skipped[0].detail.find("pods/p1"), std::string::npos) << plan.skipped[0].detail;
}

TEST(NodeStateTest, StaleRecordStagingMountIsUnmountedBeforeDetach) {
  NodeSnapshot s = Healthy();
  s.bridges = {Bridge("vol-a", "", false)};
  s.mounts.pop_back();  // no pod mount
  CleanupPlan plan = PlanCleanup(s);
  EXPECT_EQ(Actions(plan), (std::vector<std::string>{"/stage/vol-a", "vol-a"}));
  EXPECT_EQ(plan.steps[0].kind, CleanupStep::Kind::kUnmount);
}

// vol-a encrypted: its filesystem and the pod's bind are on its open
// dm-crypt mapping, not on the loop device under it.
NodeSnapshot Encrypted() {
  NodeSnapshot s = Healthy();
  s.records[0].annotations["node.crypt"] = "blockcsi-vol-a";
  s.crypt_mappings = {"blockcsi-vol-a"};
  s.device_numbers["/dev/mapper/blockcsi-vol-a"] = "253:0";
  s.mounts = {Mount("/stage/vol-a", "253:0"), Mount("/var/lib/kubelet/pods/p1/volumes/vol-a/mount", "253:0")};
  return s;
}

TEST(NodeStateTest, AnEncryptedVolumeIsMountedThroughItsMapping) {
  auto views = DescribeVolumes(Encrypted());
  ASSERT_EQ(views.size(), 1u);
  EXPECT_EQ(views[0].crypt_mapping, "blockcsi-vol-a");
  EXPECT_TRUE(views[0].crypt_open);
  EXPECT_TRUE(views[0].staging_mounted);
  EXPECT_EQ(views[0].publish_paths, std::vector<std::string>{"/var/lib/kubelet/pods/p1/volumes/vol-a/mount"});
  auto findings = Classify(Encrypted());
  ASSERT_EQ(findings.size(), 1u) << "the volume's own mapping is no orphan";
  EXPECT_EQ(findings[0].verdict, kVerdictHealthy) << findings[0].detail;
}

TEST(NodeStateTest, AStaleEncryptedRecordIsUnmountedClosedThenDetached) {
  NodeSnapshot s = Encrypted();
  s.bridges = {Bridge("vol-a", "", false)};
  s.mounts.pop_back();  // no pod mount
  CleanupPlan plan = PlanCleanup(s);
  EXPECT_EQ(Actions(plan), (std::vector<std::string>{"/stage/vol-a", "blockcsi-vol-a", "vol-a"}));
  ASSERT_EQ(plan.steps.size(), 3u);
  EXPECT_EQ(plan.steps[1].kind, CleanupStep::Kind::kCloseMapping);
}

TEST(NodeStateTest, AnOrphanMappingIsClosedUnlessAPodUsesIt) {
  NodeSnapshot s = Healthy();
  s.crypt_mappings = {"blockcsi-gone"};
  s.device_numbers["/dev/mapper/blockcsi-gone"] = "253:1";
  std::vector<Finding> findings = Classify(s);
  const Finding* f = FindingFor(findings, "blockcsi-gone");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->verdict, kVerdictOrphanMapping);
  CleanupPlan plan = PlanCleanup(s);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].kind, CleanupStep::Kind::kCloseMapping);
  EXPECT_EQ(plan.steps[0].target, "blockcsi-gone");
  s.mounts.push_back(Mount("/var/lib/kubelet/pods/p2/volumes/x/mount", "253:1"));
  plan = PlanCleanup(s);
  EXPECT_TRUE(plan.steps.empty());
  EXPECT_EQ(plan.skipped.size(), 1u);
}

TEST(NodeStateTest, IdentityMismatchWins) {
  NodeSnapshot s = Healthy();
  s.bridges[0].serial = "someone-else";
  auto findings = Classify(s);
  EXPECT_EQ(findings[0].verdict, kVerdictIdentityMismatch);
  EXPECT_NE(findings[0].detail.find("someone-else"), std::string::npos) << findings[0].detail;
  EXPECT_TRUE(PlanCleanup(s).steps.empty()) << "a mismatch is for a human, not for cleanup";
}

TEST(NodeStateTest, DeviceMissingWhileTheBridgeRuns) {
  NodeSnapshot s = Healthy();
  s.device_numbers.clear();
  s.loops.clear();
  s.mounts.clear();
  EXPECT_EQ(Classify(s)[0].verdict, kVerdictDeviceMissing);
}

TEST(NodeStateTest, ReadOnlyRemountIsSeen) {
  NodeSnapshot s = Healthy();
  s.mounts[0].options = "ro,relatime";
  EXPECT_EQ(Classify(s)[0].verdict, kVerdictReadOnly);
  s.records[0].read_only = true;
  EXPECT_EQ(Classify(s)[0].verdict, kVerdictHealthy) << "a read-only volume is meant to be";
}

TEST(NodeStateTest, OrphanBridgeWithItsMountIsUnmountedThenStopped) {
  NodeSnapshot s = Healthy();
  s.records.clear();
  s.mounts.pop_back();  // only the old staging mount is left
  auto findings = Classify(s);
  ASSERT_NE(FindingFor(findings, "vol-a"), nullptr);
  EXPECT_EQ(FindingFor(findings, "vol-a")->verdict, kVerdictOrphanBridge);
  EXPECT_EQ(FindingFor(findings, "vol-a")->bridge, kBridgeOrphan);
  ASSERT_NE(FindingFor(findings, "/stage/vol-a"), nullptr);
  EXPECT_EQ(FindingFor(findings, "/stage/vol-a")->verdict, kVerdictOrphanMount);
  EXPECT_EQ(FindingFor(findings, "/dev/loop3"), nullptr) << "the loop goes with its bridge";
  CleanupPlan plan = PlanCleanup(s);
  EXPECT_EQ(Actions(plan), (std::vector<std::string>{"/stage/vol-a", "vol-a"}));
  EXPECT_EQ(plan.steps[1].kind, CleanupStep::Kind::kStopBridge);
}

TEST(NodeStateTest, OrphanBridgeUnderAPodMountIsLeftAlone) {
  NodeSnapshot s = Healthy();
  s.records.clear();
  CleanupPlan plan = PlanCleanup(s);
  EXPECT_TRUE(plan.steps.empty()) << plan.steps[0].description;
  ASSERT_FALSE(plan.skipped.empty());
  EXPECT_EQ(plan.skipped[0].verdict, kVerdictOrphanBridge);
}

TEST(NodeStateTest, OrphanLoopWithoutBridgeIsDetached) {
  NodeSnapshot s;
  s.state_dir = kState;
  s.loops = {{"/dev/loop9", "7:9", std::string(kState) + "/bridges/gone/fuse/lun (deleted)"}};
  s.device_numbers = {{"/dev/loop9", "7:9"}};
  ASSERT_TRUE(OneFinding(s, kVerdictOrphanLoop));
  CleanupPlan plan = PlanCleanup(s);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].description, "losetup -d /dev/loop9");
  // A block publish of it (bind of the device node) protects it.
  s.mounts = {Mount("/var/lib/kubelet/pods/p/volumeDevices/x", "0:5", "devtmpfs", "rw", "/loop9")};
  plan = PlanCleanup(s);
  EXPECT_TRUE(plan.steps.empty());
  EXPECT_EQ(plan.skipped.size(), 1u);
}

TEST(NodeStateTest, FuseMountOfAVanishedBridgeIsAnOrphanMount) {
  NodeSnapshot s;
  s.state_dir = kState;
  s.mounts = {Mount(std::string(kState) + "/bridges/gone/fuse", "0:55", "fuse.blockcsi-bridge")};
  ASSERT_TRUE(OneFinding(s, kVerdictOrphanMount));
  EXPECT_EQ(PlanCleanup(s).steps.size(), 1u);
}

TEST(NodeStateTest, OnlyOurKernelSessionsCanBeOrphans) {
  NodeSnapshot s;
  s.state_dir = kState;
  s.sessions = {{"3", "iqn.x:ours", "10.0.0.1:3260", "blockcsi", "LOGGED_IN"},
                {"4", "iqn.x:theirs", "10.0.0.1:3260", "default", "LOGGED_IN"}};
  auto findings = Classify(s);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].subject, "session3");
  EXPECT_EQ(findings[0].verdict, kVerdictOrphanSession);
  CleanupPlan plan = PlanCleanup(s);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].kind, CleanupStep::Kind::kManual);

  AttachRecord r = Record("vol-k", "/dev/sdc", "mount,ext4,/stage/vol-k");
  r.connector = "iscsi";
  r.target_iqn = "iqn.x:ours";
  s.records = {r};
  s.device_numbers = {{"/dev/sdc", "8:32"}};
  s.mounts = {Mount("/stage/vol-k", "8:32")};
  findings = Classify(s);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].verdict, kVerdictHealthy) << findings[0].detail;
}

// The owner fields the userspace connector writes (plugin pid + start time).
NodeSnapshot OwnedBy(bool alive, bool adopted) {
  NodeSnapshot s = Healthy();
  auto& cs = s.records[0].connector_state;
  cs[kPluginPidKey] = "77";
  cs[kPluginStartTimeKey] = "123456";
  if (adopted) cs[kAdoptedKey] = "true";
  s.owner_alive["vol-a"] = alive;
  return s;
}

// Classify(s) finds the one volume, with `verdict` and its bridge's state
// `bridge`, and a detail that says `says`.
void ExpectOneBridgeFinding(const NodeSnapshot& s, const std::string& verdict, const std::string& bridge,
                            const std::string& says) {
  auto findings = Classify(s);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].verdict, verdict) << findings[0].detail;
  EXPECT_EQ(findings[0].bridge, bridge);
  EXPECT_NE(findings[0].detail.find(says), std::string::npos) << findings[0].detail;
}

TEST(NodeStateTest, BridgeStartedByTheRunningPluginIsHealthy) {
  ExpectOneBridgeFinding(OwnedBy(true, false), kVerdictHealthy, kBridgeStarted, "started by plugin pid 77");
}

TEST(NodeStateTest, AdoptedBridgeIsHealthyAndSaysSo) {
  NodeSnapshot s = OwnedBy(true, true);
  ASSERT_NO_FATAL_FAILURE(ExpectOneBridgeFinding(s, kVerdictHealthy, kBridgeAdopted, "adopted by plugin pid 77"));
  CleanupPlan plan = PlanCleanup(s);
  EXPECT_TRUE(plan.steps.empty());
  EXPECT_TRUE(plan.skipped.empty());
}

TEST(NodeStateTest, BridgeOfADeadPluginKeepsServingAndCleanupLeavesItToTheNextPlugin) {
  for (bool adopted : {false, true}) {
    NodeSnapshot s = OwnedBy(false, adopted);
    ASSERT_NO_FATAL_FAILURE(
        ExpectOneBridgeFinding(s, kVerdictPluginGone, kBridgePluginGone, "its plugin (pid 77) is gone"));
    // Never stopped under the pods: skipped, with what to do instead.
    CleanupPlan plan = PlanCleanup(s);
    EXPECT_TRUE(plan.steps.empty()) << Actions(plan).front();
    ASSERT_EQ(plan.skipped.size(), 1u);
    EXPECT_EQ(plan.skipped[0].verdict, kVerdictPluginGone);
    EXPECT_NE(plan.skipped[0].detail.find("adopts"), std::string::npos) << plan.skipped[0].detail;
  }
}

TEST(NodeStateTest, ADeadPluginsBridgeWithNothingStagedIsAStaleRecord) {
  // Worse verdicts win: nothing mounted means nothing to keep serving.
  NodeSnapshot s = OwnedBy(false, false);
  s.mounts.clear();
  s.usage.clear();
  auto findings = Classify(s);
  EXPECT_EQ(findings[0].verdict, kVerdictStaleRecord) << findings[0].detail;
  EXPECT_EQ(Actions(PlanCleanup(s)), std::vector<std::string>{"vol-a"});
}

TEST(NodeStateTest, RecordWithoutOwnerFieldsNamesNoOwner) {
  // Written by a plugin before owners were recorded: no claim either way.
  auto findings = Classify(Healthy());
  EXPECT_EQ(findings[0].verdict, kVerdictHealthy);
  EXPECT_EQ(findings[0].bridge, "");
}

TEST(NodeStateTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(0), "0");
  EXPECT_EQ(HumanBytes(512ULL << 20), "512Mi");
  EXPECT_EQ(HumanBytes(1536ULL << 20), "1.5Gi");
}

}  // namespace
}  // namespace blockcsi::cli
