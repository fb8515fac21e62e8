#include "bridge/libiscsi_login.h"

// libiscsi's headers are C and need these before them.
#include <stdint.h>
#include <sys/types.h>

extern "C" {
#include <iscsi/iscsi.h>
}

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace blockcsi {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

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

struct LoginDone {
  bool done = false;
  int status = 0;
};

void OnLoginDone(iscsi_context*, int status, void*, void* private_data) {
  auto* c = static_cast<LoginDone*>(private_data);
  c->done = true;
  c->status = status;
}

// The login's own wait: libiscsi's *_sync calls have no overall bound, so
// poll the context's socket until the callback ran or the deadline.
Status AwaitLogin(iscsi_context* ctx, const LoginDone& c, Clock::time_point deadline) {
  while (!c.done) {
    auto now = Clock::now();
    if (now >= deadline) return DeadlineExceeded("login did not complete within the command timeout");
    auto left = std::chrono::duration_cast<milliseconds>(deadline - now);
    // Wake at least every 250 ms: libiscsi drives its timeouts and
    // reconnects only from iscsi_service.
    int wait_ms = static_cast<int>(std::min<milliseconds>(left, milliseconds(250)).count()) + 1;
    pollfd pfd{iscsi_get_fd(ctx), static_cast<short>(iscsi_which_events(ctx)), 0};
    int ready = 0;
    if (pfd.events == 0) {
      // libiscsi asks for a pause (a failed TCP connect); it says >= 100 ms.
      ::usleep(static_cast<useconds_t>(std::min(wait_ms, 100) * 1000));
    } else {
      ready = ::poll(&pfd, 1, wait_ms);
    }
    if (ready < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "login: poll");
    }
    if (iscsi_service(ctx, ready > 0 ? pfd.revents : 0) < 0) return Unavailable("login: " + IscsiError(ctx));
  }
  return OkStatus();
}

}  // namespace

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

// One login within the command timeout; the context is ready for commands
// on success and destroyed on failure (error text in *error).
iscsi_context* LoginToPortal(const LibIscsiOptions& o, const std::string& portal, std::string* error) {
  iscsi_context* ctx = NewContext(o);
  if (ctx == nullptr) {
    *error = "libiscsi: cannot create a context";
    return nullptr;
  }
  LoginDone c;
  Status st = OkStatus();
  if (iscsi_full_connect_async(ctx, portal.c_str(), o.lun, OnLoginDone, &c) != 0) {
    st = Unavailable(IscsiError(ctx));
  } else {
    st = AwaitLogin(ctx, c, Clock::now() + o.command_timeout);
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

Status LoginFailure(const LibIscsiOptions& o, const std::vector<std::string>& failures, StatusCode worst) {
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

}  // namespace blockcsi
