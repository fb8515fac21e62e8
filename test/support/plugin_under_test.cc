#include "support/plugin_under_test.h"

#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "common/executor.h"
#include "common/mounter.h"
#include "support/leak_check.h"

namespace blockcsi::testing {

using namespace std::chrono_literals;

namespace {

// ChildProcess execs argv[0] as a path; resolve a bare prefix program
// (nsenter, ip) the way a shell would.
std::string ResolveProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return name;
}

// Sets environment variables for the next fork and puts the previous values
// back when destroyed, so one start's fault point never leaks into the next.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_.emplace_back(name, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_) {
      if (old) {
        ::setenv(name.c_str(), old->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

bool UnderDir(const std::string& path, const std::string& dir) { return path == dir || path.rfind(dir + "/", 0) == 0; }

void UnmountAll(const std::vector<std::string>& targets) {
  for (const auto& target : targets) {
    if (::umount2(target.c_str(), 0) != 0) ::umount2(target.c_str(), MNT_DETACH);
  }
}

}  // namespace

std::vector<std::string> MountsUnder(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : ParseMountInfo(ReadFileOrEmpty("/proc/self/mountinfo"))) {
    if (UnderDir(e.target, dir)) out.push_back(e.target);
  }
  // Deepest first: a publish bind mount before its staging mount.
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return out;
}

std::vector<std::string> LoopDevicesUnder(const std::string& dir) {
  // The leak checker's view (sysfs): it also sees loops whose FUSE file was
  // lazily unmounted or deleted, which `losetup -l` shows under another path.
  std::vector<std::string> out;
  for (const auto& [device, backing] : LoopDevicesBackedUnder(dir)) out.push_back(device);
  return out;
}

std::vector<pid_t> ProcessesNaming(const std::string& dir) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = entry.path().filename();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == ::getpid()) continue;
    // Arguments are NUL-separated: match one naming `dir` or a path under it.
    std::istringstream args(ReadFileOrEmpty(entry.path() / "cmdline"));
    std::string arg;
    while (std::getline(args, arg, '\0')) {
      if (arg.find(dir + "/") != std::string::npos || arg == dir) {
        out.push_back(pid);
        break;
      }
    }
  }
  return out;
}

PluginUnderTest::PluginUnderTest(std::string dir, const TgtdHarness* tgtd) : dir_(std::move(dir)), tgtd_(tgtd) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  MakeStubs();  // usable (UNAVAILABLE) before the first Start()
}

PluginUnderTest::~PluginUnderTest() { Stop(); }

bool PluginUnderTest::Start(const PluginOptions& options, std::string* error) {
  Stop();
  // A socket left by a killed plugin must not pass for the new one's.
  std::error_code ec;
  std::filesystem::remove(socket(), ec);

  std::vector<std::string> argv;
  for (const auto& part : options.command_prefix) argv.push_back(argv.empty() ? ResolveProgram(part) : part);
  std::string binary = options.binary.empty() ? BinDir() + "/blockcsi" : options.binary;
  argv.insert(argv.end(), {binary, "--mode", options.mode, "--connector", options.connector, "--endpoint",
                           "unix://" + socket(), "--node-id", options.node_id, "--state-dir", state_dir()});
  // Empty: none, e.g. for --backend-config in extra_args (which refuses --backend).
  if (!options.backend.empty()) argv.insert(argv.end(), {"--backend", options.backend});
  if (options.backend == "local" && options.mode != "node") {
    argv.insert(argv.end(), {"--pool", pool_dir()});
    if (tgtd_ != nullptr) {
      argv.insert(argv.end(),
                  {"--tgt-control-port", std::to_string(tgtd_->control_port()), "--portal", tgtd_->portal()});
    }
  }
  // No I/O timeout is forced here (issue #22): the plugin runs with the
  // product's default (30 s) unless a test names one, so a stall the
  // product would turn into an I/O error fails the test instead of hiding.
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());

  std::map<std::string, std::string> env = options.env;
  if (!options.fault_point.empty()) env["BLOCKCSI_FAULT_POINT"] = options.fault_point;
  // A test run inside a pod (CI on Kubernetes) must not hand the plugin
  // that cluster's service account: the controller would ask it about the
  // test's node ids (controller/k8s_node_directory.h). Empty = not in a pod.
  env.emplace("KUBERNETES_SERVICE_HOST", "");
  {
    ScopedEnv scoped(env);
    process_ = std::make_unique<ChildProcess>(argv, log_path());
  }
  if (!options.cgroup.empty()) {
    // cgroup.procs takes the whole process (every thread) at once.
    std::ofstream procs(options.cgroup + "/cgroup.procs");
    procs << process_->pid() << "\n";
    procs.flush();
    if (!procs) {
      if (error != nullptr) *error = "cannot move the plugin into cgroup " + options.cgroup;
      Stop(0ms);
      return false;
    }
  }

  auto deadline = std::chrono::steady_clock::now() + 20s;
  bool up = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (WaitForSocket(socket(), 200ms)) {
      up = true;
      break;
    }
    if (!process_->running()) break;
  }
  if (!up) {
    if (error != nullptr) {
      *error = std::string(process_->running() ? "plugin did not listen within 20s" : "plugin exited at start") +
               "; log:\n" + LogTail();
    }
    Stop(0ms);
    return false;
  }
  MakeStubs();
  return true;
}

void PluginUnderTest::MakeStubs() {
  auto channel = grpc::CreateChannel("unix:" + socket(), grpc::InsecureChannelCredentials());
  identity_ = csi::v1::Identity::NewStub(channel);
  controller_ = csi::v1::Controller::NewStub(channel);
  node_ = csi::v1::Node::NewStub(channel);
}

void PluginUnderTest::Stop(std::chrono::milliseconds grace) {
  if (!process_) return;
  // Close our connection first. The plugin's graceful shutdown waits for
  // each client to answer its GOAWAY ping, and an idle C++ channel is only
  // polled by gRPC's backup poller (every 5 s): keeping it open made every
  // Stop() take ~4.5 s. The fresh stubs connect only when used (and then
  // fail UNAVAILABLE while the plugin is down).
  MakeStubs();
  if (process_->running()) {
    process_->Signal(SIGTERM);
    if (process_->Wait(grace) < 0) {
      process_->Signal(SIGKILL);
      process_->Wait(10s);
    }
  }
  process_.reset();
}

void PluginUnderTest::Kill9() {
  if (!process_) return;
  process_->Signal(SIGKILL);
  process_->Wait(10s);
  process_.reset();
}

bool PluginUnderTest::WaitKilledByFaultPoint(std::chrono::milliseconds timeout) {
  if (!process_) return false;
  int code = process_->Wait(timeout);
  if (code < 0) return false;  // still running: Stop() or the destructor ends it
  process_.reset();
  return code == 128 + SIGKILL;
}

pid_t PluginUnderTest::pid() const { return process_ ? process_->pid() : -1; }

bool PluginUnderTest::running() { return process_ && process_->running(); }

std::string PluginUnderTest::LogTail(size_t bytes) const {
  std::string log = ReadFileOrEmpty(log_path());
  return log.size() > bytes ? "...\n" + log.substr(log.size() - bytes) : log;
}

void CleanUpUnder(const std::string& dir) {
  if (dir.empty() || dir == "/") return;
  // Filesystems first (publishes, staging), so the loop devices below them
  // are free to detach; a busy one is detached lazily. Not the bridges' FUSE
  // mounts yet: a loop device still sits on each, and once its file is
  // (lazily) unmounted, the loop's backing path no longer names `dir`.
  std::vector<std::string> filesystems;
  for (const auto& target : MountsUnder(dir)) {
    if (target.find("/bridges/") == std::string::npos) filesystems.push_back(target);
  }
  UnmountAll(filesystems);
  auto exec = MakeProcessExecutor();
  for (const auto& loop : LoopDevicesUnder(dir)) (void)exec->Run(Command("losetup").Arg("-d").Arg(loop));
  // Bridges (and anything else started on files under dir), by pid.
  for (pid_t pid : ProcessesNaming(dir)) ::kill(pid, SIGKILL);
  for (int i = 0; i < 100 && !ProcessesNaming(dir).empty(); ++i) std::this_thread::sleep_for(20ms);
  // With the bridges gone their FUSE mounts and loop devices let go.
  UnmountAll(MountsUnder(dir));
  for (const auto& loop : LoopDevicesUnder(dir)) (void)exec->Run(Command("losetup").Arg("-d").Arg(loop));
}

std::unique_ptr<grpc::ClientContext> Deadline(std::chrono::milliseconds timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  return ctx;
}

::testing::AssertionResult GrpcOk(const grpc::Status& status, const std::string& log_tail) {
  if (status.ok()) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure()
                 << "gRPC code " << static_cast<int>(status.error_code()) << ": " << status.error_message();
  if (!log_tail.empty()) failure << "\nplugin log:\n" << log_tail;
  return failure;
}

LeakScope PluginUnderTest::LeakScopeFor(const std::string& volume_id) {
  LeakScope scope;
  scope.dir = dir_;
  scope.volume_id = volume_id;
  scope.state_dir = state_dir();
  scope.pool_dir = pool_dir();
  scope.tgtd = tgtd_;
  if (running()) scope.ignore_pids.push_back(pid());
  return scope;
}

}  // namespace blockcsi::testing
