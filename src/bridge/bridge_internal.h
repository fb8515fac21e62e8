// Internals of the userspace bridge shared by its bridge_*.cc files: its
// arguments, the secrets it reads from stdin and the Bridge class that serves
// the volume over FUSE. Not an interface.
#pragma once

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312
#endif

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bridge/bridge_cgroup.h"
#include "bridge/bridge_protocol.h"
#include "bridge/bridge_transport.h"
#include "bridge/buffer_pool.h"
#include "bridge/fuse_ring.h"
#include "bridge/iscsi_bridge_transport.h"
#include "bridge/libiscsi_session.h"
#include "bridge/write_order.h"
#include "common/atomic_file.h"
#include "common/executor.h"
#include "common/host.h"
#include "common/logging.h"
#include "common/loop_devices.h"
#include "common/lun_identity.h"
#include "common/mutex.h"

namespace blockcsi::bridge_internal {

// Largest FUSE request (max_read/max_write). Each FUSE worker keeps a
// receive buffer this large (+4 KiB) for its life, so this is a memory size
// as much as a throughput one; only the pages the largest request touched
// are resident (docs/performance.md section 7).
constexpr uint32_t kMaxTransferBytes = 1024 * 1024;

struct BridgeArgs {
  std::string transport = "iscsi";  // "iscsi" | "rbd"
  std::string volume_id;
  std::string control_socket;
  std::string mountpoint;
  std::vector<std::string> portals;
  std::string target_iqn;
  int lun = 0;
  std::string initiator_iqn;
  std::string expected_serial;
  std::string expected_wwn;
  bool read_only = false;
  bool secrets_on_stdin = false;
  int io_timeout_s = 30;
  int reconnect_retries = 3;
  // iSCSI sessions for data, used in turn; each keeps up to queue_depth
  // commands in flight, so one is enough on a single link.
  int sessions = 1;
  int queue_depth = 32;
  std::string log_format = "text";
  std::string log_level = "info";  // the plugin's, so that its debug lines are the bridge's too
  // Transport "rbd": the image, the monitors (empty: ceph_conf's), the
  // cephx id, and the node id under which the client registers for fencing.
  // expected_serial carries the image id.
  std::string rbd_pool;
  std::string rbd_image;
  std::string ceph_monitors;
  std::string ceph_user = "admin";
  std::string ceph_conf = "/etc/ceph/ceph.conf";
  std::string node_id;
  // A cgroup v2 directory outside the plugin container's: the bridge moves
  // itself there before it opens anything, so that the runtime's kill of
  // the plugin's container does not reach it.
  std::string cgroup;
  // "auto": serve FUSE over io_uring when the kernel offers it at INIT
  // (fuse's enable_uring parameter on), /dev/fuse otherwise; "off": always
  // /dev/fuse (benchmarks compare the two on one kernel).
  std::string fuse_io_uring = "auto";
};

// What arrives on stdin (JSON), never in argv: /proc/<pid>/cmdline is
// readable by every user of the node.
struct BridgeSecrets {
  ChapCredentials chap;
  std::string ceph_key;
};
Status ParseArgs(int argc, char** argv, BridgeArgs* a);
StatusOr<BridgeSecrets> ReadSecretsFromStdin();

class Bridge {
 public:
  explicit Bridge(BridgeArgs args) : args_(std::move(args)), executor_(MakeProcessExecutor()) {}

  Status Start(const BridgeSecrets& secrets);
  // Serves the control socket until a shutdown succeeds.
  void Serve();
  // Detaches the loop device, unmounts FUSE and logs out; FAILED_PRECONDITION
  // (and nothing torn down) while the loop device is still mounted.
  Status Teardown(bool check_in_use);
  nlohmann::json StatusReply(bool refresh_identity);

  // FUSE requests: each replies to `req` exactly once, from the completion
  // of its storage command (any thread), so many are in flight at once.
  void ServeRead(fuse_req_t req, size_t size, off_t off);
  void ServeWrite(fuse_req_t req, const char* buf, size_t size, off_t off);
  // flush and fsync: after every write submitted before it completed, then
  // the transport's flush (SYNCHRONIZE CACHE).
  void ServeFsync(fuse_req_t req);
  // fallocate: PUNCH_HOLE (the loop device's discard, and its write-zeroes
  // that may deallocate) goes to the transport's PunchHoleAsync;
  // ZERO_RANGE (write-zeroes that must stay allocated) is written as zeros.
  // EOPNOTSUPP where the volume cannot deallocate: the loop device then
  // stops advertising discard. EIO when the storage failed: a discard is
  // never reported done that was not.
  void ServeFallocate(fuse_req_t req, int mode, off_t off, off_t length);
  // The loop device's discard granularity (statfs f_bsize), in bytes.
  uint32_t discard_granularity() const { return transport_->discard_granularity(); }
  uint64_t size() const { return size_.load(); }
  bool read_only() const { return args_.read_only; }

  const std::string& device() const { return device_; }
  // libfuse's writes to /dev/fuse (its custom I/O): an answer to a ring
  // request goes back through the ring, INIT's gets the ring flag.
  ssize_t WriteFuse(int fd, struct iovec* iov, int count);
  const LunIdentity& identity() const { return identity_; }

 private:
  StatusOr<std::unique_ptr<BridgeTransport>> OpenIscsi(const ChapCredentials& chap);
  StatusOr<std::unique_ptr<BridgeTransport>> OpenRbd(const std::string& key);
  Status MountFuse();
  void StopFuse();
  // Reads and dispatches what /dev/fuse holds (on the transport's thread,
  // see BridgeTransport::Watch); false once the session ended.
  bool ServeFuseRequests();
  // Reads and answers the session's INIT, offering to take the ring when
  // the kernel did; then starts the ring (bridge_fuse_ring.cc) or not.
  Status ServeInit();
  void StartRing();
  void StopRing();
  const char* fuse_path() const { return ring_ ? "io_uring" : "dev_fuse"; }
  // Unaligned writes (never from the loop device; from cat or dd): a
  // read-modify-write of the blocks they touch, one at a time, async like
  // the rest (the thread that serves FUSE may be the one that completes).
  struct RmwWrite {
    fuse_req_t req = nullptr;
    std::string data;
    uint64_t offset = 0;
    uint64_t ticket = 0;
    std::chrono::steady_clock::time_point start;
  };
  void WriteUnaligned(RmwWrite job);
  void StartRmw();
  void FinishRmw(const Status& st, char* blocks);
  void NoteWriteError(const Status& st);
  Status SetUpLoop();  // bridge_loop.cc
  Status DetachLoop();
  Status ListenControl();
  nlohmann::json Handle(const nlohmann::json& request, bool* stop);
  void NoteIoError(const Status& st);

  BridgeArgs args_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<BridgeTransport> transport_;  // set by Start, reset by Teardown
  LunIdentity identity_;
  std::atomic<uint64_t> size_{0};
  fuse_session* fuse_ = nullptr;
  std::thread fuse_thread_;    // RBD: libfuse's loop
  bool fuse_watched_ = false;  // iSCSI: served by the session's thread
  fuse_buf fuse_in_{};         // its receive buffer
  // FUSE over io_uring, when the kernel offered it and the entries registered.
  std::unique_ptr<FuseRing> ring_;
  std::thread ring_thread_;  // RBD: waits for the ring's completions
  std::atomic<bool> ring_stop_{false};
  uint64_t init_unique_ = 0;    // the INIT being answered with the ring flag
  bool ring_accepted_ = false;  // INIT's answer took the ring
  // Request buffers; large ones are kept only when the session's thread
  // serves FUSE (it trims them when idle).
  BufferPool buffers_{kMaxTransferBytes, 0};
  WriteOrder write_order_;
  bool fuse_mounted_ = false;
  std::string device_;
  int listen_fd_ = -1;
  Mutex rmw_mu_;
  std::deque<RmwWrite> rmw_queue_ GUARDED_BY(rmw_mu_);  // the front one is running
  std::atomic<uint64_t> io_errors_{0};
  // I/O figures for `status` (the plugin's metrics, blockctl io): counted
  // here, where every FUSE read and write passes, with lock-free atomics.
  struct IoCounters {
    std::atomic<uint64_t> ops{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> errors{0};
    std::atomic<uint64_t> micros{0};                                        // summed latency
    std::array<std::atomic<uint64_t>, kIoLatencyBuckets.size()> buckets{};  // per bucket, not cumulative
    void Record(size_t size, std::chrono::steady_clock::duration took, bool ok);
    nlohmann::json ToJson() const;
  };
  IoCounters reads_, writes_, flushes_, discards_;
  // Failed writes and flushes since this bridge started: unlike a failed
  // read, each may have lost data the filesystem counted on, so the volume
  // stays abnormal until it is restaged (a new bridge).
  std::atomic<uint64_t> write_errors_{0};
  Mutex err_mu_;
  std::string last_error_ GUARDED_BY(err_mu_);
  std::chrono::steady_clock::time_point last_error_at_ GUARDED_BY(err_mu_);
};

}  // namespace blockcsi::bridge_internal
