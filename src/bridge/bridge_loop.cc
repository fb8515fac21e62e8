// The bridge's loop device, configured in-process with one LOOP_CONFIGURE
// (what losetup does) and detached with LOOP_CLR_FD, instead of an exec of
// losetup each way.
//
// The bridge holds neither the loop device nor the FUSE file open after
// configuring: it is the FUSE server, so a descriptor of its own FUSE file
// (or of a loop device with dirty pages on it) closed by the kernel when
// the bridge is killed would send a request to the dying bridge and wait
// for its answer forever.
#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "bridge/bridge_internal.h"
#include "common/logging.h"
#include "common/unique_fd.h"

namespace blockcsi::bridge_internal {
namespace {

// Another process may take the free device between the ask and the
// configure (EBUSY): ask again, as losetup does. Every racer is handed the
// same lowest free device and one wins per round, so a storm of N bridges
// starting at once needs up to N rounds: the bound is time, not a count
// (16 tries lost to 32 concurrent stages), with a short random pause so the
// losers do not stay in step.
constexpr std::chrono::seconds kConfigureFor{10};

}  // namespace

Status Bridge::SetUpLoop() {
  std::string file = args_.mountpoint + "/lun";
  int access = args_.read_only ? O_RDONLY : O_RDWR;
  UniqueFd backing(::open(file.c_str(), access | O_DIRECT | O_CLOEXEC));
  if (backing.get() < 0) return ErrnoToStatus(errno, "open " + file);
  UniqueFd control(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (control.get() < 0) return ErrnoToStatus(errno, "open /dev/loop-control");
  loop_config config{};
  config.fd = static_cast<uint32_t>(backing.get());
  config.block_size = transport_->block_size();
  config.info.lo_flags = LO_FLAGS_DIRECT_IO | (args_.read_only ? LO_FLAGS_READ_ONLY : 0);
  std::strncpy(reinterpret_cast<char*>(config.info.lo_file_name), file.c_str(), LO_NAME_SIZE - 1);
  int err = EBUSY;
  const auto give_up = std::chrono::steady_clock::now() + kConfigureFor;
  std::minstd_rand jitter(static_cast<unsigned>(::getpid()));
  for (bool first = true; err == EBUSY && std::chrono::steady_clock::now() < give_up; first = false) {
    if (!first) std::this_thread::sleep_for(std::chrono::microseconds(100 + jitter() % 900));
    int n = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (n < 0) return ErrnoToStatus(errno, "LOOP_CTL_GET_FREE");
    std::string device = "/dev/loop" + std::to_string(n);
    // The kernel makes the device read-only unless this open may write.
    UniqueFd fd(::open(device.c_str(), access | O_CLOEXEC));
    if (fd.get() < 0) return ErrnoToStatus(errno, "open " + device);
    if (::ioctl(fd.get(), LOOP_CONFIGURE, &config) == 0) {
      device_ = device;
      err = 0;
    } else {
      err = errno;
    }
  }
  if (err != 0) return ErrnoToStatus(err, "LOOP_CONFIGURE for " + file);
  LogInfo("bridge loop device ready", {{"volume_id", args_.volume_id}, {"device", device_}});
  return OkStatus();
}

// The kernel tears the device down at its last close (ours, or, when
// someone holds it a moment, theirs: as with losetup -d). ENXIO: already
// detached (by an admin, or an earlier attempt).
Status Bridge::DetachLoop() {
  UniqueFd fd(::open(device_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno == ENOENT || errno == ENXIO ? OkStatus() : ErrnoToStatus(errno, "open " + device_);
  if (::ioctl(fd.get(), LOOP_CLR_FD) != 0 && errno != ENXIO) return ErrnoToStatus(errno, "detach " + device_);
  return OkStatus();
}

}  // namespace blockcsi::bridge_internal
