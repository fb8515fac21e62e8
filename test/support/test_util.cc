#include "support/test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/executor.h"

namespace blockcsi::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/blockcsi-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<char*> args;
  std::vector<std::string> storage = argv;
  for (auto& a : storage) args.push_back(a.data());
  args.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (!log_path.empty()) {
      int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
      }
    }
    ::execv(args[0], args.data());
    ::_exit(127);
  }
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
}

bool ChildProcess::running() {
  if (reaped_) return false;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    status_ = status;
    return false;
  }
  return true;
}

void ChildProcess::Signal(int sig) {
  if (!reaped_) ::kill(pid_, sig);
}

int ChildProcess::Wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

bool WaitForSocket(const std::string& path, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::close(fd);
    if (rc == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool IsRoot() { return ::geteuid() == 0; }

int RunProgram(const std::vector<std::string>& argv, std::string* output, std::chrono::seconds timeout) {
  Command command(argv.at(0));
  for (size_t i = 1; i < argv.size(); ++i) command.Arg(argv[i]);
  command.Timeout(timeout);
  auto result = MakeProcessExecutor()->Run(command);
  if (!result.ok()) {
    if (output != nullptr) *output = result.status().ToString();
    return -1;
  }
  if (output != nullptr) *output = result->stdout_text + result->stderr_text;
  return result->exit_code;
}

std::vector<std::string> NeededLibraries(const std::string& program, std::string* error) {
  std::string out;
  if (RunProgram({"readelf", "-d", program}, &out) != 0) {
    *error = "readelf -d " + program + ": " + out;
    return {};
  }
  std::vector<std::string> needed;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("(NEEDED)") == std::string::npos) continue;
    size_t open = line.find('['), close = line.rfind(']');
    if (open != std::string::npos && close > open) needed.push_back(line.substr(open + 1, close - open - 1));
  }
  if (needed.empty()) *error = program + " names no shared library (not a dynamic program?)";
  return needed;
}

std::string MissingProgramOption(const std::string& program, const std::string& option) {
  if (!HaveProgram(program)) return program + " is not installed";
  // An option no version has: the program prints its usage and exits.
  std::string usage;
  RunProgram({program, "-Z"}, &usage, std::chrono::seconds(30));
  if (usage.find("[" + option + " ") == std::string::npos && usage.find("[" + option + "]") == std::string::npos) {
    return program + " has no " + option + " option (its usage does not list it)";
  }
  return "";
}

bool HaveProgram(const std::string& program) {
  std::string path = "/usr/sbin:/sbin";
  if (const char* env = std::getenv("PATH"); env != nullptr) path = std::string(env) + ":" + path;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

void MergeTreeInto(const std::string& from, const std::string& root) {
  namespace fs = std::filesystem;
  for (auto it = fs::recursive_directory_iterator(from); it != fs::recursive_directory_iterator(); ++it) {
    fs::path to = fs::path(root) / it->path().lexically_relative(from);
    if (it->is_symlink()) {
      fs::remove(to);
      fs::create_directories(to.parent_path());
      fs::copy_symlink(it->path(), to);
      it.disable_recursion_pending();
    } else if (it->is_directory()) {
      fs::create_directories(to);
    } else {
      fs::create_directories(to.parent_path());
      fs::copy_file(it->path(), to, fs::copy_options::overwrite_existing);
    }
  }
}

}  // namespace blockcsi::testing
