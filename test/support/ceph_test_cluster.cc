#include "support/ceph_test_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <vector>

#include "support/test_util.h"

namespace blockcsi::testing {
namespace {

std::string Script() { return SourceDir() + "/hack/ceph-cluster.sh"; }

// Runs hack/ceph-cluster.sh; its output (stdout and stderr) in *output.
int RunScript(const std::vector<std::string>& args, const std::string& log, std::string* output) {
  std::filesystem::remove(log);
  std::vector<std::string> argv = {"/bin/bash", Script()};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess child(argv, log);
  int code = child.Wait(std::chrono::minutes(6));
  *output = ReadFileOrEmpty(log);
  return code;
}

}  // namespace

std::map<std::string, std::string> ParseCephClusterEnv(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    std::string key = line.substr(0, eq);
    if (!std::all_of(key.begin(), key.end(), [](char c) { return std::isupper(c) || c == '_'; })) continue;
    out[key] = line.substr(eq + 1);
  }
  return out;
}

std::string KeyFromKeyring(const std::string& keyring_path) {
  std::istringstream in(ReadFileOrEmpty(keyring_path));
  std::string line;
  while (std::getline(in, line)) {
    size_t pos = line.find("key = ");
    if (pos != std::string::npos) return line.substr(pos + 6);
  }
  return "";
}

void CephSuiteTest::AcquireCluster(Needs needs) {
  skip_ = CephTestCluster::SkipReason();
  if (skip_.empty() && needs == Needs::kCephAndBridge) {
    if (::access("/dev/fuse", R_OK | W_OK) != 0) {
      skip_ = "needs /dev/fuse";
    } else if (!std::filesystem::exists("/dev/loop-control")) {
      skip_ = "needs loop devices (/dev/loop-control)";
    }
  }
  if (!skip_.empty()) return;
  setup_error_.clear();
  cluster_ = CephTestCluster::Acquire(&setup_error_);
  if (cluster_) env_ = cluster_->env();
}

void CephSuiteTest::SetUp() {
  if (!skip_.empty()) GTEST_SKIP() << skip_;
  ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  ASSERT_TRUE(env_.contains("CEPH_CONF") && env_.contains("RBD_POOL"))
      << "hack/ceph-cluster.sh printed no CEPH_CONF or RBD_POOL";
}

LeakScope RbdPoolLeakScope(const std::map<std::string, std::string>& env) {
  LeakScope scope;
  scope.rbd_command = {"rbd",
                       "-c",
                       env.at("CEPH_CONF"),
                       "--id",
                       env.at("BLOCKCSI_CEPH_USER"),
                       "--keyring",
                       env.at("BLOCKCSI_CEPH_KEYRING")};
  scope.rbd_pool = env.at("RBD_POOL");
  return scope;
}

LeakScope CephSuiteTest::PoolLeakScope() { return RbdPoolLeakScope(env_); }

std::string CephTestCluster::SkipReason() {
  if (!IsRoot()) return "needs root (runs Ceph daemons)";
  for (const char* bin : {"/usr/bin/ceph-mon", "/usr/bin/ceph-mgr", "/usr/bin/ceph-osd", "/usr/bin/rbd"}) {
    if (!std::filesystem::exists(bin)) return std::string("ceph packages missing (") + bin + "; hack/install-deps.sh)";
  }
  return "";
}

std::unique_ptr<CephTestCluster> CephTestCluster::Acquire(std::string* error) {
  std::unique_ptr<CephTestCluster> cluster(new CephTestCluster());
  std::string output;
  // A cluster the ctest fixture started is shared by every test process.
  if (const char* shared = std::getenv("BLOCKCSI_CEPH_DIR"); shared != nullptr && *shared != '\0') {
    if (RunScript({"env", shared}, cluster->tmp_.Join("env.log"), &output) == 0) {
      cluster->env_ = ParseCephClusterEnv(output);
      return cluster;
    }
  }
  cluster->own_dir_ = cluster->tmp_.Join("ceph");
  cluster->StartReaper();
  int code = RunScript({"start", cluster->own_dir_}, cluster->tmp_.Join("start.log"), &output);
  if (code != 0) {
    *error = "hack/ceph-cluster.sh start failed (" + std::to_string(code) + "):\n" + output;
    return nullptr;  // the destructor stops what started
  }
  cluster->env_ = ParseCephClusterEnv(output);
  if (!cluster->env_.contains("CEPH_CONF")) {
    *error = "no CEPH_CONF from hack/ceph-cluster.sh:\n" + output;
    return nullptr;
  }
  return cluster;
}

CephTestCluster::~CephTestCluster() {
  if (!own_dir_.empty()) {
    std::string output;
    int code = RunScript({"stop", own_dir_}, tmp_.Join("stop.log"), &output);
    if (code != 0) std::fprintf(stderr, "hack/ceph-cluster.sh stop failed (%d):\n%s\n", code, output.c_str());
  }
  if (reaper_ > 0) {
    ::kill(reaper_, SIGKILL);
    ::waitpid(reaper_, nullptr, 0);
  }
  if (reaper_pipe_ >= 0) ::close(reaper_pipe_);
}

void CephTestCluster::StartReaper() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return;
  const std::string script = Script();
  const std::string dir = own_dir_;
  const std::string tmp = tmp_.path();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[1]);
    ::setsid();
    char c;
    while (::read(fds[0], &c, 1) > 0) {
    }
    // Also the temp dir around the cluster: its TempDir never ran its destructor.
    ::execl("/bin/bash", "bash", "-c", R"("$0" stop "$1"; rm -rf "$2")", script.c_str(), dir.c_str(), tmp.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[0]);
  reaper_pipe_ = fds[1];
  reaper_ = pid;
}

}  // namespace blockcsi::testing
