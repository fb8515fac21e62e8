// The CSI community's conformance suite (csi-sanity v5.3.1, issue #15)
// against the real plugin, as a new user would run it: `blockcsi --mode all
// --connector userspace` with the local backend on a private tgtd (mount and
// block access types) or with --backend rbd on the throw-away Ceph, 64 MiB
// volumes. The binary comes from ../shared/peers (unpacked into the build
// tree, never into the sources); where that is absent — a user's own clone —
// the test skips and says so. 0 failed specs is the bar. The only spec ever
// skipped by name is ext4 online grow, and only where this process lacks
// CAP_SYS_RESOURCE (the kernel then refuses resize2fs on a mounted ext4;
// the reason is printed). After the suite, nothing it made may remain:
// the leak checker compares the machine with its state before the run.
//
// Needs root, tgtd (local) or the Ceph packages (rbd), /dev/fuse and loop
// devices; skips with the reason otherwise.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/ceph_test_cluster.h"
#include "support/leak_check.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;

constexpr char kVolumeBytes[] = "67108864";  // 64 MiB
constexpr char kOnlineGrowSpec[] = "should work if node-expand is called after node-publish";
constexpr int kCapSysResource = 24;

std::string PeersDir() { return std::filesystem::weakly_canonical(testing::SourceDir() + "/../shared/peers").string(); }

bool HasEffectiveCapability(int cap) {
  std::istringstream status(testing::ReadFileOrEmpty("/proc/self/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> cap) & 1;
  }
  return false;
}

// Unpacks csi-sanity into <build>/peers once (again when the packed file is
// newer). "" on success, else why not.
std::string UnpackCsiSanity(std::string* binary) {
  const std::string packed = PeersDir() + "/bin/csi-sanity.xz";
  const std::string out_dir = testing::BuildDir() + "/peers";
  *binary = out_dir + "/csi-sanity";
  std::error_code ec;
  if (std::filesystem::exists(*binary, ec) &&
      std::filesystem::last_write_time(*binary, ec) >= std::filesystem::last_write_time(packed, ec)) {
    return "";
  }
  std::filesystem::create_directories(out_dir, ec);
  const std::string tmp = *binary + ".tmp." + std::to_string(::getpid());
  testing::ChildProcess xz({"/usr/bin/xz", "--decompress", "--stdout", packed}, tmp);
  if (xz.Wait(120s) != 0) {
    std::filesystem::remove(tmp, ec);
    return "xz could not unpack " + packed;
  }
  ::chmod(tmp.c_str(), 0755);
  std::filesystem::rename(tmp, *binary, ec);
  return ec ? "cannot place " + *binary + ": " + ec.message() : "";
}

struct SpecCounts {
  int passed = -1, failed = -1, pending = -1, skipped = -1;
};

// Ginkgo's summary line: "... -- 76 Passed | 0 Failed | 1 Pending | 15 Skipped".
SpecCounts ParseSummary(const std::string& log) {
  SpecCounts c;
  std::smatch m;
  static const std::regex summary(R"((\d+) Passed \| (\d+) Failed \| (\d+) Pending \| (\d+) Skipped)");
  if (std::regex_search(log, m, summary)) {
    c.passed = std::stoi(m[1]);
    c.failed = std::stoi(m[2]);
    c.pending = std::stoi(m[3]);
    c.skipped = std::stoi(m[4]);
  }
  return c;
}

std::string FailedSpecs(const std::string& log) {
  std::istringstream lines(log);
  std::string line, out;
  while (std::getline(lines, line)) {
    if (line.find("[FAIL]") != std::string::npos) out += line + "\n";
  }
  return out;
}

class CsiSanity : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(PeersDir() + "/bin/csi-sanity.xz")) {
      GTEST_SKIP() << "csi-sanity is not here: " << PeersDir()
                   << "/bin/csi-sanity.xz is absent (a clone without ../shared/peers)";
    }
    if (!testing::IsRoot()) GTEST_SKIP() << "needs root: tgtd, FUSE, loop devices and mount";
    if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "needs /dev/fuse";
    if (!std::filesystem::exists("/dev/loop-control")) GTEST_SKIP() << "needs loop devices (/dev/loop-control)";
    std::string why = UnpackCsiSanity(&sanity_);
    ASSERT_TRUE(why.empty()) << why;
  }

  void TearDown() override {
    if (plugin_) plugin_->Stop();
    testing::CleanUpUnder(dir_.path());
  }

  // csi-sanity v5.3.1's spec counts for a run: every spec in one of them,
  // so a spec that drifts from passed to skipped (a capability no longer
  // advertised, a spec we stopped running) fails the test instead of
  // leaving it green.
  struct ExpectedSpecs {
    int passed, pending, skipped;
  };
  // A mount-mode run passes the online-grow spec where it can run it and
  // skips it otherwise (see RunSuite).
  static ExpectedSpecs MountSpecs() {
    return HasEffectiveCapability(kCapSysResource) ? ExpectedSpecs{76, 1, 15} : ExpectedSpecs{75, 1, 16};
  }

  // Runs the suite against `options` (tgtd may be null) and checks the result.
  // `secrets_file`: csi-sanity's -csi.secrets YAML, "" for none. `scope`:
  // what the leak check looks at beyond the test's directory, the plugin's
  // state and (local backend) its pool.
  void RunSuite(const std::string& name, testing::PluginOptions options, const testing::TgtdHarness* tgtd, bool block,
                ExpectedSpecs expected, const std::string& secrets_file = "", testing::LeakScope scope = {}) {
    plugin_ = std::make_unique<testing::PluginUnderTest>(dir_.Join("plugin"), tgtd);
    options.extra_args.insert(options.extra_args.end(), {"--log-level", "debug"});
    std::string error;
    ASSERT_TRUE(plugin_->Start(options, &error)) << error;

    // GOMAXPROCS=1: csi-sanity v5.3.1's utils.Connect dials without
    // blocking, then waits for the connection's state to change from what
    // it reads next. When the connection reaches READY before that read (a
    // unix socket on a busy machine, where its main goroutine is descheduled
    // while the dialing one runs), it waits for a change away from READY
    // that never comes, and the first spec fails "Connection timed out" a
    // minute later while every later one passes on the same connection. On
    // one P the dialing goroutine runs only once the main one blocks in that
    // wait, after its read.
    std::vector<std::string> argv = {"/usr/bin/env", "GOMAXPROCS=1", sanity_, "-csi.endpoint", plugin_->socket(),
                                     // Both must not exist yet: csi-sanity makes them.
                                     "-csi.stagingdir", dir_.Join("sanity-staging"), "-csi.mountdir",
                                     dir_.Join("sanity-mount"), "-csi.testvolumesize", kVolumeBytes,
                                     "-ginkgo.no-color"};
    if (block) argv.insert(argv.end(), {"-csi.testvolumeaccesstype", "block"});
    if (!secrets_file.empty()) argv.insert(argv.end(), {"-csi.secrets", secrets_file});
    if (!block && !HasEffectiveCapability(kCapSysResource)) {
      // Growing a mounted ext4 (the default filesystem) takes CAP_SYS_RESOURCE;
      // without it the kernel refuses whatever the driver does.
      std::cout << "csi-sanity: skipping \"" << kOnlineGrowSpec
                << "\": this process lacks CAP_SYS_RESOURCE, which online ext4 growth needs\n";
      argv.insert(argv.end(), {"-ginkgo.skip", kOnlineGrowSpec});
    }
    scope.dir = dir_.path();
    scope.state_dir = plugin_->state_dir();
    if (options.backend == "local") scope.pool_dir = plugin_->pool_dir();
    scope.tgtd = tgtd;
    testing::LeakSnapshot before = testing::TakeLeakSnapshot(scope);

    const std::string log_path = dir_.Join("csi-sanity-" + name + ".log");
    std::string command;
    for (const auto& a : argv) command += (command.empty() ? "" : " ") + a;
    std::cout << "csi-sanity command: " << command << "\n";
    testing::ChildProcess sanity(argv, log_path);
    int code = sanity.Wait(20min);
    std::string log = testing::ReadFileOrEmpty(log_path);
    SpecCounts counts = ParseSummary(log);
    std::cout << "csi-sanity " << name << ": " << counts.passed << " passed, " << counts.failed << " failed, "
              << counts.pending << " pending, " << counts.skipped << " skipped (exit " << code << ")\n"
              << std::flush;
    // Kept next to the build for the record (the temp dir goes away).
    std::ofstream(testing::BuildDir() + "/csi-sanity-" + name + ".log") << log;

    EXPECT_EQ(code, 0) << FailedSpecs(log) << "\nplugin log tail:\n" << plugin_->LogTail();
    EXPECT_EQ(counts.failed, 0) << FailedSpecs(log);
    EXPECT_GT(counts.passed, 0) << "no summary in csi-sanity's output:\n" << log.substr(0, 4000);
    EXPECT_EQ(counts.passed, expected.passed) << "specs that no longer pass or newly pass; log:\n"
                                              << log.substr(0, 4000);
    EXPECT_EQ(counts.pending, expected.pending);
    EXPECT_EQ(counts.skipped, expected.skipped) << "specs that drifted into or out of 'skipped'";
    std::vector<std::string> leaks = testing::NewItemsAfterSettling(before, scope);
    EXPECT_TRUE(leaks.empty()) << "left behind by the suite:" << testing::DescribeItems(leaks);
  }

  testing::TempDir dir_;
  std::string sanity_;
  std::unique_ptr<testing::PluginUnderTest> plugin_;
};

class CsiSanityLocal : public CsiSanity {
 protected:
  void SetUp() override {
    CsiSanity::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    std::string error;
    tgtd_ = testing::TgtdHarness::Start(&error);
    ASSERT_TRUE(tgtd_) << "cannot start tgtd: " << error;
  }
  void TearDown() override {
    CsiSanity::TearDown();
    tgtd_.reset();
  }
  std::unique_ptr<testing::TgtdHarness> tgtd_;
};

TEST_F(CsiSanityLocal, Mount) {
  RunSuite("mount", testing::PluginOptions{}, tgtd_.get(), /*block=*/false, MountSpecs());
}

TEST_F(CsiSanityLocal, Block) {
  RunSuite("block", testing::PluginOptions{}, tgtd_.get(), /*block=*/true, ExpectedSpecs{76, 1, 15});
}

TEST_F(CsiSanity, Rbd) {
  std::string why = testing::CephTestCluster::SkipReason();
  if (!why.empty()) GTEST_SKIP() << why;
  std::string error;
  auto cluster = testing::CephTestCluster::Acquire(&error);
  ASSERT_TRUE(cluster) << error;
  auto env = cluster->env();
  testing::PluginOptions options;
  options.backend = "rbd";
  options.extra_args = {"--ceph-conf",    env["CEPH_CONF"],
                        "--ceph-user",    env["BLOCKCSI_CEPH_USER"],
                        "--ceph-keyring", env["BLOCKCSI_CEPH_KEYRING"],
                        "--rbd-pool",     env["RBD_POOL"]};
  // The node stages with the cephx user of the node-stage secret, as a
  // StorageClass's csi.storage.k8s.io/node-stage-secret would hand it over.
  const std::string key = testing::KeyFromKeyring(env["BLOCKCSI_CEPH_KEYRING"]);
  ASSERT_FALSE(key.empty()) << "no key in " << env["BLOCKCSI_CEPH_KEYRING"];
  const std::string secrets = dir_.Join("sanity-secrets.yaml");
  {
    std::ofstream out(secrets);
    out << "NodeStageVolumeSecret:\n  userID: " << env["BLOCKCSI_CEPH_USER"] << "\n  userKey: " << key << "\n";
  }
  ::chmod(secrets.c_str(), 0600);
  // The whole pool's images and snapshots are looked at (this entry runs
  // alone: RUN_SERIAL), not only the plugin's own directory.
  RunSuite("rbd", options, nullptr, /*block=*/false, MountSpecs(), secrets, testing::RbdPoolLeakScope(env));
  if (plugin_) plugin_->Stop();  // before the cluster it talks to goes
}

}  // namespace
}  // namespace blockcsi
