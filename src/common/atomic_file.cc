#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "common/random.h"
#include "common/span.h"

namespace blockcsi {
namespace {

std::string DirectoryOf(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// Each durable step reaches its fault point from the function that makes the
// system call, only after the call succeeded: the order a test records is the
// order of the calls, so a dropped fsync shows as a missing step.
using Step = std::string_view AtomicWritePoints::*;

Status Reached(const AtomicWriteOptions* options, Step step) {
  if (options == nullptr || !options->fault_points) return OkStatus();
  return FaultPoint((*options->fault_points).*step, options->fault_hook);
}

Status FsyncFile(int fd, const std::string& what, const AtomicWriteOptions* options, Step step) {
  Span span("fsync", what);
  if (::fsync(fd) != 0) return ErrnoToStatus(errno, "fsync " + what);
  return Reached(options, step);
}

Status FsyncDirectory(const std::string& dir, const AtomicWriteOptions* options = nullptr) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open directory " + dir);
  Status st = FsyncFile(fd, "directory " + dir, options, &AtomicWritePoints::dir_synced);
  ::close(fd);
  return st;
}

Status WriteAll(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "write " + what);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return OkStatus();
}

}  // namespace

Status WriteFileAtomically(const std::string& path, std::string_view contents, const AtomicWriteOptions& options) {
  // A random suffix: two processes never share a temp file, and a stale temp
  // left by a crash is never mistaken for the real file (readers ignore .tmp-).
  std::string temp = path + ".tmp-" + std::to_string(static_cast<uint32_t>(RandomU64()));
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, options.mode);
  if (fd < 0) return ErrnoToStatus(errno, "create " + temp);
  Status st = WriteAll(fd, contents, temp);
  if (st.ok() && ::fchmod(fd, options.mode) != 0) st = ErrnoToStatus(errno, "chmod " + temp);
  if (st.ok()) st = Reached(&options, &AtomicWritePoints::temp_written);
  if (st.ok()) st = FsyncFile(fd, temp, &options, &AtomicWritePoints::temp_synced);
  ::close(fd);
  if (!st.ok()) {
    ::unlink(temp.c_str());
    return st;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    Status err = ErrnoToStatus(errno, "rename " + temp + " to " + path);
    ::unlink(temp.c_str());
    return err;
  }
  BLOCKCSI_RETURN_IF_ERROR(Reached(&options, &AtomicWritePoints::renamed));
  if (!options.sync_directory) return OkStatus();
  return FsyncDirectory(DirectoryOf(path), &options);
}

StatusOr<std::string> ReadFileToString(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open " + path);
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status st = ErrnoToStatus(errno, "read " + path);
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Status RemoveFileDurably(const std::string& path) {
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return OkStatus();
    return ErrnoToStatus(errno, "remove " + path);
  }
  return FsyncDirectory(DirectoryOf(path));
}

Status MakeDirectories(const std::string& path, mode_t mode) {
  std::error_code ec;
  std::filesystem::path p(path);
  std::filesystem::path partial;
  for (const auto& part : p) {
    partial /= part;
    if (partial.string().empty() || partial == "/") continue;
    if (::mkdir(partial.c_str(), mode) != 0 && errno != EEXIST) {
      return ErrnoToStatus(errno, "mkdir " + partial.string());
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat " + path);
  if (!S_ISDIR(st.st_mode)) return FailedPrecondition(path + " exists and is not a directory");
  return OkStatus();
}

}  // namespace blockcsi
