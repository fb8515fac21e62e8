#include "k8s/k8s_test_base.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "contract/initiator.h"

namespace blockcsi::testing {
namespace {
using namespace std::chrono_literals;
using Json = nlohmann::json;
}  // namespace

std::unique_ptr<KubeEnvironment> KubeTest::env_;
std::string KubeTest::skip_reason_;
std::string KubeTest::start_error_;

namespace {
// The default environment outlives each test suite: it goes when the
// binary's tests are done, so that every suite of the binary shares one
// cluster.
class StopEnvironmentAtExit : public ::testing::Environment {
 public:
  void TearDown() override { KubeTest::StopEnvironment(); }
};
const ::testing::Environment* const kStopAtExit = ::testing::AddGlobalTestEnvironment(new StopEnvironmentAtExit);
}  // namespace

void KubeTest::StopEnvironment() { env_.reset(); }

void KubeTest::SetUpTestSuite() {
  if (env_ || !start_error_.empty()) return;  // started (or failed) for an earlier suite
  StartEnvironment({});
}

void KubeTest::StartEnvironment(const KubeEnvironmentOptions& options) {
  env_.reset();
  start_error_.clear();
  skip_reason_ = KubeEnvironment::MissingCapability();
  if (!skip_reason_.empty()) return;
  auto started = std::chrono::steady_clock::now();
  env_ = KubeEnvironment::Start(options, &start_error_);
  if (env_) {
    std::cout
        << "[ k8s      ] environment up in "
        << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count()
        << " ms\n";
  }
}

void KubeTest::SetUp() {
  if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  ASSERT_TRUE(env_) << "cannot start the k8s environment: " << start_error_;
}

void KubeTest::MakeNamespace(const std::string& ns) {
  KubectlResult r = cluster().Kubectl({"create", "namespace", ns});
  ASSERT_TRUE(r.ok()) << r.err;
}

void KubeTest::Apply(const std::string& manifest) {
  std::string error;
  ASSERT_TRUE(cluster().Apply(manifest, &error)) << error;
}

bool KubeTest::WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  return kubelet().WaitFor(done, timeout);
}

std::vector<std::string> KubeTest::AclOf(const std::string& target_iqn) { return AclOf(target_iqn, env().tgtd()); }

std::vector<std::string> KubeTest::AclOf(const std::string& target_iqn, TgtdHarness& tgtd) {
  // "Target 1: <iqn>" opens a target's block; its "ACL information:"
  // section lists one initiator name per indented line.
  std::istringstream in(tgtd.ShowTargets());
  std::string line;
  bool in_target = false;
  bool in_acl = false;
  std::vector<std::string> acl;
  while (std::getline(in, line)) {
    if (line.rfind("Target ", 0) == 0) {
      in_target = line.size() >= target_iqn.size() && line.substr(line.find(": ") + 2) == target_iqn;
      in_acl = false;
      continue;
    }
    if (!in_target) continue;
    std::string trimmed = line.substr(std::min(line.find_first_not_of(' '), line.size()));
    if (trimmed == "ACL information:") {
      in_acl = true;
    } else if (in_acl && line.rfind("        ", 0) == 0 && !trimmed.empty()) {
      acl.push_back(trimmed);
    } else if (in_acl) {
      in_acl = false;
    }
  }
  return acl;
}

bool KubeTest::HasTarget(const std::string& target_iqn) {
  return env().tgtd().ShowTargets().find(": " + target_iqn + "\n") != std::string::npos;
}

LeakScope KubeTest::Scope() {
  LeakScope scope;
  scope.dir = env().dir();
  scope.state_dir = env().node_plugin().state_dir();
  scope.pool_dir = env().controller().pool_dir();
  scope.tgtd = &env().tgtd();
  scope.ignore_pids = cluster().Pids();
  scope.ignore_pids.push_back(env().controller().pid());
  scope.ignore_pids.push_back(env().node_plugin().pid());
  return scope;
}

void KubeTest::ExpectNothingLeftSince(const LeakSnapshot& before) {
  std::vector<std::string> leaked = NewItemsAfterSettling(before, Scope());
  EXPECT_TRUE(leaked.empty()) << "left behind:\n" << DescribeItems(leaked);
}

std::string KubeTest::NodeInitiator() { return InitiatorIqnForNode(kubelet().node_id()); }

void KubeTest::DeletePodAndWaitDetached(const RunningPod& pod) {
  std::string error;
  ASSERT_TRUE(kubelet().DeletePod(pod, &error)) << error;
  ASSERT_TRUE(WaitFor([&] { return !cluster().Get("volumeattachment", pod.attachment).has_value(); }, 90s))
      << "VolumeAttachment " << pod.attachment << " was not detached\n"
      << env().Logs();
  std::string target = pod.publish_context.count("targetIqn") ? pod.publish_context.at("targetIqn") : "";
  auto acl = AclOf(target);
  EXPECT_EQ(std::find(acl.begin(), acl.end(), NodeInitiator()), acl.end())
      << "the node's initiator is still in the ACL of " << target;
}

void KubeTest::DeletePvcAndWaitGone(const RunningPod& pod) {
  KubectlResult r = cluster().Kubectl({"delete", "pvc", pod.pvc, "-n", pod.ns, "--wait=false"});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_TRUE(WaitFor([&] { return !cluster().Get("pv", pod.pv).has_value(); }, 90s))
      << "PV " << pod.pv << " was not deleted\n"
      << env().Logs();
  std::string target = pod.publish_context.count("targetIqn") ? pod.publish_context.at("targetIqn") : "";
  EXPECT_FALSE(HasTarget(target)) << "target " << target << " is still exported after DeleteVolume";
}

::testing::AssertionResult KubeTest::WriteAndReadBack(const std::string& path, const std::string& data, bool direct) {
  constexpr size_t kBlock = 4096;
  void* buffer = nullptr;
  if (::posix_memalign(&buffer, kBlock, kBlock) != 0) return ::testing::AssertionFailure() << "posix_memalign";
  std::unique_ptr<void, decltype(&std::free)> owned(buffer, &std::free);
  std::memset(buffer, 0, kBlock);
  std::memcpy(buffer, data.data(), std::min(data.size(), kBlock));
  int flags = O_RDWR | O_SYNC | (direct ? O_DIRECT : O_CREAT);
  int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return ::testing::AssertionFailure() << "open " << path << ": " << std::strerror(errno);
  bool ok = ::pwrite(fd, buffer, kBlock, 0) == static_cast<ssize_t>(kBlock) && ::fsync(fd) == 0;
  std::memset(buffer, 0, kBlock);
  ok = ok && ::pread(fd, buffer, kBlock, 0) == static_cast<ssize_t>(kBlock);
  ::close(fd);
  if (!ok) return ::testing::AssertionFailure() << "I/O on " << path << ": " << std::strerror(errno);
  if (std::memcmp(buffer, data.data(), std::min(data.size(), kBlock)) != 0) {
    return ::testing::AssertionFailure() << "read back other bytes than written at " << path;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace blockcsi::testing
