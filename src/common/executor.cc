#include "common/executor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/logging.h"
#include "common/span.h"
#include "common/strings.h"

extern char** environ;

namespace blockcsi {

Command::~Command() {
  if (stdin_sensitive_ && !stdin_.empty()) explicit_bzero(stdin_.data(), stdin_.size());
  for (auto& arg : args_) {
    if (arg.sensitive && !arg.value.empty()) explicit_bzero(arg.value.data(), arg.value.size());
  }
}

std::string Command::Redacted() const {
  std::string out;
  for (const auto& arg : args_) {
    if (!out.empty()) out += ' ';
    out += arg.sensitive ? "***" : arg.value;
  }
  return out;
}

std::vector<std::string> Command::Argv() const {
  std::vector<std::string> argv;
  argv.reserve(args_.size());
  for (const auto& arg : args_) argv.push_back(arg.value);
  return argv;
}

namespace {

constexpr size_t kMaxErrorLine = 300;

// "mke2fs 1.47.0 (5-Feb-2023)", "btrfs-progs v6.2": a program name and a
// version, nothing about the failure.
bool IsVersionBanner(std::string_view line) {
  size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0) return false;
  std::string_view rest = line.substr(space + 1);
  if (!rest.empty() && rest.front() == 'v') rest.remove_prefix(1);
  size_t digits = 0;
  while (digits < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[digits])) || rest[digits] == '.')) {
    ++digits;
  }
  if (digits == 0 || rest.substr(0, digits).find('.') == std::string_view::npos) return false;
  std::string_view tail = TrimWhitespace(rest.substr(digits));
  return tail.empty() || (tail.front() == '(' && tail.back() == ')');
}

bool StartsUsage(std::string_view line) {
  return StartsWithNoCase(line, "usage:") || line.starts_with("Try `") || line.starts_with("Try '");
}

}  // namespace

std::string BlankSecrets(std::string text, const Command& command) {
  auto blank = [&text](const std::string& secret) {
    if (secret.empty()) return;
    for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3)) {
      text.replace(at, secret.size(), "***");
    }
  };
  for (const auto& arg : command.args()) {
    if (arg.sensitive) blank(arg.value);
  }
  if (command.stdin_sensitive()) {
    blank(command.stdin_data());
    // Line by line too: a program may echo one line of what it read.
    size_t start = 0;
    const std::string& in = command.stdin_data();
    while (start < in.size()) {
      size_t end = in.find('\n', start);
      if (end == std::string::npos) end = in.size();
      if (end - start >= 4) blank(in.substr(start, end - start));
      start = end + 1;
    }
  }
  return text;
}

std::string FirstMeaningfulLine(std::string_view output) {
  std::string line;
  while (!output.empty()) {
    size_t nl = output.find('\n');
    std::string_view raw = output.substr(0, nl);
    output = nl == std::string_view::npos ? std::string_view() : output.substr(nl + 1);
    const bool continuation = !raw.empty() && (raw.front() == ' ' || raw.front() == '\t');
    std::string_view text = TrimWhitespace(raw);
    if (!line.empty()) {
      if (!continuation || text.empty()) break;
      line += " ";
      line += text;
      continue;
    }
    if (text.empty() || IsVersionBanner(text) || text.starts_with("See http")) continue;
    if (StartsUsage(text)) break;
    line = std::string(text);
  }
  if (line.size() > kMaxErrorLine) line = line.substr(0, kMaxErrorLine - 3) + "...";
  return line;
}

std::string FailureLine(const Command& command, const CommandResult& result) {
  std::string line = FirstMeaningfulLine(BlankSecrets(result.stderr_text, command));
  return line.empty() ? FirstMeaningfulLine(BlankSecrets(result.stdout_text, command)) : line;
}

std::string DescribeFailure(const Command& command, const CommandResult& result) {
  std::string how = result.timed_out     ? "timed out after " + std::to_string(command.timeout().count()) + " ms"
                    : result.signal != 0 ? "killed by signal " + std::to_string(result.signal)
                                         : "exit code " + std::to_string(result.exit_code);
  std::string line = FailureLine(command, result);
  return "`" + command.Redacted() + "` failed (" + how + ")" + (line.empty() ? "" : ": " + line);
}

StatusOr<CommandResult> RunChecked(Executor& executor, const Command& command, StatusCode on_failure) {
  BLOCKCSI_ASSIGN_OR_RETURN(CommandResult result, executor.Run(command));
  if (result.ok()) return result;
  return Status(on_failure, DescribeFailure(command, result));
}

namespace {

// Fixed upper bound on captured output so a runaway child cannot exhaust memory.
constexpr size_t kMaxCapture = size_t{16} << 20;

// A program named without a directory is looked up here, in this order, and
// never through $PATH: a directory early in PATH that someone
// else can write (~/.cargo/bin, /usr/local/sbin) would otherwise run their
// program as root with our arguments, CHAP secrets included. Programs
// elsewhere are configured by absolute path (e.g. --tgtadm).
constexpr const char* kProgramDirs[] = {"/usr/sbin", "/usr/bin", "/sbin", "/bin"};

// "" when there is no such program in kProgramDirs.
std::string ResolveProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  for (const char* dir : kProgramDirs) {
    std::string candidate = std::string(dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

class ProcessExecutor final : public Executor {
 public:
  StatusOr<CommandResult> Run(const Command& command) override {
    auto started = std::chrono::steady_clock::now();
    LogDebug("exec", {{"argv", command.Redacted()}});
    Span span("exec", command.args().empty() ? "" : std::filesystem::path(command.args()[0].value).filename().string());
    const std::string& name = command.args()[0].value;
    int out_pipe[2], err_pipe[2], in_pipe[2];
    BLOCKCSI_RETURN_IF_ERROR(OpenPipes(name, out_pipe, err_pipe, in_pipe));
    // Everything the child needs is prepared before fork: no allocation after.
    ExecImage image;
    PrepareExec(command, &image);
    if (image.program.empty()) {
      CloseBoth(out_pipe);
      CloseBoth(err_pipe);
      CloseBoth(in_pipe);
      return NotFound("cannot run " + name +
                      ": no such program in /usr/sbin, /usr/bin, /sbin or /bin (PATH is not searched)");
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      int err = errno;
      CloseBoth(out_pipe);
      CloseBoth(err_pipe);
      CloseBoth(in_pipe);
      return ErrnoToStatus(err, "fork for " + name);
    }
    if (pid == 0) ExecChild(image, in_pipe[0], out_pipe[1], err_pipe[1]);
    ::setpgid(pid, pid);  // also from the parent: no race with the kill below
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    ::close(in_pipe[0]);

    CommandResult result;
    int in_fd = in_pipe[1];
    Pump(command, started + command.timeout(), out_pipe[0], err_pipe[0], in_fd, &result);
    if (result.timed_out) ::kill(-pid, SIGKILL);
    if (out_pipe[0] >= 0) ::close(out_pipe[0]);
    if (err_pipe[0] >= 0) ::close(err_pipe[0]);
    if (in_fd >= 0) ::close(in_fd);
    return Reap(command, pid, std::move(result));
  }

 private:
  // What execve needs, built before fork (the child must not allocate).
  struct ExecImage {
    std::string program;  // "" when it is in none of kProgramDirs
    std::vector<std::string> argv_storage, env_storage;
    std::vector<char*> argv, envp;
  };

  static Status OpenPipes(const std::string& name, int out_pipe[2], int err_pipe[2], int in_pipe[2]) {
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe for " + name);
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      CloseBoth(out_pipe);
      return ErrnoToStatus(errno, "pipe for " + name);
    }
    if (::pipe2(in_pipe, O_CLOEXEC) != 0) {
      CloseBoth(out_pipe);
      CloseBoth(err_pipe);
      return ErrnoToStatus(errno, "pipe for " + name);
    }
    return OkStatus();
  }

  // Filled in place: argv and envp point into the storage beside them.
  static void PrepareExec(const Command& command, ExecImage* image) {
    image->program = ResolveProgram(command.args()[0].value);
    image->argv_storage = command.Argv();
    for (auto& a : image->argv_storage) image->argv.push_back(a.data());
    image->argv.push_back(nullptr);
    for (char** e = environ; *e != nullptr; ++e) {
      std::string_view entry(*e);
      auto eq = entry.find('=');
      if (eq != std::string_view::npos && command.env().count(std::string(entry.substr(0, eq))) > 0) continue;
      image->env_storage.emplace_back(entry);
    }
    for (const auto& [k, v] : command.env()) image->env_storage.push_back(k + "=" + v);
    for (auto& e : image->env_storage) image->envp.push_back(e.data());
    image->envp.push_back(nullptr);
  }

  // In the forked child: its own process group (a timeout kills the whole
  // group), the pipes as stdio, no blocked signals, then the program.
  [[noreturn]] static void ExecChild(const ExecImage& image, int in_fd, int out_fd, int err_fd) {
    ::setpgid(0, 0);
    ::dup2(in_fd, STDIN_FILENO);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    // Only stdio goes to the program. A descriptor another thread holds
    // without O_CLOEXEC at the fork would live on in it until it exits:
    // libmount holds a mount's target so (O_PATH) while it mounts or
    // unmounts, and an mkfs forked in that moment kept the mount busy, its
    // unmount failing with "target is busy".
    ::close_range(3, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(image.program.c_str(), image.argv.data(), image.envp.data());
    const char msg[] = "exec failed\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    ::_exit(127);
  }

  // Feeds stdin and captures stdout/stderr (bounded) until both outputs end
  // or the deadline passes (result->timed_out). A descriptor that ends is
  // closed and set to -1; the caller closes the rest.
  static void Pump(const Command& command, std::chrono::steady_clock::time_point deadline, int& out_fd, int& err_fd,
                   int& in_fd, CommandResult* result) {
    std::string_view to_write = command.stdin_data();
    if (to_write.empty()) {
      ::close(in_fd);
      in_fd = -1;
    } else {
      ::fcntl(in_fd, F_SETFL, O_NONBLOCK);
    }
    int open_outputs = 2;
    pollfd fds[3];
    while (open_outputs > 0 || in_fd >= 0) {
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        result->timed_out = true;
        break;
      }
      int wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
      fds[0] = {out_fd, POLLIN, 0};
      fds[1] = {err_fd, POLLIN, 0};
      fds[2] = {in_fd, POLLOUT, 0};
      int rc = ::poll(fds, 3, wait_ms);
      if (rc < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        char buf[65536];
        ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n > 0) {
          std::string& dst = i == 0 ? result->stdout_text : result->stderr_text;
          if (dst.size() < kMaxCapture) dst.append(buf, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          ::close(fds[i].fd);
          (i == 0 ? out_fd : err_fd) = -1;
          --open_outputs;
        }
      }
      if (in_fd >= 0 && fds[2].revents != 0) {
        ssize_t n = ::write(in_fd, to_write.data(), to_write.size());
        if (n > 0) to_write.remove_prefix(static_cast<size_t>(n));
        if ((n < 0 && errno != EAGAIN && errno != EINTR) || to_write.empty()) {
          ::close(in_fd);
          in_fd = -1;
        }
      }
    }
  }

  // Waits for the child and turns how it ended into the result or a status.
  static StatusOr<CommandResult> Reap(const Command& command, pid_t pid, CommandResult result) {
    int wstatus = 0;
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(wstatus)) {
      result.exit_code = WEXITSTATUS(wstatus);
    } else if (WIFSIGNALED(wstatus)) {
      result.signal = WTERMSIG(wstatus);
    }
    if (result.exit_code == 127 && result.stderr_text == "exec failed\n") {
      return NotFound("cannot run " + command.args()[0].value + ": program not found or not executable");
    }
    if (result.timed_out) {
      return DeadlineExceeded("`" + command.Redacted() + "` did not finish within " +
                              std::to_string(command.timeout().count()) + "ms and was killed");
    }
    // Callers put one line of a failure into their errors
    // (FirstMeaningfulLine); the whole output is here, at debug level.
    if (!result.ok()) {
      LogDebug("program failed", {{"argv", command.Redacted()},
                                  {"exit_code", std::to_string(result.exit_code)},
                                  {"stdout", BlankSecrets(result.stdout_text, command)},
                                  {"stderr", BlankSecrets(result.stderr_text, command)}});
    }
    return result;
  }

  static void CloseBoth(int fds[2]) {
    ::close(fds[0]);
    ::close(fds[1]);
  }
};

}  // namespace

std::unique_ptr<Executor> MakeProcessExecutor() { return std::make_unique<ProcessExecutor>(); }

}  // namespace blockcsi
