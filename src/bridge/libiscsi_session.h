// LibIscsiSession: one iSCSI session to one LUN through libiscsi, with the
// limits production needs: every command (and every re-login) finishes
// within the command timeout — an error, never a hang — and a command that
// meets UNIT ATTENTION (e.g. after a target restart) is retried, as the
// kernel's SCSI layer does. libiscsi's own reconnect rides out short
// network blips inside that bound; a command that times out drops the
// session, and the next command logs in afresh.
// The bridge serves FUSE requests with it; benchmarks use it raw.
// Thread-safe: commands are serialised on an internal mutex (a libiscsi
// context must not be used from two threads at once).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/chap.h"
#include "common/status.h"

struct iscsi_context;
struct scsi_task;

namespace blockcsi {

struct LibIscsiOptions {
  std::vector<std::string> portals;  // tried in order; the first that logs in wins
  std::string target_iqn;
  int lun = 0;
  std::string initiator_iqn;
  ChapCredentials chap;
  std::chrono::seconds command_timeout{30};
  int reconnect_retries = 3;
};

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
  uint32_t block_size() const { return block_size_; }
  uint64_t num_blocks() const { return num_blocks_; }
  uint64_t size_bytes() const { return uint64_t{block_size_} * num_blocks_; }
  // Re-logins after a dropped session since Connect.
  uint64_t reconnects() const { return reconnects_.load(); }

  // Raw VPD page (header included) from INQUIRY EVPD.
  StatusOr<std::string> InquiryVpd(int page);
  // READ CAPACITY(16); updates block_size()/num_blocks().
  Status RefreshCapacity();
  Status Read(uint64_t lba, uint32_t blocks, void* buffer);
  Status Write(uint64_t lba, uint32_t blocks, const void* buffer);
  Status SynchronizeCache();
  // Logs out (best effort); the destructor calls it too.
  void Close();

 private:
  LibIscsiSession() = default;
  Status TaskError(const char* what, ::scsi_task* task);
  // The helpers below need mu_ held.
  // Logs in again when the last command dropped the session.
  Status EnsureConnectedLocked();
  // Queues a task made by `queue` (a libiscsi *_task call), waits for it
  // within the command timeout, retries UNIT ATTENTION; returns the task
  // (GOOD status) for the caller to free.
  using QueueTask = ::scsi_task* (*)(iscsi_context*, void* args, void (*cb)(iscsi_context*, int, void*, void*),
                                     void* private_data);
  StatusOr<::scsi_task*> RunLocked(const char* what, QueueTask queue, void* args);
  void DropContextLocked();

  std::mutex mu_;
  std::atomic<uint64_t> reconnects_{0};
  LibIscsiOptions options_;
  bool closed_ = false;           // guarded by mu_
  iscsi_context* ctx_ = nullptr;  // guarded by mu_; null after a dropped session
  std::string portal_;
  std::string target_iqn_;
  int lun_ = 0;
  uint32_t block_size_ = 512;
  uint64_t num_blocks_ = 0;
};

}  // namespace blockcsi
