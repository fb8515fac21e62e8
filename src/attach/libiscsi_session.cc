#include "attach/libiscsi_session.h"

// libiscsi's headers are C and need these before them.
#include <stdint.h>
#include <sys/types.h>

extern "C" {
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
}

#include <cstring>

#include "common/logging.h"

namespace blockcsi {
namespace {

StatusCode LoginFailureCode(const std::string& error) {
  if (error.find("Authentication failure") != std::string::npos) return StatusCode::kPermissionDenied;
  // Mutual CHAP: the target failed to prove its own secret.
  if (error.find("Authentication failed") != std::string::npos) return StatusCode::kPermissionDenied;
  if (error.find("Authorization failure") != std::string::npos) return StatusCode::kPermissionDenied;
  if (error.find("Target not found") != std::string::npos) return StatusCode::kNotFound;
  if (error.find("Target removed") != std::string::npos) return StatusCode::kNotFound;
  return StatusCode::kUnavailable;
}

}  // namespace

StatusOr<std::unique_ptr<LibIscsiSession>> LibIscsiSession::Connect(const LibIscsiOptions& o) {
  if (o.portals.empty()) return InvalidArgument("no portal to log in to");
  std::vector<std::string> failures;
  StatusCode worst = StatusCode::kUnavailable;
  for (const std::string& portal : o.portals) {
    iscsi_context* ctx = iscsi_create_context(o.initiator_iqn.c_str());
    if (ctx == nullptr) return Internal("libiscsi: cannot create a context");
    iscsi_set_targetname(ctx, o.target_iqn.c_str());
    iscsi_set_session_type(ctx, ISCSI_SESSION_NORMAL);
    iscsi_set_header_digest(ctx, ISCSI_HEADER_DIGEST_NONE_CRC32C);
    iscsi_set_timeout(ctx, static_cast<int>(o.command_timeout.count()));
    iscsi_set_reconnect_max_retries(ctx, o.reconnect_retries);
    // A dead peer must show up as an error within the command timeout,
    // not after the kernel's TCP retransmission minutes.
    iscsi_set_tcp_user_timeout(ctx, static_cast<int>(o.command_timeout.count() * 1000));
    if (o.chap.enabled()) {
      iscsi_set_initiator_username_pwd(ctx, o.chap.username.c_str(), o.chap.password.c_str());
      if (o.chap.mutual()) {
        iscsi_set_target_username_pwd(ctx, o.chap.mutual_username.c_str(), o.chap.mutual_password.c_str());
      }
    }
    if (iscsi_full_connect_sync(ctx, portal.c_str(), o.lun) != 0) {
      // libiscsi's messages carry status text, never the CHAP secret.
      std::string error = iscsi_get_error(ctx);
      iscsi_destroy_context(ctx);
      StatusCode code = LoginFailureCode(error);
      if (code != StatusCode::kUnavailable) worst = code;
      failures.push_back(portal + ": " + error);
      LogWarn("iSCSI login failed", {{"portal", portal}, {"target", o.target_iqn}, {"error", error}});
      continue;
    }
    std::unique_ptr<LibIscsiSession> s(new LibIscsiSession());
    s->ctx_ = ctx;
    s->portal_ = portal;
    s->target_iqn_ = o.target_iqn;
    s->lun_ = o.lun;
    BLOCKCSI_RETURN_IF_ERROR(s->RefreshCapacity());
    return s;
  }
  std::string joined;
  for (const auto& f : failures) joined += (joined.empty() ? "" : "; ") + f;
  std::string hint = " (no portal answered: unreachable or connection refused)";
  if (worst == StatusCode::kPermissionDenied) hint = " (CHAP credentials rejected)";
  if (worst == StatusCode::kNotFound) {
    hint = " (the target does not exist, or initiator " + o.initiator_iqn + " is not in its ACL)";
  }
  return Status(worst, "iSCSI login to " + o.target_iqn + " failed" + hint + ": " + joined);
}

LibIscsiSession::~LibIscsiSession() { Close(); }

void LibIscsiSession::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (ctx_ == nullptr) return;
  // Logout must not block teardown for long when the target is gone.
  iscsi_set_timeout(ctx_, 5);
  iscsi_set_reconnect_max_retries(ctx_, 0);
  iscsi_logout_sync(ctx_);
  iscsi_destroy_context(ctx_);
  ctx_ = nullptr;
}

Status LibIscsiSession::TaskError(const char* what, scsi_task* task) {
  std::string detail;
  if (task == nullptr) {
    detail = iscsi_get_error(ctx_);
  } else {
    detail = task->status == SCSI_STATUS_CHECK_CONDITION
                 ? std::string("check condition: ") + scsi_sense_key_str(task->sense.key) + " / " +
                       scsi_sense_ascq_str(task->sense.ascq)
                 : std::string(iscsi_get_error(ctx_));
    scsi_free_scsi_task(task);
  }
  return Unavailable(std::string(what) + " on " + target_iqn_ + " lun " + std::to_string(lun_) + " failed: " + detail);
}

StatusOr<std::string> LibIscsiSession::InquiryVpd(int page) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ctx_ == nullptr) return FailedPrecondition("session closed");
  scsi_task* task = iscsi_inquiry_sync(ctx_, lun_, 1, page, 255);
  if (task == nullptr || task->status != SCSI_STATUS_GOOD) return TaskError("INQUIRY VPD", task);
  std::string out(reinterpret_cast<const char*>(task->datain.data), static_cast<size_t>(task->datain.size));
  scsi_free_scsi_task(task);
  return out;
}

Status LibIscsiSession::RefreshCapacity() {
  std::lock_guard<std::mutex> lock(mu_);
  if (ctx_ == nullptr) return FailedPrecondition("session closed");
  scsi_task* task = iscsi_readcapacity16_sync(ctx_, lun_);
  if (task == nullptr || task->status != SCSI_STATUS_GOOD) return TaskError("READ CAPACITY(16)", task);
  auto* rc16 = static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(task));
  if (rc16 == nullptr) {
    scsi_free_scsi_task(task);
    return Internal("cannot decode READ CAPACITY(16) of " + target_iqn_);
  }
  block_size_ = rc16->block_length;
  num_blocks_ = rc16->returned_lba + 1;
  scsi_free_scsi_task(task);
  return OkStatus();
}

Status LibIscsiSession::Read(uint64_t lba, uint32_t blocks, void* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ctx_ == nullptr) return FailedPrecondition("session closed");
  // Data-In lands straight in the caller's buffer: no per-command
  // allocation and copy inside libiscsi.
  scsi_iovec iov{buffer, size_t{blocks} * block_size_};
  scsi_task* task = iscsi_read16_iov_sync(ctx_, lun_, lba, blocks * block_size_, static_cast<int>(block_size_), 0, 0, 0,
                                          0, 0, &iov, 1);
  if (task == nullptr || task->status != SCSI_STATUS_GOOD) return TaskError("READ(16)", task);
  if (task->residual_status == SCSI_RESIDUAL_UNDERFLOW && task->residual > 0) {
    scsi_free_scsi_task(task);
    return Unavailable("short READ(16) from " + target_iqn_);
  }
  scsi_free_scsi_task(task);
  return OkStatus();
}

Status LibIscsiSession::Write(uint64_t lba, uint32_t blocks, const void* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ctx_ == nullptr) return FailedPrecondition("session closed");
  scsi_task* task = iscsi_write16_sync(ctx_, lun_, lba, static_cast<unsigned char*>(const_cast<void*>(buffer)),
                                       blocks * block_size_, static_cast<int>(block_size_), 0, 0, 0, 0, 0);
  if (task == nullptr || task->status != SCSI_STATUS_GOOD) return TaskError("WRITE(16)", task);
  scsi_free_scsi_task(task);
  return OkStatus();
}

Status LibIscsiSession::SynchronizeCache() {
  std::lock_guard<std::mutex> lock(mu_);
  if (ctx_ == nullptr) return FailedPrecondition("session closed");
  scsi_task* task = iscsi_synchronizecache10_sync(ctx_, lun_, 0, 0, 0, 0);
  if (task == nullptr || task->status != SCSI_STATUS_GOOD) return TaskError("SYNCHRONIZE CACHE", task);
  scsi_free_scsi_task(task);
  return OkStatus();
}

}  // namespace blockcsi
