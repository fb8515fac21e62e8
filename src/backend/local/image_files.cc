#include "backend/local/image_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/atomic_file.h"
#include "common/span.h"
#include "common/unique_fd.h"

namespace blockcsi {
namespace {

// fsync, timed as a span of the call (common/span.h).
int TimedFsync(int fd, const std::string& what) {
  Span span("fsync", what);
  return ::fsync(fd);
}

// Writes `count` bytes of `from` at `offset` into `to`, in chunks.
Status CopyRange(int from, int to, off_t offset, off_t count, const std::string& what) {
  std::vector<char> buffer(1 << 20);
  while (count > 0) {
    size_t want = static_cast<size_t>(std::min<off_t>(count, static_cast<off_t>(buffer.size())));
    ssize_t n = ::pread(from, buffer.data(), want, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "read " + what);
    }
    if (n == 0) break;  // the source shrank under us: the rest stays a hole
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::pwrite(to, buffer.data() + done, static_cast<size_t>(n - done), offset + done);
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoToStatus(errno, "write copy of " + what);
      }
      done += w;
    }
    offset += n;
    count -= n;
  }
  return OkStatus();
}

// The data extents of `src` (`end` bytes long) into `dst`, holes skipped.
Status CopyDataExtents(int src, int dst, off_t end, const std::string& from) {
  off_t pos = 0;
  while (pos < end) {
    off_t data = ::lseek(src, pos, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // only a hole remains
      return ErrnoToStatus(errno, "seek data in " + from);
    }
    off_t hole = ::lseek(src, data, SEEK_HOLE);
    if (hole < 0) return ErrnoToStatus(errno, "seek hole in " + from);
    BLOCKCSI_RETURN_IF_ERROR(CopyRange(src, dst, data, hole - data, from));
    pos = hole;
  }
  return OkStatus();
}

// An flock, released when its descriptor is closed.
class Flock final : public HeldLock {
 public:
  explicit Flock(int fd) : fd_(fd) {}
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
};

}  // namespace

StatusOr<std::unique_ptr<HeldLock>> HostImageFiles::Lock(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoToStatus(errno, "open " + path);
  auto held = std::make_unique<Flock>(fd);  // closed on every return below but the last
  if (::flock(held->fd(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return FailedPrecondition("lock " + path + " is held by another process");
    return ErrnoToStatus(errno, "lock " + path);
  }
  return std::unique_ptr<HeldLock>(std::move(held));
}

Status HostImageFiles::MakeDirectory(const std::string& path) { return MakeDirectories(path, 0700); }

StatusOr<std::vector<std::string>> HostImageFiles::List(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoToStatus(errno, "open directory " + dir);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

Status HostImageFiles::SyncDirectory(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoToStatus(errno, "open directory " + dir);
  if (TimedFsync(fd.get(), dir) != 0) return ErrnoToStatus(errno, "fsync directory " + dir);
  return OkStatus();
}

StatusOr<PoolSpace> HostImageFiles::Space(const std::string& dir) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return ErrnoToStatus(errno, "statvfs pool " + dir);
  return PoolSpace{static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize,
                   static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize};
}

Status HostImageFiles::CheckAccess(const std::string& dir) {
  if (::access(dir.c_str(), R_OK | W_OK | X_OK) != 0) return ErrnoToStatus(errno, "access pool " + dir);
  return OkStatus();
}

Status HostImageFiles::Create(const std::string& path, uint64_t size_bytes) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (fd.get() < 0) return ErrnoToStatus(errno, "create " + path);
  if (::ftruncate(fd.get(), static_cast<off_t>(size_bytes)) != 0) {
    Status sized = ErrnoToStatus(errno, "size " + path);
    ::unlink(path.c_str());  // a failed create leaves no file
    return sized;
  }
  return OkStatus();
}

Status HostImageFiles::Clone(const std::string& from, const std::string& to, uint64_t size_bytes, CopyMethod* method) {
  UniqueFd src(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (src.get() < 0) return ErrnoToStatus(errno, "open " + from);
  struct stat st {};
  if (::fstat(src.get(), &st) != 0) return ErrnoToStatus(errno, "stat " + from);
  if (static_cast<uint64_t>(st.st_size) > size_bytes) {
    return OutOfRange("copy of " + from + " would shrink it from " + std::to_string(st.st_size) + " to " +
                      std::to_string(size_bytes) + " bytes");
  }
  UniqueFd dst(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (dst.get() < 0) return ErrnoToStatus(errno, "create " + to);
  CopyMethod used = CopyMethod::kReflink;
  if (::ioctl(dst.get(), FICLONE, src.get()) != 0) {
    // EOPNOTSUPP/EINVAL/EXDEV/ENOTTY: this filesystem cannot share extents.
    used = CopyMethod::kSparseCopy;
    BLOCKCSI_RETURN_IF_ERROR(CopyDataExtents(src.get(), dst.get(), st.st_size, from));
  }
  if (::ftruncate(dst.get(), static_cast<off_t>(size_bytes)) != 0) return ErrnoToStatus(errno, "size " + to);
  // The copy's data is durable before its name is placed and its record
  // written: a snapshot or clone must never be committed with data a crash
  // could lose (unlike an empty image, it cannot be made again).
  if (TimedFsync(dst.get(), to) != 0) return ErrnoToStatus(errno, "fsync " + to);
  if (method != nullptr) *method = used;
  return OkStatus();
}

StatusOr<uint64_t> HostImageFiles::Size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat " + path);
  return static_cast<uint64_t>(st.st_size);
}

StatusOr<uint64_t> HostImageFiles::AllocatedBytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat " + path);
  return static_cast<uint64_t>(st.st_blocks) * 512;  // st_blocks counts 512-byte units whatever the block size
}

Status HostImageFiles::Resize(const std::string& path, uint64_t size_bytes) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoToStatus(errno, "open " + path);
  if (::ftruncate(fd.get(), static_cast<off_t>(size_bytes)) != 0) return ErrnoToStatus(errno, "size " + path);
  if (TimedFsync(fd.get(), path) != 0) return ErrnoToStatus(errno, "fsync " + path);
  return OkStatus();
}

Status HostImageFiles::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoToStatus(errno, "rename " + from + " to " + to);
  return OkStatus();
}

Status HostImageFiles::Remove(const std::string& path) {
  Span span("unlink", path);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoToStatus(errno, "remove " + path);
  return OkStatus();
}

Status HostImageFiles::WriteRecord(const std::string& path, std::string_view contents) {
  return WriteFileAtomically(path, contents);
}

StatusOr<std::string> HostImageFiles::ReadRecord(const std::string& path) { return ReadFileToString(path); }

Status HostImageFiles::RemoveDurably(const std::string& path) { return RemoveFileDurably(path); }

std::shared_ptr<ImageFiles> MakeImageFiles() { return std::make_shared<HostImageFiles>(); }

}  // namespace blockcsi
