#include "backend/local/tgtd_socket_control.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/span.h"
#include "common/unique_fd.h"

namespace blockcsi {
namespace {

// tgt 1.0.x usr/tgtadm.h; the same layout tgtadm of Debian's tgt 1.0.85
// sends (checked against it by tgtd_socket_test, which runs both).
struct WireRequest {
  int32_t mode = -1;
  int32_t op = -1;
  char lld[64] = "iscsi";
  uint32_t len = 0;
  int32_t tid = -1;
  uint64_t sid = 0;
  uint64_t lun = std::numeric_limits<uint64_t>::max();
  uint32_t cid = 0;
  uint32_t host_no = 0;
  uint32_t device_type = 0;  // TYPE_DISK
  uint32_t ac_dir = 0;       // 0 incoming, 1 outgoing
  uint32_t pack = 0;
  uint32_t force = 0;
};
static_assert(sizeof(WireRequest) == 120, "struct tgtadm_req of tgt 1.0.x is 120 bytes");

struct WireResponse {
  uint32_t err = 0;
  uint32_t len = 0;
};

// A show of thousands of targets is a few MB; anything far past that is
// not tgtd talking.
constexpr uint32_t kMaxReply = 256u << 20;

WireRequest ToWire(const TgtdRequest& r) {
  WireRequest w;
  w.mode = static_cast<int32_t>(r.mode);
  w.op = static_cast<int32_t>(r.op);
  if (r.tid) w.tid = *r.tid;
  if (r.sid) w.sid = *r.sid;
  if (r.lun) w.lun = *r.lun;
  if (r.cid) w.cid = *r.cid;
  w.ac_dir = r.outgoing ? 1 : 0;
  w.force = r.force ? 1 : 0;
  return w;
}

Status SendAll(int fd, const char* data, size_t size, const std::string& where) {
  while (size > 0) {
    ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return DeadlineExceeded("send to " + where + " timed out");
    if (n <= 0) return ErrnoToStatus(errno, "send to " + where);
    data += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

Status RecvAll(int fd, char* data, size_t size, const std::string& where) {
  while (size > 0) {
    ssize_t n = ::recv(fd, data, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return DeadlineExceeded(where + " did not answer in time");
    if (n < 0) return ErrnoToStatus(errno, "receive from " + where);
    if (n == 0) return Unavailable(where + " closed the connection mid-answer");
    data += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

}  // namespace

StatusOr<TgtdAnswer> TgtdSocketControl::Send(const TgtdRequest& request) {
  BLOCKCSI_RETURN_IF_ERROR(CheckTgtdRequest(request));
  WireRequest wire = ToWire(request);
  // The request's mode and op in the detail ("1/2": target show), so that a
  // debug log tells a slow delete from a slow listing.
  Span span("tgtd_socket", std::to_string(wire.mode) + "/" + std::to_string(wire.op));
  std::string body = TgtdParameters(request);
  if (!body.empty()) body.push_back('\0');  // tgtadm sends the trailing NUL
  wire.len = static_cast<uint32_t>(sizeof(WireRequest) + body.size());

  const std::string path = socket_dir_ + "/socket." + std::to_string(control_port_);
  const std::string where = "tgtd on control port " + std::to_string(control_port_);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return InvalidArgument("tgtd socket path " + path + " is too long");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoToStatus(errno, "socket for " + where);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout_.count() % 1000) * 1000);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return Unavailable(where + " does not answer: connect " + path + ": " + std::strerror(errno));
  }
  BLOCKCSI_RETURN_IF_ERROR(SendAll(fd.get(), reinterpret_cast<const char*>(&wire), sizeof wire, where));
  BLOCKCSI_RETURN_IF_ERROR(SendAll(fd.get(), body.data(), body.size(), where));

  WireResponse response;
  BLOCKCSI_RETURN_IF_ERROR(RecvAll(fd.get(), reinterpret_cast<char*>(&response), sizeof response, where));
  TgtdAnswer answer;
  answer.error = static_cast<TgtdError>(response.err);
  // tgtd sends nothing after an error number (tgtadm reads no text then).
  if (!answer.ok()) return answer;
  if (response.len < sizeof response || response.len > kMaxReply) {
    return Internal(where + " sent a reply of " + std::to_string(response.len) + " bytes");
  }
  answer.text.assign(response.len - sizeof response, '\0');
  BLOCKCSI_RETURN_IF_ERROR(RecvAll(fd.get(), answer.text.data(), answer.text.size(), where));
  while (!answer.text.empty() && answer.text.back() == '\0') answer.text.pop_back();
  return answer;
}

}  // namespace blockcsi
