// NodeService with real components: loop devices (LoopAttacher), libblkid,
// mkfs, libmount, bind mounts, xfs_growfs. Crashes are real too: a forked
// child runs the RPC and is SIGKILLed at a named step; the parent, as the
// restarted plugin, retries. Needs root; skipped with the reason otherwise.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <thread>

#include "common/atomic_file.h"
#include "common/block_probe.h"
#include "common/executor.h"
#include "common/host.h"
#include "common/logging.h"
#include "common/mounter.h"
#include "contract/publish_context.h"
#include "integration/node/loop_attacher.h"
#include "node/node_service.h"
#include "support/csi_capabilities.h"
#include "support/leak_check.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

// Counts the mkfs runs that go through it: "formatted once" is checked by
// count, not by timing.
class CountingExecutor final : public Executor {
 public:
  StatusOr<CommandResult> Run(const Command& command) override {
    if (command.Argv()[0].rfind("mkfs", 0) == 0) ++mkfs_runs;
    return real_->Run(command);
  }
  std::atomic<int> mkfs_runs{0};

 private:
  std::unique_ptr<Executor> real_ = MakeProcessExecutor();
};

class NodeRealTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::IsRoot()) GTEST_SKIP() << "needs root: loop devices, mkfs and mount";
    attacher_ = std::make_shared<testing::LoopAttacher>(dir_.Join("volumes"), 320ULL << 20);
    node_ = MakeNode(attacher_);
    baseline_ = testing::TakeLeakSnapshot(Scope());
  }

  // Only what this test made: mounts and loop devices under dir_ (and loops
  // stacked on those), so a concurrent test's loop devices never count.
  testing::LeakScope Scope() const {
    testing::LeakScope scope;
    scope.dir = dir_.path();
    return scope;
  }

  // Asserted right after a failing call and at the end of every test, before
  // any cleanup: what the node holds now that it did not hold at SetUp.
  void ExpectNothingLeft(const std::string& after) {
    EXPECT_TRUE(testing::NothingLeftSince(baseline_, Scope(), after));
  }

  void TearDown() override {
    if (!testing::IsRoot()) return;
    // Checked before the cleanup below, which would hide a leak.
    if (!HasFailure()) ExpectNothingLeft("the test (before the fixture cleans)");
    // Everything this test mounted lives under dir_: unmount deepest first,
    // then free the loop devices, also when the test failed half-way.
    auto table = ParseMountInfo(testing::ReadFileOrEmpty("/proc/self/mountinfo"));
    for (auto it = table.rbegin(); it != table.rend(); ++it) {
      if (it->target.rfind(dir_.path(), 0) == 0 && ::umount2(it->target.c_str(), 0) != 0) {
        ::umount2(it->target.c_str(), MNT_DETACH);
      }
    }
    if (attacher_) attacher_->DetachAll();
  }

  std::unique_ptr<NodeService> MakeNode(std::shared_ptr<VolumeAttacher> attacher, FaultHook fault_hook = {}) {
    NodeServiceOptions o;
    o.node_id = "node-real";
    o.attacher = std::move(attacher);
    o.mounter = MakeLibmountMounter();
    o.probe = MakeBlkidProbe();
    o.executor = executor_;
    o.host = MachineHost();
    o.fault_hook = std::move(fault_hook);
    return std::make_unique<NodeService>(std::move(o));
  }

  std::string Staging(const std::string& v) { return dir_.Join("staging/" + v); }
  std::string Target(const std::string& v) { return dir_.Join("pods/" + v + "/mount"); }

  csi::v1::NodeStageVolumeRequest StageRequest(const std::string& v, const std::string& fs) {
    csi::v1::NodeStageVolumeRequest r;
    r.set_volume_id(v);
    r.set_staging_target_path(Staging(v));
    *r.mutable_volume_capability() = testing::CapabilityFor(fs);
    auto& ctx = *r.mutable_publish_context();
    ctx[publish_context::kPortals] = "127.0.0.1:3260";
    ctx[publish_context::kTargetIqn] = "iqn.2026-11.io.blockcsi:" + v;
    ctx[publish_context::kLun] = "1";
    ctx[publish_context::kSerial] = "serial-" + v;
    std::filesystem::create_directories(Staging(v));
    return r;
  }

  csi::v1::NodePublishVolumeRequest PublishRequest(const std::string& v, bool block, bool readonly = false) {
    csi::v1::NodePublishVolumeRequest r;
    r.set_volume_id(v);
    r.set_staging_target_path(Staging(v));
    r.set_target_path(Target(v));
    r.set_readonly(readonly);
    *r.mutable_volume_capability() = block ? testing::BlockCapability() : testing::MountCapability();
    return r;
  }

  Status Unpublish(NodeService& node, const std::string& v) {
    csi::v1::NodeUnpublishVolumeRequest r;
    r.set_volume_id(v);
    r.set_target_path(Target(v));
    return node.Unpublish(r);
  }

  Status Unstage(NodeService& node, const std::string& v) {
    csi::v1::NodeUnstageVolumeRequest r;
    r.set_volume_id(v);
    r.set_staging_target_path(Staging(v));
    return node.Unstage(r);
  }

  csi::v1::NodeGetVolumeStatsResponse Stats(const std::string& v, const std::string& path) {
    csi::v1::NodeGetVolumeStatsRequest r;
    r.set_volume_id(v);
    r.set_volume_path(path);
    csi::v1::NodeGetVolumeStatsResponse resp;
    Status st = node_->Stats(r, &resp);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return resp;
  }

  // The filesystem UUID libblkid reads straight from the image: a reformat
  // would change it.
  std::string ImageUuid(const std::string& v) {
    auto probe = MakeBlkidProbe()->Probe(attacher_->ImagePath(v));
    if (!probe.ok() || probe->signatures.empty()) return "";
    return probe->signatures.front().uuid;
  }

  std::string ImageBytes(const std::string& v) { return testing::ReadFileOrEmpty(attacher_->ImagePath(v)); }

  void Run(const std::vector<std::string>& argv) {
    Command cmd(argv[0]);
    for (size_t i = 1; i < argv.size(); ++i) cmd.Arg(argv[i]);
    auto r = RunChecked(*MakeProcessExecutor(), cmd);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  // Runs `body` in a forked child that dies by SIGKILL at fault point
  // `point`; returns whether it did.
  bool RunAndKillAt(const std::string& point, const std::function<void(NodeService&)>& body) {
    pid_t pid = ::fork();
    if (pid == 0) {
      auto attacher = std::make_shared<testing::LoopAttacher>(dir_.Join("volumes"), 320ULL << 20);
      auto node = MakeNode(attacher, [point](std::string_view step) {
        if (step == point) ::raise(SIGKILL);
        return OkStatus();
      });
      body(*node);
      ::_exit(0);  // the fault point was never reached
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }

  void WriteFile(const std::string& path, const std::string& data) {
    std::ofstream out(path);
    out << data;
    out.close();
    ASSERT_TRUE(out.good()) << "write " << path;
  }

  testing::TempDir dir_;
  testing::LeakSnapshot baseline_;
  std::shared_ptr<CountingExecutor> executor_ = std::make_shared<CountingExecutor>();
  std::shared_ptr<testing::LoopAttacher> attacher_;
  std::unique_ptr<NodeService> node_;
};

TEST_F(NodeRealTest, Ext4LifecycleKeepsDataAcrossRestage) {
  const std::string v = "ext4vol";
  ASSERT_TRUE(node_->Stage(StageRequest(v, "ext4")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest(v, false)).ok());
  WriteFile(Target(v) + "/hello.txt", "hello ext4");
  std::string uuid = ImageUuid(v);
  ASSERT_FALSE(uuid.empty());
  ASSERT_TRUE(Unpublish(*node_, v).ok());
  EXPECT_FALSE(std::filesystem::exists(Target(v)));
  ASSERT_TRUE(Unstage(*node_, v).ok());
  EXPECT_TRUE(attacher_->LoopsOf(v).empty()) << "the loop device must be detached after unstage";

  ASSERT_TRUE(node_->Stage(StageRequest(v, "ext4")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest(v, false)).ok());
  EXPECT_EQ(testing::ReadFileOrEmpty(Target(v) + "/hello.txt"), "hello ext4");
  EXPECT_EQ(ImageUuid(v), uuid);
  EXPECT_EQ(executor_->mkfs_runs.load(), 1);
  ASSERT_TRUE(Unpublish(*node_, v).ok());
  ASSERT_TRUE(Unstage(*node_, v).ok());
}

// The figures come from the kernel (statvfs of the real mount), never from
// a fake: what is written moves used and available bytes and inodes by at
// least that much, and the total stays the filesystem's.
TEST_F(NodeRealTest, Ext4StatsFollowWhatIsWrittenOnTheRealFilesystem) {
  const std::string v = "ext4stats";
  ASSERT_TRUE(node_->Stage(StageRequest(v, "ext4")).ok());
  auto before = Stats(v, Staging(v));
  ASSERT_EQ(before.usage_size(), 2);
  constexpr int64_t kBytes = 8LL << 20;
  constexpr int kFiles = 20;
  {
    int fd = ::open((Staging(v) + "/big").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    std::string chunk(1 << 20, 'x');
    for (int64_t done = 0; done < kBytes; done += static_cast<int64_t>(chunk.size())) {
      ASSERT_EQ(::write(fd, chunk.data(), chunk.size()), static_cast<ssize_t>(chunk.size()));
    }
    EXPECT_EQ(::fsync(fd), 0);  // allocated, not only reserved
    ::close(fd);
  }
  for (int i = 0; i < kFiles; ++i) WriteFile(Staging(v) + "/f" + std::to_string(i), "");
  ::sync();
  auto after = Stats(v, Staging(v));
  ASSERT_EQ(after.usage_size(), 2);
  const auto &b0 = before.usage(0), &b1 = after.usage(0), &i0 = before.usage(1), &i1 = after.usage(1);
  EXPECT_EQ(b1.total(), b0.total());
  EXPECT_LE(b1.total(), 320LL << 20) << "more than the volume holds";
  EXPECT_GE(b1.used() - b0.used(), kBytes) << b0.used() << " -> " << b1.used();
  EXPECT_GE(b0.available() - b1.available(), kBytes) << b0.available() << " -> " << b1.available();
  EXPECT_LE(b1.used() + b1.available(), b1.total());
  EXPECT_EQ(i1.total(), i0.total());
  EXPECT_GE(i1.used() - i0.used(), kFiles + 1) << i0.used() << " -> " << i1.used();
  EXPECT_GE(i0.available() - i1.available(), kFiles + 1) << i0.available() << " -> " << i1.available();
  ASSERT_TRUE(Unstage(*node_, v).ok());
}

TEST_F(NodeRealTest, XfsLifecycleAndOnlineGrowVisibleInStats) {
  const std::string v = "xfsvol";
  ASSERT_TRUE(node_->Stage(StageRequest(v, "xfs")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest(v, false)).ok());
  WriteFile(Target(v) + "/data", "xfs data");
  auto before = Stats(v, Target(v));
  ASSERT_EQ(before.usage_size(), 2);
  EXPECT_FALSE(before.volume_condition().abnormal()) << before.volume_condition().message();
  EXPECT_GT(before.usage(1).used(), 0);

  // The "controller" grows the LUN; the node rescans and grows online.
  ASSERT_EQ(::truncate(attacher_->ImagePath(v).c_str(), 640LL << 20), 0);
  csi::v1::NodeExpandVolumeRequest req;
  req.set_volume_id(v);
  req.set_volume_path(Target(v));
  req.mutable_capacity_range()->set_required_bytes(640LL << 20);
  csi::v1::NodeExpandVolumeResponse resp;
  Status st = node_->Expand(req, &resp);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(resp.capacity_bytes(), 640LL << 20);
  auto after = Stats(v, Target(v));
  EXPECT_GT(after.usage(0).total(), before.usage(0).total() + (250LL << 20));
  EXPECT_EQ(testing::ReadFileOrEmpty(Target(v) + "/data"), "xfs data");

  ASSERT_TRUE(Unpublish(*node_, v).ok());
  ASSERT_TRUE(Unstage(*node_, v).ok());
  ASSERT_TRUE(node_->Stage(StageRequest(v, "xfs")).ok());
  EXPECT_EQ(testing::ReadFileOrEmpty(Staging(v) + "/data"), "xfs data");
  EXPECT_EQ(executor_->mkfs_runs.load(), 1);
  ASSERT_TRUE(Unstage(*node_, v).ok());
}

TEST_F(NodeRealTest, Ext4OnlineGrowReportsMissingCapSysResource) {
  if (MachineHost()->HasCapSysResource()) GTEST_SKIP() << "this host has CAP_SYS_RESOURCE";
  const std::string v = "ext4grow";
  ASSERT_TRUE(node_->Stage(StageRequest(v, "ext4")).ok());
  ASSERT_EQ(::truncate(attacher_->ImagePath(v).c_str(), 640LL << 20), 0);
  csi::v1::NodeExpandVolumeRequest req;
  req.set_volume_id(v);
  req.set_volume_path(Staging(v));
  csi::v1::NodeExpandVolumeResponse resp;
  Status st = node_->Expand(req, &resp);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("CAP_SYS_RESOURCE"), std::string::npos) << st.message();
  ASSERT_TRUE(Unstage(*node_, v).ok());
}

TEST_F(NodeRealTest, RawBlockLifecycleWritesReachTheVolume) {
  const std::string v = "blockvol";
  ASSERT_TRUE(node_->Stage(StageRequest(v, "block")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest(v, true)).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest(v, true)).ok());
  std::string pattern(4096, 'B');
  {
    int fd = ::open(Target(v).c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << "open the published block file";
    ASSERT_EQ(::pwrite(fd, pattern.data(), pattern.size(), 1 << 20), static_cast<ssize_t>(pattern.size()));
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  auto stats = Stats(v, Target(v));
  ASSERT_EQ(stats.usage_size(), 1);
  EXPECT_EQ(stats.usage(0).total(), 320LL << 20);
  csi::v1::NodeUnstageVolumeRequest busy;
  busy.set_volume_id(v);
  busy.set_staging_target_path(Staging(v));
  EXPECT_EQ(node_->Unstage(busy).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Unpublish(*node_, v).ok());
  ASSERT_TRUE(Unstage(*node_, v).ok());
  EXPECT_EQ(ImageBytes(v).substr(1 << 20, 4096), pattern);
  EXPECT_EQ(executor_->mkfs_runs.load(), 0);
}

TEST_F(NodeRealTest, RawBlockReadOnlyPublishRefusesWrites) {
  const std::string v = "roblock";
  ASSERT_TRUE(node_->Stage(StageRequest(v, "block")).ok());
  Status st = node_->Publish(PublishRequest(v, true, true));
  ASSERT_TRUE(st.ok()) << st.ToString();
  // The kernel may let the open through; the write itself must fail.
  int fd = ::open(Target(v).c_str(), O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    std::string block(4096, 'W');
    EXPECT_LT(::pwrite(fd, block.data(), block.size(), 0), 0) << "a read-only raw block publish took a write";
    ::close(fd);
  }
  EXPECT_EQ(ImageBytes(v).substr(0, 4096), std::string(4096, '\0'));
  fd = ::open(Target(v).c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << "reading must work";
  if (fd >= 0) ::close(fd);
  EXPECT_EQ(Unstage(*node_, v).code(), StatusCode::kFailedPrecondition) << "the read-only layer still uses it";
  ASSERT_TRUE(Unpublish(*node_, v).ok());
  ASSERT_TRUE(Unstage(*node_, v).ok());
  EXPECT_TRUE(attacher_->LoopsOf(v).empty());
  // The read-only layer is a loop stacked on the volume's: the checker
  // counts it, and only ours (a concurrent test's loops do not fail this).
  ExpectNothingLeft("unstaging the read-only raw block volume");
}

TEST_F(NodeRealTest, AnotherFilesystemIsRefusedAndLeftUnchanged) {
  const std::string v = "foreignfs";
  attacher_->CreateImage(v, 64 << 20);
  Run({"mkfs.ext4", "-q", "-F", attacher_->ImagePath(v)});
  std::string before = ImageBytes(v);
  Status st = node_->Stage(StageRequest(v, "xfs"));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("ext4"), std::string::npos) << st.message();
  EXPECT_TRUE(ImageBytes(v) == before) << "the refused volume's bytes changed";
  EXPECT_EQ(executor_->mkfs_runs.load(), 0);
  ExpectNothingLeft("the refused stage");
  ASSERT_TRUE(Unstage(*node_, v).ok());
}

TEST_F(NodeRealTest, PartitionTableIsRefusedAndLeftUnchanged) {
  const std::string v = "parted";
  attacher_->CreateImage(v, 64 << 20);
  Command sfdisk("sfdisk");
  sfdisk.Arg("--quiet").Arg(attacher_->ImagePath(v)).Stdin("label: dos\n,,L\n");
  auto r = RunChecked(*MakeProcessExecutor(), sfdisk);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::string before = ImageBytes(v);
  Status st = node_->Stage(StageRequest(v, "ext4"));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("dos"), std::string::npos) << st.message();
  EXPECT_TRUE(ImageBytes(v) == before) << "the refused volume's bytes changed";
  ExpectNothingLeft("the refused stage");
  ASSERT_TRUE(Unstage(*node_, v).ok());
}

TEST_F(NodeRealTest, ReadOnlyPublishRefusesWrites) {
  const std::string v = "rovol";
  ASSERT_TRUE(node_->Stage(StageRequest(v, "ext4")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest(v, false, true)).ok());
  int fd = ::open((Target(v) + "/nope").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  int err = errno;
  EXPECT_LT(fd, 0);
  EXPECT_EQ(err, EROFS);
  if (fd >= 0) ::close(fd);
  // The staging mount stays writable; only the publish is read-only.
  WriteFile(Staging(v) + "/yes", "ok");
  ASSERT_TRUE(Unpublish(*node_, v).ok());
  ASSERT_TRUE(Unstage(*node_, v).ok());
}

TEST_F(NodeRealTest, StageWhereAnotherVolumeIsMountedFails) {
  ASSERT_TRUE(node_->Stage(StageRequest("vola", "ext4")).ok());
  auto req = StageRequest("volb", "ext4");
  req.set_staging_target_path(Staging("vola"));
  Status st = node_->Stage(req);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  ASSERT_TRUE(Unstage(*node_, "vola").ok());
}

TEST_F(NodeRealTest, KilledBetweenAttachAndMkfsRetryFormatsOnce) {
  const std::string v = "crash1";
  auto req = StageRequest(v, "ext4");
  ASSERT_TRUE(RunAndKillAt("node.stage.after-attach", [&](NodeService& n) { (void)n.Stage(req); }));
  EXPECT_EQ(ImageUuid(v), "") << "killed before mkfs: the volume must still be blank";
  EXPECT_EQ(attacher_->LoopsOf(v).size(), 1u);
  ASSERT_TRUE(node_->Stage(req).ok());
  EXPECT_EQ(executor_->mkfs_runs.load(), 1);
  EXPECT_EQ(attacher_->LoopsOf(v).size(), 1u);
  ASSERT_TRUE(Unstage(*node_, v).ok());
}

TEST_F(NodeRealTest, KilledBetweenMkfsAndMountRetryNeverReformats) {
  const std::string v = "crash2";
  auto req = StageRequest(v, "xfs");
  ASSERT_TRUE(RunAndKillAt("node.stage.after-mkfs", [&](NodeService& n) { (void)n.Stage(req); }));
  std::string uuid = ImageUuid(v);
  ASSERT_FALSE(uuid.empty()) << "the child should have made the filesystem";
  ASSERT_TRUE(node_->Stage(req).ok());
  EXPECT_EQ(executor_->mkfs_runs.load(), 0) << "the retry must mount the filesystem the crashed run made";
  EXPECT_EQ(ImageUuid(v), uuid);

  // Data written now survives a later crash in the middle of unstage.
  WriteFile(Staging(v) + "/precious", "keep me");
  ASSERT_TRUE(RunAndKillAt("node.unstage.after-unmount", [&](NodeService& n) { (void)Unstage(n, v); }));
  ASSERT_TRUE(Unstage(*node_, v).ok());
  ASSERT_TRUE(node_->Stage(req).ok());
  EXPECT_EQ(testing::ReadFileOrEmpty(Staging(v) + "/precious"), "keep me");
  EXPECT_EQ(ImageUuid(v), uuid);
  ASSERT_TRUE(Unstage(*node_, v).ok());
}

TEST_F(NodeRealTest, KilledAfterMountRetryIsOk) {
  const std::string v = "crash3";
  auto req = StageRequest(v, "ext4");
  ASSERT_TRUE(RunAndKillAt("node.stage.after-mount", [&](NodeService& n) { (void)n.Stage(req); }));
  ASSERT_TRUE(node_->Stage(req).ok());
  EXPECT_EQ(executor_->mkfs_runs.load(), 0);
  auto table = ParseMountInfo(testing::ReadFileOrEmpty("/proc/self/mountinfo"));
  EXPECT_EQ(std::count_if(table.begin(), table.end(), [&](const MountEntry& e) { return e.target == Staging(v); }), 1)
      << "the retry must not stack a second mount";
  ASSERT_TRUE(Unstage(*node_, v).ok());
}

TEST_F(NodeRealTest, ConcurrentStageOfOneVolumeFormatsOnce) {
  const std::string v = "racer";
  auto req = StageRequest(v, "ext4");
  std::vector<std::future<Status>> results;
  for (int i = 0; i < 6; ++i) {
    results.push_back(std::async(std::launch::async, [&] { return node_->Stage(req); }));
  }
  int ok = 0;
  for (auto& f : results) {
    Status st = f.get();
    EXPECT_TRUE(st.ok() || st.code() == StatusCode::kAborted) << st.ToString();
    ok += st.ok();
  }
  EXPECT_GE(ok, 1);
  ASSERT_TRUE(node_->Stage(req).ok());
  EXPECT_EQ(executor_->mkfs_runs.load(), 1);
  ASSERT_TRUE(Unstage(*node_, v).ok());
}

TEST_F(NodeRealTest, SixteenVolumesStageConcurrently) {
  std::vector<std::string> volumes;
  for (int i = 0; i < 16; ++i) volumes.push_back("many" + std::to_string(i));
  std::vector<csi::v1::NodeStageVolumeRequest> reqs;
  for (const auto& v : volumes) reqs.push_back(StageRequest(v, "ext4"));
  std::vector<std::future<Status>> results;
  for (const auto& r : reqs) {
    results.push_back(std::async(std::launch::async, [&] { return node_->Stage(r); }));
  }
  for (size_t i = 0; i < results.size(); ++i) {
    Status st = results[i].get();
    EXPECT_TRUE(st.ok()) << volumes[i] << ": " << st.ToString();
  }
  EXPECT_EQ(executor_->mkfs_runs.load(), 16);
  for (const auto& v : volumes) {
    auto stats = Stats(v, Staging(v));
    EXPECT_FALSE(stats.volume_condition().abnormal()) << v << ": " << stats.volume_condition().message();
    EXPECT_TRUE(Unstage(*node_, v).ok()) << v;
  }
}

TEST_F(NodeRealTest, RestartedPluginKeepsServingStagedVolumes) {
  const std::string v = "survivor";
  ASSERT_TRUE(node_->Stage(StageRequest(v, "ext4")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest(v, false)).ok());
  WriteFile(Target(v) + "/f", "still here");
  // A new plugin: fresh attacher and service over the same state.
  auto attacher = std::make_shared<testing::LoopAttacher>(dir_.Join("volumes"), 320ULL << 20);
  node_ = MakeNode(attacher);
  node_->LogAdoptedVolumes();
  ASSERT_TRUE(node_->Stage(StageRequest(v, "ext4")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest(v, false)).ok());
  auto stats = Stats(v, Target(v));
  EXPECT_FALSE(stats.volume_condition().abnormal()) << stats.volume_condition().message();
  EXPECT_EQ(testing::ReadFileOrEmpty(Target(v) + "/f"), "still here");
  EXPECT_EQ(executor_->mkfs_runs.load(), 1);
  ASSERT_TRUE(Unpublish(*node_, v).ok());
  ASSERT_TRUE(Unstage(*node_, v).ok());
}

TEST_F(NodeRealTest, ConditionTurnsAbnormalWhenTheMountOrDeviceGoes) {
  const std::string v = "fragile";
  ASSERT_TRUE(node_->Stage(StageRequest(v, "ext4")).ok());
  ASSERT_TRUE(node_->Publish(PublishRequest(v, false)).ok());
  // Someone unmounts the publish behind our back.
  ASSERT_EQ(::umount2(Target(v).c_str(), 0), 0);
  auto stats = Stats(v, Target(v));
  EXPECT_TRUE(stats.volume_condition().abnormal());
  EXPECT_NE(stats.volume_condition().message().find("mount is gone"), std::string::npos)
      << stats.volume_condition().message();
  ASSERT_TRUE(Unpublish(*node_, v).ok());
  ASSERT_TRUE(Unstage(*node_, v).ok());
}

// What the plugin runs for one volume (mkfs, e2fsck, tgtadm) must not keep
// another volume's mount busy. libmount holds a mount's target open (O_PATH,
// without O_CLOEXEC) while it mounts or unmounts; a program forked by
// another thread in that moment kept the descriptor across exec, and the
// unmount failed with "target is busy" while the program ran (the bare
// storm of lifecycle_bench, which unmounts while other threads run losetup).
TEST(ExecutedProgramTest, DoesNotKeepAnotherVolumesMountBusy) {
  if (!testing::IsRoot()) GTEST_SKIP() << "needs root: mount";
  testing::TempDir dir;
  const std::string mnt = dir.Join("mnt");
  ASSERT_TRUE(std::filesystem::create_directory(mnt));
  ASSERT_EQ(::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m"), 0) << std::strerror(errno);
  int held = ::open(mnt.c_str(), O_PATH);  // as libmount's, at the moment of the fork
  const int open_errno = errno;
  const std::string started = dir.Join("started"), release = dir.Join("release");
  auto exec = MakeProcessExecutor();
  std::thread program([&] {
    (void)exec->Run(
        Command("/bin/sh").Arg("-c").Arg("touch " + started + "; while [ ! -e " + release + " ]; do sleep 0.01; done"));
  });
  for (int i = 0; i < 1000 && ::access(started.c_str(), F_OK) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const bool program_ran = ::access(started.c_str(), F_OK) == 0;
  if (held >= 0) ::close(held);  // libmount's own copy is closed before its umount2
  Status unmounted = MakeLibmountMounter()->Unmount(mnt);
  std::ofstream(release).put('x');
  program.join();
  if (!unmounted.ok()) ::umount2(mnt.c_str(), MNT_DETACH);
  ASSERT_GE(held, 0) << std::strerror(open_errno);
  ASSERT_TRUE(program_ran) << "the program never started";
  EXPECT_TRUE(unmounted.ok()) << unmounted.ToString();
}

}  // namespace
}  // namespace blockcsi
