// The bridge's loop device, configured in-process with one LOOP_CONFIGURE
// (what losetup does) instead of an exec of losetup, and held open for the
// bridge's life (issue #18):
//  - the backing file stays open, so configuring sends no FUSE flush (a
//    close() of a FUSE file is a flush, a SYNCHRONIZE CACHE round trip);
//  - the loop device stays open with its soft block size set to the LUN's
//    sector size. A block device's page cache otherwise works in 4 KiB
//    blocks once its size allows, so every 1 KiB write mkfs.ext4 makes
//    (superblock copies, group descriptors, bitmaps) first reads the whole
//    4 KiB block, one synchronous round trip to the target each (76 of
//    them for a 64 MiB ext4). With 512-byte blocks a covered block is never
//    read; the same bytes are written. The setting lasts only while
//    someone holds the device open, hence the held descriptor. A mount sets
//    its filesystem's block size over it as it always does.
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "bridge/bridge_internal.h"
#include "common/logging.h"
#include "common/unique_fd.h"

namespace blockcsi::bridge_internal {
namespace {

// Another process may take the free device between the ask and the
// configure (EBUSY): ask again, as losetup does.
constexpr int kConfigureAttempts = 16;

}  // namespace

Status Bridge::SetUpLoop() {
  std::string file = args_.mountpoint + "/lun";
  int access = args_.read_only ? O_RDONLY : O_RDWR;
  backing_fd_ = ::open(file.c_str(), access | O_DIRECT | O_CLOEXEC);
  if (backing_fd_ < 0) return ErrnoToStatus(errno, "open " + file);
  UniqueFd control(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (control.get() < 0) return ErrnoToStatus(errno, "open /dev/loop-control");
  loop_config config{};
  config.fd = static_cast<uint32_t>(backing_fd_);
  config.block_size = transport_->block_size();
  config.info.lo_flags = LO_FLAGS_DIRECT_IO | (args_.read_only ? LO_FLAGS_READ_ONLY : 0);
  std::strncpy(reinterpret_cast<char*>(config.info.lo_file_name), file.c_str(), LO_NAME_SIZE - 1);
  int err = EBUSY;
  for (int attempt = 0; attempt < kConfigureAttempts && err == EBUSY; ++attempt) {
    int n = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (n < 0) return ErrnoToStatus(errno, "LOOP_CTL_GET_FREE");
    std::string device = "/dev/loop" + std::to_string(n);
    // The kernel makes the device read-only unless this open may write.
    UniqueFd fd(::open(device.c_str(), (args_.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC));
    if (fd.get() < 0) return ErrnoToStatus(errno, "open " + device);
    if (::ioctl(fd.get(), LOOP_CONFIGURE, &config) != 0) {
      err = errno;
      continue;
    }
    // Held read-only: an open for writing would keep a kernel without
    // BLK_DEV_WRITE_MOUNTED from mounting the device.
    loop_fd_ = ::open(device.c_str(), O_RDONLY | O_CLOEXEC);
    if (loop_fd_ < 0) {
      err = errno;
      ::ioctl(fd.get(), LOOP_CLR_FD);  // a failed start leaves no loop device
      return ErrnoToStatus(err, "open " + device);
    }
    device_ = device;
    err = 0;
  }
  if (err != 0) return ErrnoToStatus(err, "LOOP_CONFIGURE for " + file);
  int block_size = static_cast<int>(transport_->block_size());
  if (::ioctl(loop_fd_, BLKBSZSET, &block_size) != 0) {
    // Only slower formatting, never different bytes: keep going.
    LogWarn("bridge cannot set the loop device's block size",
            {{"volume_id", args_.volume_id}, {"device", device_}, {"errno", std::strerror(errno)}});
  }
  LogInfo("bridge loop device ready", {{"volume_id", args_.volume_id}, {"device", device_}});
  return OkStatus();
}

// Detaches the loop device the bridge configured. The kernel tears it down
// on the last close (ours, unless someone else holds it a moment, then at
// theirs, as with losetup -d). ENXIO: already detached (by an admin, or an
// earlier attempt).
Status Bridge::DetachLoop() {
  if (loop_fd_ >= 0) {
    if (::ioctl(loop_fd_, LOOP_CLR_FD) != 0 && errno != ENXIO) {
      return ErrnoToStatus(errno, "detach " + device_);
    }
    ::close(loop_fd_);
    loop_fd_ = -1;
  }
  if (backing_fd_ >= 0) {
    ::close(backing_fd_);
    backing_fd_ = -1;
  }
  return OkStatus();
}

}  // namespace blockcsi::bridge_internal
