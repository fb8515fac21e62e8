#include "bridge/libiscsi_session.h"

// libiscsi's headers are C and need these before them.
#include <stdint.h>
#include <sys/types.h>

extern "C" {
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
}

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/logging.h"

namespace blockcsi {
namespace {

// libiscsi's last error as one line: some of its texts end in a newline,
// and a CSI error message must be a single line.
std::string IscsiError(iscsi_context* ctx) {
  std::string text = iscsi_get_error(ctx);
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  size_t end = text.find_last_not_of(' ');
  return end == std::string::npos ? std::string() : text.substr(0, end + 1);
}

StatusCode LoginFailureCode(const std::string& error) {
  if (error.find("Authentication failure") != std::string::npos) return StatusCode::kPermissionDenied;
  // Mutual CHAP: the target failed to prove its own secret.
  if (error.find("Authentication failed") != std::string::npos) return StatusCode::kPermissionDenied;
  if (error.find("Authorization failure") != std::string::npos) return StatusCode::kPermissionDenied;
  if (error.find("Target not found") != std::string::npos) return StatusCode::kNotFound;
  if (error.find("Target removed") != std::string::npos) return StatusCode::kNotFound;
  // The target answered, but has no such LUN (the login's TEST UNIT READY
  // got ILLEGAL_REQUEST / LOGICAL UNIT NOT SUPPORTED): a definite answer,
  // not an outage, so no retry will change it.
  if (error.find("LOGICAL_UNIT_NOT_SUPPORTED") != std::string::npos) return StatusCode::kNotFound;
  return StatusCode::kUnavailable;
}

iscsi_context* NewContext(const LibIscsiOptions& o) {
  iscsi_context* ctx = iscsi_create_context(o.initiator_iqn.c_str());
  if (ctx == nullptr) return nullptr;
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
  return ctx;
}

struct Completion {
  bool done = false;
  int status = 0;
};

void OnComplete(iscsi_context*, int status, void*, void* private_data) {
  auto* c = static_cast<Completion*>(private_data);
  c->done = true;
  c->status = status;
}

// libiscsi's *_sync calls wait in their own loop with no overall bound (a
// command queued across a lost connection can wait forever), so every wait
// is ours: poll the context's socket until the callback ran or the deadline.
Status Await(iscsi_context* ctx, const bool& done, std::chrono::steady_clock::time_point deadline,
             const std::string& what) {
  using std::chrono::milliseconds;
  while (!done) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return DeadlineExceeded(what + " did not complete within the command timeout");
    auto left = std::chrono::duration_cast<milliseconds>(deadline - now);
    // Wake at least every 250 ms: libiscsi scans for timed-out PDUs and
    // drives its reconnect only from iscsi_service.
    int wait_ms = static_cast<int>(std::min<milliseconds>(left, milliseconds(250)).count()) + 1;
    pollfd pfd{iscsi_get_fd(ctx), static_cast<short>(iscsi_which_events(ctx)), 0};
    int ready = pfd.events == 0 ? 0 : ::poll(&pfd, 1, wait_ms);
    if (pfd.events == 0) ::usleep(static_cast<useconds_t>(std::min(wait_ms, 100) * 1000));
    if (ready < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, what + ": poll");
    }
    if (iscsi_service(ctx, ready > 0 ? pfd.revents : 0) < 0) {
      return Unavailable(what + ": " + IscsiError(ctx));
    }
  }
  return OkStatus();
}

// One login within the command timeout; the context is ready for commands
// on success and destroyed on failure (error text in *error).
iscsi_context* Login(const LibIscsiOptions& o, const std::string& portal, std::string* error) {
  iscsi_context* ctx = NewContext(o);
  if (ctx == nullptr) {
    *error = "libiscsi: cannot create a context";
    return nullptr;
  }
  Completion c;
  Status st = OkStatus();
  if (iscsi_full_connect_async(ctx, portal.c_str(), o.lun, OnComplete, &c) != 0) {
    st = Unavailable(IscsiError(ctx));
  } else {
    st = Await(ctx, c.done, std::chrono::steady_clock::now() + o.command_timeout, "login");
    if (st.ok() && c.status != 0) st = Unavailable(IscsiError(ctx));
  }
  if (!st.ok()) {
    // libiscsi's messages carry status text, never the CHAP secret.
    *error = st.message();
    iscsi_destroy_context(ctx);
    return nullptr;
  }
  return ctx;
}

}  // namespace

StatusOr<std::unique_ptr<LibIscsiSession>> LibIscsiSession::Connect(const LibIscsiOptions& o) {
  if (o.portals.empty()) return InvalidArgument("no portal to log in to");
  std::vector<std::string> failures;
  StatusCode worst = StatusCode::kUnavailable;
  for (const std::string& portal : o.portals) {
    std::string error;
    iscsi_context* ctx = Login(o, portal, &error);
    if (ctx == nullptr) {
      StatusCode code = LoginFailureCode(error);
      if (code != StatusCode::kUnavailable) worst = code;
      failures.push_back(portal + ": " + error);
      LogWarn("iSCSI login failed", {{"portal", portal}, {"target", o.target_iqn}, {"error", error}});
      continue;
    }
    std::unique_ptr<LibIscsiSession> s(new LibIscsiSession());
    s->options_ = o;
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
    hint = joined.find("LOGICAL_UNIT_NOT_SUPPORTED") != std::string::npos
               ? " (the target has no LUN " + std::to_string(o.lun) + ")"
               : " (the target does not exist, or initiator " + o.initiator_iqn + " is not in its ACL)";
  }
  return Status(worst, "iSCSI login to " + o.target_iqn + " failed" + hint + ": " + joined);
}

LibIscsiSession::~LibIscsiSession() { Close(); }

void LibIscsiSession::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
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
    detail = IscsiError(ctx_);
  } else {
    detail = task->status == SCSI_STATUS_CHECK_CONDITION
                 ? std::string("check condition: ") + scsi_sense_key_str(task->sense.key) + " / " +
                       scsi_sense_ascq_str(task->sense.ascq)
                 : std::string(IscsiError(ctx_));
    scsi_free_scsi_task(task);
  }
  return Unavailable(std::string(what) + " on " + target_iqn_ + " lun " + std::to_string(lun_) + " failed: " + detail);
}

void LibIscsiSession::DropContextLocked() {
  if (ctx_ == nullptr) return;
  // Outstanding tasks complete (cancelled) inside destroy; their owners
  // free them afterwards.
  iscsi_destroy_context(ctx_);
  ctx_ = nullptr;
}

Status LibIscsiSession::EnsureConnectedLocked() {
  if (closed_) return FailedPrecondition("session to " + target_iqn_ + " is closed");
  if (ctx_ != nullptr) return OkStatus();
  std::string error;
  ctx_ = Login(options_, portal_, &error);
  if (ctx_ == nullptr) {
    return Unavailable("iSCSI re-login to " + target_iqn_ + " at " + portal_ + " failed: " + error);
  }
  ++reconnects_;
  LogInfo("iSCSI session re-established", {{"target", target_iqn_}, {"portal", portal_}});
  return OkStatus();
}

StatusOr<scsi_task*> LibIscsiSession::RunLocked(const char* what, QueueTask queue, void* args) {
  // A target reports UNIT ATTENTION once per event (power on, reset, LUN
  // change) per I_T nexus; a few retries always get past it.
  constexpr int kUnitAttentionRetries = 5;
  for (int attempt = 0;; ++attempt) {
    BLOCKCSI_RETURN_IF_ERROR(EnsureConnectedLocked());
    Completion c;
    scsi_task* task = queue(ctx_, args, OnComplete, &c);
    if (task == nullptr) {
      Status st = Unavailable(std::string(what) + " on " + target_iqn_ + ": cannot queue: " + IscsiError(ctx_));
      DropContextLocked();
      return st;
    }
    Status waited = Await(ctx_, c.done, std::chrono::steady_clock::now() + options_.command_timeout,
                          std::string(what) + " on " + target_iqn_ + " lun " + std::to_string(lun_));
    if (!waited.ok()) {
      // The session is in an unknown state: start over on the next command.
      DropContextLocked();
      scsi_free_scsi_task(task);
      LogWarn("iSCSI command failed; the session will be re-established",
              {{"target", target_iqn_}, {"error", waited.ToString()}});
      return Unavailable(waited.message());
    }
    if (c.status == SCSI_STATUS_CHECK_CONDITION && task->sense.key == SCSI_SENSE_UNIT_ATTENTION &&
        attempt < kUnitAttentionRetries) {
      scsi_free_scsi_task(task);
      continue;
    }
    if (c.status != SCSI_STATUS_GOOD) {
      bool transport_error = c.status != SCSI_STATUS_CHECK_CONDITION && c.status != SCSI_STATUS_BUSY &&
                             c.status != SCSI_STATUS_RESERVATION_CONFLICT;
      Status st = TaskError(what, task);  // frees the task
      if (transport_error) DropContextLocked();
      return st;
    }
    return task;
  }
}

namespace {

struct InquiryArgs {
  int lun, page;
};
struct CapacityArgs {
  int lun;
};
struct ReadArgs {
  int lun;
  uint64_t lba;
  uint32_t bytes;
  int block_size;
  scsi_iovec* iov;
};
struct WriteArgs {
  int lun;
  uint64_t lba;
  uint32_t bytes;
  int block_size;
  unsigned char* data;
};

}  // namespace

StatusOr<std::string> LibIscsiSession::InquiryVpd(int page) {
  std::lock_guard<std::mutex> lock(mu_);
  InquiryArgs args{lun_, page};
  auto queue = [](iscsi_context* ctx, void* a, iscsi_command_cb cb, void* p) {
    auto* x = static_cast<InquiryArgs*>(a);
    return iscsi_inquiry_task(ctx, x->lun, 1, x->page, 255, cb, p);
  };
  BLOCKCSI_ASSIGN_OR_RETURN(scsi_task * task, RunLocked("INQUIRY VPD", queue, &args));
  std::string out(reinterpret_cast<const char*>(task->datain.data), static_cast<size_t>(task->datain.size));
  scsi_free_scsi_task(task);
  return out;
}

Status LibIscsiSession::RefreshCapacity() {
  std::lock_guard<std::mutex> lock(mu_);
  CapacityArgs args{lun_};
  auto queue = [](iscsi_context* ctx, void* a, iscsi_command_cb cb, void* p) {
    return iscsi_readcapacity16_task(ctx, static_cast<CapacityArgs*>(a)->lun, cb, p);
  };
  BLOCKCSI_ASSIGN_OR_RETURN(scsi_task * task, RunLocked("READ CAPACITY(16)", queue, &args));
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
  // Data-In lands straight in the caller's buffer: no per-command
  // allocation and copy inside libiscsi.
  scsi_iovec iov{buffer, size_t{blocks} * block_size_};
  ReadArgs args{lun_, lba, blocks * block_size_, static_cast<int>(block_size_), &iov};
  auto queue = [](iscsi_context* ctx, void* a, iscsi_command_cb cb, void* p) {
    auto* x = static_cast<ReadArgs*>(a);
    return iscsi_read16_iov_task(ctx, x->lun, x->lba, x->bytes, x->block_size, 0, 0, 0, 0, 0, cb, p, x->iov, 1);
  };
  BLOCKCSI_ASSIGN_OR_RETURN(scsi_task * task, RunLocked("READ(16)", queue, &args));
  bool short_read = task->residual_status == SCSI_RESIDUAL_UNDERFLOW && task->residual > 0;
  scsi_free_scsi_task(task);
  if (short_read) return Unavailable("short READ(16) from " + target_iqn_);
  return OkStatus();
}

Status LibIscsiSession::Write(uint64_t lba, uint32_t blocks, const void* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  WriteArgs args{lun_, lba, blocks * block_size_, static_cast<int>(block_size_),
                 static_cast<unsigned char*>(const_cast<void*>(buffer))};
  auto queue = [](iscsi_context* ctx, void* a, iscsi_command_cb cb, void* p) {
    auto* x = static_cast<WriteArgs*>(a);
    return iscsi_write16_task(ctx, x->lun, x->lba, x->data, x->bytes, x->block_size, 0, 0, 0, 0, 0, cb, p);
  };
  BLOCKCSI_ASSIGN_OR_RETURN(scsi_task * task, RunLocked("WRITE(16)", queue, &args));
  scsi_free_scsi_task(task);
  return OkStatus();
}

Status LibIscsiSession::SynchronizeCache() {
  std::lock_guard<std::mutex> lock(mu_);
  CapacityArgs args{lun_};
  auto queue = [](iscsi_context* ctx, void* a, iscsi_command_cb cb, void* p) {
    return iscsi_synchronizecache10_task(ctx, static_cast<CapacityArgs*>(a)->lun, 0, 0, 0, 0, cb, p);
  };
  BLOCKCSI_ASSIGN_OR_RETURN(scsi_task * task, RunLocked("SYNCHRONIZE CACHE", queue, &args));
  scsi_free_scsi_task(task);
  return OkStatus();
}

}  // namespace blockcsi
