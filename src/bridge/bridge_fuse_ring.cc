// The bridge's choice between FUSE over io_uring and /dev/fuse, made once at
// INIT: libfuse 3.14 keeps the session (mount, INIT, every handler) but
// cannot speak the ring, so its reads and writes of /dev/fuse go through a
// custom I/O whose write adds the ring flag to INIT's answer and sends the
// answers to ring requests back through their entries (FuseRing).
#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "bridge/bridge_internal.h"
#include "bridge/fuse_ring_request.h"

namespace blockcsi::bridge_internal {
namespace {

// Entries per queue (one queue per possible CPU; a request waits in the
// kernel for a free entry of its CPU's queue): the loop device's queue
// depth of 16 fits on one queue. Each entry's payload buffer is max_write
// (the kernel's minimum) of reserved memory, resident as far as requests
// touched it.
constexpr unsigned kRingDepth = 16;

ssize_t ReadFuse(int fd, void* buf, size_t len, void*) { return ::read(fd, buf, len); }

ssize_t WriteFuseHook(int fd, struct iovec* iov, int count, void* userdata) {
  return static_cast<Bridge*>(userdata)->WriteFuse(fd, iov, count);
}

const fuse_custom_io kFuseIo = [] {
  fuse_custom_io io{};
  io.read = ReadFuse;
  io.writev = WriteFuseHook;
  return io;
}();

}  // namespace

Status Bridge::ServeInit() {
  if (fuse_session_custom_io(fuse_, &kFuseIo, fuse_session_fd(fuse_)) != 0) {
    return Internal("bridge: cannot set FUSE I/O for volume " + args_.volume_id);
  }
  // The kernel queued INIT at mount: the first request on /dev/fuse.
  int n = 0;
  do {
    n = fuse_session_receive_buf(fuse_, &fuse_in_);
  } while (n == -EINTR);
  if (n <= 0) return Internal("bridge: no FUSE INIT for volume " + args_.volume_id);
  fuse_in_header in;
  fuse_init_in init{};
  std::memcpy(&in, fuse_in_.mem, sizeof in);
  bool offered = false;
  if (in.opcode == FUSE_INIT && static_cast<size_t>(n) >= sizeof in + sizeof init) {
    std::memcpy(&init, static_cast<char*>(fuse_in_.mem) + sizeof in, sizeof init);
    offered = (init.flags & FUSE_INIT_EXT) != 0 && (init.flags2 & (fuse_ring::kFuseOverIoUring >> 32)) != 0;
  }
  if (offered && args_.fuse_io_uring == "auto") init_unique_ = in.unique;
  fuse_session_process_buf(fuse_, &fuse_in_);
  init_unique_ = 0;
  LogInfo("bridge FUSE session initialised", {{"volume_id", args_.volume_id},
                                              {"kernel_offers_io_uring", offered ? "true" : "false"},
                                              {"io_uring_accepted", ring_accepted_ ? "true" : "false"}});
  return OkStatus();
}

ssize_t Bridge::WriteFuse(int fd, struct iovec* iov, int count) {
  if (ring_ && ring_->Reply(iov, count)) {
    ssize_t total = 0;
    for (int i = 0; i < count; ++i) total += static_cast<ssize_t>(iov[i].iov_len);
    return total;
  }
  fuse_out_header out{};
  if (init_unique_ != 0 && count >= 2 && iov[0].iov_len >= sizeof out) std::memcpy(&out, iov[0].iov_base, sizeof out);
  fuse_init_out init{};
  if (init_unique_ != 0 && out.unique == init_unique_ && out.error == 0 &&
      iov[1].iov_len >= offsetof(fuse_init_out, flags2) + sizeof init.flags2 && iov[1].iov_len <= sizeof init) {
    std::memcpy(&init, iov[1].iov_base, iov[1].iov_len);
    init.flags |= FUSE_INIT_EXT;
    init.flags2 |= static_cast<uint32_t>(fuse_ring::kFuseOverIoUring >> 32);
    iov[1].iov_base = &init;
    ssize_t n = ::writev(fd, iov, count);
    ring_accepted_ = n >= 0;
    return n;
  }
  return ::writev(fd, iov, count);
}

void Bridge::StartRing() {
  unsigned queues = static_cast<unsigned>(get_nprocs_conf());
  auto ring = FuseRing::Create(fuse_session_fd(fuse_), queues, kRingDepth, kMaxTransferBytes,
                               [this](char* request, size_t size) {
                                 fuse_buf buf{};
                                 buf.size = size;
                                 buf.mem = request;
                                 fuse_session_process_buf(fuse_, &buf);
                               });
  Status st = ring.status();
  if (st.ok()) {
    ring_ = std::move(*ring);
    // iSCSI: the session's thread serves the ring (and submits every
    // command of it), as it serves /dev/fuse otherwise; RBD: a thread of
    // the ring's own. Neither ever does I/O on the mount (FuseRing::Create).
    if (transport_->Watch(
            ring_->fd(), [this] { return ring_->ServeCompletions(); }, [this] { buffers_.Trim(); })) {
      fuse_watched_ = true;
    } else {
      ring_thread_ = std::thread([this] {
        while (!ring_stop_.load() && ring_->WaitAndServe(200)) {
        }
      });
    }
    st = ring_->AwaitRegistration(std::chrono::seconds(10));
  }
  if (!st.ok()) {
    // The kernel still serves /dev/fuse while the ring is incomplete.
    LogWarn("bridge FUSE io_uring refused; serving /dev/fuse",
            {{"volume_id", args_.volume_id}, {"error", st.message()}});
    StopRing();
    ring_.reset();
    ring_stop_ = false;
    return;
  }
  // /dev/fuse still carries what never goes through the ring (INTERRUPT,
  // FORGET): libfuse's own loop, blocking, on its own thread.
  fuse_thread_ = std::thread([this] {
    fuse_loop_config* config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(config, 1);
    fuse_loop_cfg_set_idle_threads(config, 1);
    fuse_session_loop_mt(fuse_, config);
    fuse_loop_cfg_destroy(config);
  });
  LogInfo("bridge serves FUSE over io_uring", {{"volume_id", args_.volume_id},
                                               {"queues", std::to_string(ring_->queues())},
                                               {"depth", std::to_string(ring_->depth())}});
}

void Bridge::StopRing() {
  ring_stop_ = true;
  if (ring_thread_.joinable()) ring_thread_.join();
  if (fuse_watched_) {
    transport_->Unwatch();
    fuse_watched_ = false;
  }
}

}  // namespace blockcsi::bridge_internal
