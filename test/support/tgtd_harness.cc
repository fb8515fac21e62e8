#include "support/tgtd_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/executor.h"
#include "support/test_util.h"

namespace blockcsi::testing {

int FreeTcpPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

ReservedPort::ReservedPort(Use use) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return;
  if (use == Use::kForServer) {
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port_ = ntohs(addr.sin_port);
  }
}

ReservedPort::~ReservedPort() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// The pid holding tgtd's lock on its control number (tgtd takes a POSIX
// lock on /var/run/tgtd/socket.<n>.lock for as long as it runs), or 0.
pid_t ControlLockHolder(int control_port) {
  std::string path = "/var/run/tgtd/socket." + std::to_string(control_port) + ".lock";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct flock lock {};
  lock.l_type = F_RDLCK;
  lock.l_whence = SEEK_SET;
  pid_t holder = 0;
  if (::fcntl(fd, F_GETLK, &lock) == 0 && lock.l_type != F_UNLCK) holder = lock.l_pid;
  ::close(fd);
  return holder;
}

}  // namespace

std::string TgtdHarness::MissingCapability() {
  if (::geteuid() != 0) return "requires root (tgtd)";
  if (::access("/usr/sbin/tgtd", X_OK) != 0) return "requires /usr/sbin/tgtd (Debian package tgt)";
  return "";
}

int DeployedTgtdIoThreads(std::string* error) {
  const std::string path = SourceDir() + "/deploy/target-host/target.env";
  std::ifstream env(path);
  std::string line;
  while (std::getline(env, line)) {
    if (!line.starts_with("TGT_IO_THREADS=")) continue;
    const std::string value = line.substr(line.find('=') + 1);
    int threads = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), threads);
    if (ec == std::errc() && end == value.data() + value.size() && threads > 0) return threads;
    *error = path + ": TGT_IO_THREADS is not a positive number: " + value;
    return -1;
  }
  *error = path + " sets no TGT_IO_THREADS";
  return -1;
}

std::unique_ptr<TgtdHarness> TgtdHarness::Start(std::string* error) { return Start(TgtdOptions{}, error); }

std::unique_ptr<TgtdHarness> TgtdHarness::Start(const TgtdOptions& options, std::string* error) {
  if (*error = MissingCapability(); !error->empty()) return nullptr;
  std::unique_ptr<TgtdHarness> h(new TgtdHarness());
  h->address_ = options.address;
  h->command_prefix_ = options.command_prefix;
  h->io_threads_ = options.io_threads;
  if (options.io_threads == TgtdOptions::kAsDeployed) {
    h->io_threads_ = DeployedTgtdIoThreads(error);
    if (h->io_threads_ < 0) return nullptr;
  }
  if (options.port != 0) {
    h->port_ = options.port;
  } else {
    h->reserved_port_ = std::make_unique<ReservedPort>(ReservedPort::Use::kForServer);
    h->port_ = h->reserved_port_->port();
    if (h->port_ == 0) {
      *error = "cannot reserve a TCP port on 127.0.0.1";
      return nullptr;
    }
  }
  // tgtd's control "port" names a unix socket, not a TCP port: a random
  // number no running tgtd holds. Two tests that draw the same number at
  // once would share one tgtd (the second exits, tgtadm reaches the first):
  // Launch() sees that by the lock's holder, and another number is drawn.
  std::random_device rd;
  for (int attempt = 0; attempt < 5; ++attempt) {
    h->control_port_ = options.control_port != 0 ? options.control_port : 1000 + static_cast<int>(rd() % 30000);
    if (options.control_port == 0 && ControlLockHolder(h->control_port_) != 0) continue;
    h->log_path_ = "/tmp/blockcsi-tgtd-" + std::to_string(h->control_port_) + ".log";
    h->control_taken_ = false;
    if (h->Launch(error)) return h;
    if (!h->control_taken_ || options.control_port != 0) return nullptr;
  }
  return nullptr;
}

bool TgtdHarness::Launch(std::string* error) {
  // Everything the child needs is built before fork: no allocation after it.
  std::vector<std::string> args = command_prefix_;
  args.insert(args.end(), {"/usr/sbin/tgtd", "-f", "-C", std::to_string(control_port_)});
  if (io_threads_ > 0) args.insert(args.end(), {"-t", std::to_string(io_threads_)});
  args.insert(args.end(), {"--iscsi", "portal=" + address_ + ":" + std::to_string(port_)});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) {
    *error = "fork failed";
    return false;
  }
  if (pid_ == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    FILE* log = std::fopen(log_path_.c_str(), "a");
    if (log != nullptr) {
      ::dup2(fileno(log), STDOUT_FILENO);
      ::dup2(fileno(log), STDERR_FILENO);
    }
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  for (int i = 0; i < 200; ++i) {
    int code = -1;
    Tgtadm({"--op", "show", "--mode", "target"}, &code);
    if (code == 0) {
      // Answered: by our tgtd only if it holds the control number's lock.
      pid_t holder = ControlLockHolder(control_port_);
      if (holder == pid_) return true;
      *error = "tgtd control number " + std::to_string(control_port_) + " is held by pid " + std::to_string(holder);
      control_taken_ = true;
      // Not Stop(): its tgtadm calls would reach the other test's tgtd.
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
      return false;
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      *error = "tgtd exited at start; see " + log_path_;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  *error = "tgtd did not answer tgtadm within 5s";
  Stop();
  return false;
}

std::string TgtdHarness::Tgtadm(const std::vector<std::string>& args, int* exit_code) const {
  auto exec = MakeProcessExecutor();
  Command cmd(command_prefix_.empty() ? std::string("tgtadm") : command_prefix_.front());
  if (!command_prefix_.empty()) {
    cmd.Args(std::vector<std::string>(command_prefix_.begin() + 1, command_prefix_.end())).Arg("tgtadm");
  }
  cmd.Arg("-C")
      .Arg(std::to_string(control_port_))
      .Arg("--lld")
      .Arg("iscsi")
      .Args(args)
      .Timeout(std::chrono::seconds(20));
  auto r = exec->Run(cmd);
  if (!r.ok()) {
    if (exit_code != nullptr) *exit_code = -1;
    return "";
  }
  if (exit_code != nullptr) *exit_code = r->exit_code;
  return r->stdout_text;
}

std::string TgtdHarness::ShowTargets() const { return Tgtadm({"--op", "show", "--mode", "target"}); }

void TgtdHarness::Kill9() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

bool TgtdHarness::Restart(std::string* error) {
  Kill9();
  return Launch(error);
}

void TgtdHarness::Stop() {
  if (pid_ <= 0) return;
  // tgtd ignores SIGTERM: delete every target, then the system, then make sure.
  std::istringstream targets(ShowTargets());
  std::string line;
  while (std::getline(targets, line)) {
    if (line.rfind("Target ", 0) == 0) {
      std::string tid = line.substr(7, line.find(':') - 7);
      Tgtadm({"--op", "delete", "--mode", "target", "--tid", tid, "--force"});
    }
  }
  Tgtadm({"--op", "delete", "--mode", "system"});
  for (int i = 0; i < 40; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  Kill9();
}

TgtdHarness::~TgtdHarness() {
  Stop();
  ::unlink(log_path_.c_str());
}

}  // namespace blockcsi::testing
