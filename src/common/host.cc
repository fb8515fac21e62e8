#include "common/host.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>

#include "common/atomic_file.h"
#include "common/unique_fd.h"

namespace blockcsi {
namespace {

constexpr int kCapSysResource = 24;  // linux/capability.h

// In the forked child. Double fork: the grandchild is reparented to init, in
// its own session and process group.
[[noreturn]] void ExecDetached(char** argv, int in_fd, int out_fd) {
  ::setsid();
  pid_t grandchild = ::fork();
  if (grandchild != 0) ::_exit(grandchild < 0 ? 1 : 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::dup2(in_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  // The process outlives us: it must not keep our sockets or files open
  // (only stdin, stdout and stderr).
  ::close_range(3, ~0U, 0);
  ::chdir("/");
  ::execv(argv[0], argv);
  ::_exit(127);
}

}  // namespace

RootedHost::RootedHost(std::string root) : root_(std::move(root)) {
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
}

StatusOr<std::string> RootedHost::ReadFile(const std::string& path) const { return ReadFileToString(Resolve(path)); }

Status RootedHost::WriteFile(const std::string& path, const std::string& contents) const {
  std::string real = Resolve(path);
  int fd = ::open(real.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open " + real + " for writing");
  ssize_t n = ::write(fd, contents.data(), contents.size());
  int err = errno;
  ::close(fd);
  if (n < 0) return ErrnoToStatus(err, "write " + real);
  return OkStatus();
}

Status RootedHost::ReplaceFile(const std::string& path, const std::string& contents) const {
  AtomicWriteOptions options;
  options.mode = 0600;
  return WriteFileAtomically(Resolve(path), contents, options);
}

Status RootedHost::OverwriteFile(const std::string& path, const std::string& contents) const {
  std::string real = Resolve(path);
  int fd = ::open(real.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoToStatus(errno, "open " + real);
  ssize_t n = ::write(fd, contents.data(), contents.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(contents.size())) return ErrnoToStatus(err, "write " + real);
  return OkStatus();
}

StatusOr<std::vector<std::string>> RootedHost::ListDir(const std::string& path) const {
  std::error_code ec;
  std::vector<std::string> names;
  std::string real = Resolve(path);
  for (const auto& entry : std::filesystem::directory_iterator(real, ec)) {
    names.push_back(entry.path().filename().string());
  }
  if (ec) return ErrnoToStatus(ec.value(), "list " + real);
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<std::string> RootedHost::ReadLink(const std::string& path) const {
  std::string real = Resolve(path);
  char buf[4096];
  ssize_t n = ::readlink(real.c_str(), buf, sizeof buf - 1);
  if (n < 0) return ErrnoToStatus(errno, "readlink " + real);
  return std::string(buf, static_cast<size_t>(n));
}

StatusOr<std::string> RootedHost::RealPath(const std::string& path) const {
  // Links may point anywhere under the root, so resolve the root too and
  // give back the part below it.
  std::string root = "/";
  if (!root_.empty()) {
    char* resolved = ::realpath(root_.c_str(), nullptr);
    if (resolved == nullptr) return path;  // nothing exists under a missing root: no link either
    root = resolved;
    std::free(resolved);
  }
  auto below_root = [&](const std::string& real) {
    if (root == "/") return real;
    if (real == root) return std::string("/");
    if (real.compare(0, root.size() + 1, root + "/") == 0) return real.substr(root.size());
    return "(outside " + root_ + ")" + real;  // never equal to a path under the root
  };
  std::string head = path;
  std::string tail;
  // Bounded like the kernel's own link resolution (40 links).
  for (int hops = 0; hops < 40 && !head.empty(); ++hops) {
    std::string real = Resolve(head);
    if (char* resolved = ::realpath(real.c_str(), nullptr); resolved != nullptr) {
      std::string out = below_root(resolved);
      std::free(resolved);
      return (out == "/" && !tail.empty() ? std::string() : out) + tail;
    }
    if (errno != ENOENT) return ErrnoToStatus(errno, "realpath " + real);
    struct stat st {};
    size_t slash = head.rfind('/');
    if (::lstat(real.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      // A dangling link: follow it by hand, as open(O_CREAT) or mkdir
      // under it would.
      auto to = ReadLink(head);
      if (!to.ok()) return to.status();
      head = to->starts_with('/') ? *to : head.substr(0, slash) + "/" + *to;
      continue;
    }
    if (slash == std::string::npos || head == "/") return InvalidArgument("realpath: " + path + " is not absolute");
    tail = head.substr(slash) + tail;
    head = slash == 0 ? "/" : head.substr(0, slash);
  }
  return ErrnoToStatus(ELOOP, "realpath " + Resolve(path));
}

bool RootedHost::Exists(const std::string& path) const { return ::access(Resolve(path).c_str(), F_OK) == 0; }

StatusOr<std::chrono::system_clock::time_point> RootedHost::ModificationTime(const std::string& path) const {
  std::string real = Resolve(path);
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat " + real);
  return std::chrono::system_clock::time_point(
      std::chrono::seconds(st.st_mtim.tv_sec) +
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
}

StatusOr<mode_t> RootedHost::Permissions(const std::string& path) const {
  std::string real = Resolve(path);
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat " + real);
  return static_cast<mode_t>(st.st_mode & 07777);
}

Status RootedHost::SetPermissions(const std::string& path, mode_t mode) const {
  std::string real = Resolve(path);
  if (::chmod(real.c_str(), mode) != 0) return ErrnoToStatus(errno, "chmod " + real);
  return OkStatus();
}

StatusOr<FileIdentity> RootedHost::Identity(const std::string& path) const {
  std::string real = Resolve(path);
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat " + real);
  return FileIdentity{st.st_dev, st.st_ino, int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec};
}

PathKind RootedHost::Kind(const std::string& path) const {
  struct stat st {};
  if (::stat(Resolve(path).c_str(), &st) != 0) return PathKind::kMissing;
  if (S_ISDIR(st.st_mode)) return PathKind::kDirectory;
  if (S_ISBLK(st.st_mode)) return PathKind::kBlockDevice;
  if (S_ISREG(st.st_mode)) return PathKind::kFile;
  if (S_ISSOCK(st.st_mode)) return PathKind::kSocket;
  return PathKind::kOther;
}

Status RootedHost::MakeDirectory(const std::string& path, mode_t mode) const {
  return MakeDirectories(Resolve(path), mode);
}

Status RootedHost::MakeFile(const std::string& path) const {
  std::string real = Resolve(path);
  size_t slash = real.rfind('/');
  if (slash != std::string::npos && slash > 0) BLOCKCSI_RETURN_IF_ERROR(MakeDirectories(real.substr(0, slash), 0750));
  int fd = ::open(real.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) return ErrnoToStatus(errno, "create " + real);
  ::close(fd);
  return OkStatus();
}

Status RootedHost::RemovePath(const std::string& path) const {
  std::string real = Resolve(path);
  struct stat st {};
  if (::lstat(real.c_str(), &st) != 0) return errno == ENOENT ? OkStatus() : ErrnoToStatus(errno, "stat " + real);
  int rc = S_ISDIR(st.st_mode) ? ::rmdir(real.c_str()) : ::unlink(real.c_str());
  if (rc != 0 && errno != ENOENT) return ErrnoToStatus(errno, "remove " + real);
  return OkStatus();
}

Status RootedHost::RemoveTree(const std::string& path) const {
  std::error_code ec;
  std::string real = Resolve(path);
  std::filesystem::remove_all(real, ec);
  if (ec) return ErrnoToStatus(ec.value(), "remove " + real);
  return OkStatus();
}

Status RootedHost::Symlink(const std::string& target, const std::string& link) const {
  std::string real = Resolve(link);
  if (::symlink(target.c_str(), real.c_str()) != 0 && errno != EEXIST) return ErrnoToStatus(errno, "link " + real);
  return OkStatus();
}

StatusOr<std::string> RootedHost::DeviceNumber(const std::string& device) const {
  std::string real = Resolve(device);
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat " + real);
  if (!S_ISBLK(st.st_mode)) return FailedPrecondition(device + " is not a block device");
  return std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev));
}

StatusOr<uint64_t> RootedHost::BlockDeviceSize(const std::string& device) const {
  std::string real = Resolve(device);
  int fd = ::open(real.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open " + real);
  uint64_t size = 0;
  int rc = ::ioctl(fd, BLKGETSIZE64, &size);
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoToStatus(err, "BLKGETSIZE64 " + real);
  return size;
}

StatusOr<std::string> RootedHost::LoopBackingFile(const std::string& loop_name) const {
  auto file = ReadTrimmed(*this, "/sys/block/" + loop_name + "/loop/backing_file");
  if (!file.ok()) return NotFound(loop_name + " is not a configured loop device");
  return *file;
}

StatusOr<FsUsage> RootedHost::StatFs(const std::string& path) const {
  std::string real = Resolve(path);
  struct statvfs sv {};
  if (::statvfs(real.c_str(), &sv) != 0) return ErrnoToStatus(errno, "statvfs " + real);
  FsUsage u;
  uint64_t frsize = sv.f_frsize != 0 ? sv.f_frsize : sv.f_bsize;
  u.total_bytes = sv.f_blocks * frsize;
  u.available_bytes = sv.f_bavail * frsize;
  u.used_bytes = (sv.f_blocks - sv.f_bfree) * frsize;
  u.total_inodes = sv.f_files;
  u.read_only = (sv.f_flag & ST_RDONLY) != 0;
  u.free_inodes = sv.f_ffree;
  u.used_inodes = sv.f_files - sv.f_ffree;
  return u;
}

StatusOr<uint64_t> RootedHost::TrimFilesystem(const std::string& mount_path, const std::string& expected_device) const {
  std::string real = Resolve(mount_path);
  UniqueFd fd(::open(real.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoToStatus(errno, "open " + real);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, "stat " + real);
  std::string device = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  if (device != expected_device) {
    return FailedPrecondition(real + " is on device " + device + ", not " + expected_device +
                              " (the filesystem is no longer mounted there)");
  }
  // minlen 0: every free extent, as fstrim(8) does by default; the
  // filesystem rounds it up to the device's discard granularity.
  struct fstrim_range range {
    .start = 0, .len = std::numeric_limits<uint64_t>::max(), .minlen = 0
  };
  if (::ioctl(fd.get(), FITRIM, &range) != 0) return ErrnoToStatus(errno, "FITRIM " + real);
  return static_cast<uint64_t>(range.len);
}

bool RootedHost::HasCapSysResource() const {
  auto status = ReadFile("/proc/self/status");
  if (!status.ok()) return false;
  std::istringstream lines(*status);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      uint64_t caps = std::stoull(line.substr(7), nullptr, 16);
      return (caps >> kCapSysResource) & 1U;
    }
  }
  return false;
}

StatusOr<DetachedProcess> RootedHost::SpawnDetached(const std::vector<std::string>& argv) const {
  if (argv.empty()) return InvalidArgument("spawn: empty argv");
  std::vector<std::string> args = argv;
  int in_pipe[2], out_pipe[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in_pipe) != 0) {
    return ErrnoToStatus(errno, "socketpair for " + args[0]);
  }
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    ::close(in_pipe[0]);
    ::close(in_pipe[1]);
    return ErrnoToStatus(err, "pipe for " + args[0]);
  }
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t child = ::fork();
  if (child < 0) {
    int err = errno;
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1]}) ::close(fd);
    return ErrnoToStatus(err, "fork for " + args[0]);
  }
  if (child == 0) ExecDetached(cargv.data(), in_pipe[0], out_pipe[1]);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return DetachedProcess{.stdin_fd = in_pipe[1], .stdout_fd = out_pipe[0]};
}

void RootedHost::Kill(pid_t pid) const { ::kill(pid, SIGKILL); }

void RootedHost::Reap(pid_t pid) const { ::waitpid(pid, nullptr, WNOHANG); }

// Processes are the machine's whatever the root (like Kill and Reap).
StatusOr<int> RootedHost::WatchExit(pid_t pid) const {
  if (pid <= 0) return InvalidArgument("watch the exit of pid " + std::to_string(pid));
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) return fd;
  if (errno == ESRCH) return NotFound("process " + std::to_string(pid) + " is gone");
  if (errno == ENOSYS) return Unimplemented("this kernel has no pidfd_open (Linux 5.3)");
  return ErrnoToStatus(errno, "pidfd_open " + std::to_string(pid));
}

std::unique_ptr<Host> HostRootedAt(std::string root) { return std::make_unique<RootedHost>(std::move(root)); }

std::shared_ptr<Host> MachineHost() {
  static std::shared_ptr<Host> host = std::make_shared<RootedHost>("");
  return host;
}

StatusOr<std::string> ReadTrimmed(const Host& host, const std::string& path) {
  BLOCKCSI_ASSIGN_OR_RETURN(std::string text, host.ReadFile(path));
  auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return std::string();
  auto end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

}  // namespace blockcsi
