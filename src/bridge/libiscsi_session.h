// LibIscsiSession: one iSCSI session to one LUN through libiscsi, with
// several SCSI commands in flight, and the limits production needs: every
// command (and every re-login) finishes within the command timeout — an
// error, never a hang — and a command that meets UNIT ATTENTION (e.g. after a
// target restart) is retried, as the kernel's SCSI layer does. libiscsi's own
// reconnect rides out short network blips inside that bound; a command that
// times out drops the session (failing what was in flight on it), and the
// next command logs in afresh.
// One event-loop thread per session owns the libiscsi context (a context
// must not be used from two threads at once): it polls the context's socket
// (iscsi_which_events / iscsi_service), dispatches queued commands while
// fewer than the queue depth are in flight and the target's CmdSN window is
// open, and runs each command's completion on that thread.
// The bridge serves FUSE requests with the async calls; benchmarks use the
// blocking ones. Thread-safe: any thread may call anything.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/chap.h"
#include "common/status.h"

namespace blockcsi {

struct LibIscsiOptions {
  std::vector<std::string> portals;  // tried in order; the first that logs in wins
  std::string target_iqn;
  int lun = 0;
  std::string initiator_iqn;
  ChapCredentials chap;
  std::chrono::seconds command_timeout{30};
  int reconnect_retries = 3;
  // Commands in flight on the session at most. The target's CmdSN window
  // (MaxCmdSN - ExpCmdSN + 1: tgtd 128, LIO 64 by default) bounds it too:
  // commands past the window wait in libiscsi's out-queue, and the loop
  // queues no more while they do.
  int queue_depth = 32;
};

// Completion of an async command; runs on the session's event-loop thread,
// so it must not block (replying to FUSE or counting is fine).
using IscsiDone = std::function<void(Status)>;

class LibIscsiEventLoop;

class LibIscsiSession {
 public:
  // Logs in. PERMISSION_DENIED when CHAP is rejected, NOT_FOUND when the
  // target is unknown or this initiator is not in its ACL (tgt answers both
  // the same way), UNAVAILABLE when no portal answers. Never names a secret.
  static StatusOr<std::unique_ptr<LibIscsiSession>> Connect(const LibIscsiOptions& options);
  ~LibIscsiSession();
  LibIscsiSession(const LibIscsiSession&) = delete;
  LibIscsiSession& operator=(const LibIscsiSession&) = delete;

  const std::string& portal() const { return portal_; }
  uint32_t block_size() const { return block_size_.load(); }
  uint64_t num_blocks() const { return num_blocks_.load(); }
  uint64_t size_bytes() const { return uint64_t{block_size()} * num_blocks(); }
  // READ CAPACITY(16)'s LBPME (thin provisioning) and LBPRZ (unmapped
  // blocks read as zeros) bits, as of the last RefreshCapacity.
  bool lbpme() const { return lbpme_.load(); }
  bool lbprz() const { return lbprz_.load(); }
  // Re-logins after a dropped session since Connect.
  uint64_t reconnects() const;
  // Connections dropped since Connect (a fence ends the session: the node
  // asks at once whether it was fenced).
  uint64_t drops() const;

  // Raw VPD page (header included) from INQUIRY EVPD.
  StatusOr<std::string> InquiryVpd(int page);
  // READ CAPACITY(16); updates block_size()/num_blocks().
  Status RefreshCapacity();
  // Blocking I/O: queue the command and wait for it.
  Status Read(uint64_t lba, uint32_t blocks, void* buffer);
  Status Write(uint64_t lba, uint32_t blocks, const void* buffer);
  Status SynchronizeCache();
  // Async I/O: `buffer` must stay valid until `done` ran. `done` runs
  // exactly once, also when the session is closed before the command ran.
  void ReadAsync(uint64_t lba, uint32_t blocks, void* buffer, IscsiDone done);
  void WriteAsync(uint64_t lba, uint32_t blocks, const void* buffer, IscsiDone done);
  void SynchronizeCacheAsync(IscsiDone done);
  // UNMAP of one extent (blocks > 0), with the command timeout and session
  // recovery of the writes.
  void UnmapAsync(uint64_t lba, uint32_t blocks, IscsiDone done);
  // The event-loop thread also serves `fd` (see LibIscsiEventLoop::Watch):
  // the bridge's /dev/fuse, so that a request is read, sent and replied to
  // on one thread with no hand-over. The blocking calls above fail on that
  // thread (they would wait for themselves).
  void Watch(int fd, std::function<bool()> on_ready, std::function<void()> on_idle);
  void Unwatch();
  // Fails what is queued, logs out (best effort) and stops the event loop;
  // the destructor calls it too.
  void Close();

 private:
  LibIscsiSession() = default;

  std::unique_ptr<LibIscsiEventLoop> loop_;
  std::string portal_;
  std::string target_iqn_;
  std::atomic<uint32_t> block_size_{512};
  std::atomic<uint64_t> num_blocks_{0};
  std::atomic<bool> lbpme_{false};
  std::atomic<bool> lbprz_{false};
};

}  // namespace blockcsi
