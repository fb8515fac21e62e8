#include "node/node_host.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include "common/atomic_file.h"

namespace blockcsi {
namespace {

constexpr int kCapSysResource = 24;  // linux/capability.h

class RealNodeHost final : public NodeHost {
 public:
  PathKind Kind(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return PathKind::kMissing;
    if (S_ISDIR(st.st_mode)) return PathKind::kDirectory;
    if (S_ISBLK(st.st_mode)) return PathKind::kBlockDevice;
    if (S_ISREG(st.st_mode)) return PathKind::kFile;
    return PathKind::kOther;
  }

  Status MakeDirectory(const std::string& path) override { return MakeDirectories(path, 0750); }

  Status MakeFile(const std::string& path) override {
    size_t slash = path.rfind('/');
    if (slash != std::string::npos && slash > 0) BLOCKCSI_RETURN_IF_ERROR(MakeDirectories(path.substr(0, slash), 0750));
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) return ErrnoToStatus(errno, "create " + path);
    ::close(fd);
    return OkStatus();
  }

  Status RemovePath(const std::string& path) override {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? OkStatus() : ErrnoToStatus(errno, "stat " + path);
    int rc = S_ISDIR(st.st_mode) ? ::rmdir(path.c_str()) : ::unlink(path.c_str());
    if (rc != 0 && errno != ENOENT) return ErrnoToStatus(errno, "remove " + path);
    return OkStatus();
  }

  StatusOr<std::string> DeviceNumber(const std::string& device) override {
    struct stat st {};
    if (::stat(device.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat " + device);
    if (!S_ISBLK(st.st_mode)) return FailedPrecondition(device + " is not a block device");
    return std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev));
  }

  StatusOr<uint64_t> BlockDeviceSize(const std::string& device) override {
    int fd = ::open(device.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, "open " + device);
    uint64_t size = 0;
    int rc = ::ioctl(fd, BLKGETSIZE64, &size);
    int err = errno;
    ::close(fd);
    if (rc != 0) return ErrnoToStatus(err, "BLKGETSIZE64 " + device);
    return size;
  }

  StatusOr<std::string> LoopBackingFile(const std::string& loop_name) override {
    auto text = ReadFileToString("/sys/block/" + loop_name + "/loop/backing_file");
    if (!text.ok()) return NotFound(loop_name + " is not a configured loop device");
    std::string file = *text;
    while (!file.empty() && (file.back() == '\n' || file.back() == ' ')) file.pop_back();
    return file;
  }

  StatusOr<FsUsage> StatFs(const std::string& path) override {
    struct statvfs sv {};
    if (::statvfs(path.c_str(), &sv) != 0) return ErrnoToStatus(errno, "statvfs " + path);
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

  bool HasCapSysResource() override {
    auto status = ReadFileToString("/proc/self/status");
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
};

}  // namespace

std::unique_ptr<NodeHost> MakeRealNodeHost() { return std::make_unique<RealNodeHost>(); }

}  // namespace blockcsi
