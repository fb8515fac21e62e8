#include "bridge/bridge_protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/span.h"
#include "common/strings.h"

namespace blockcsi {

std::string BridgesDir(const std::string& state_dir) { return state_dir + "/bridges"; }

BridgePaths BridgePathsFor(const std::string& state_dir, const std::string& volume_id) {
  BridgePaths p;
  p.dir = BridgesDir(state_dir) + "/" + EscapeVolumeIdForFile(volume_id);
  p.control_socket = p.dir + "/ctl.sock";
  p.mountpoint = p.dir + "/fuse";
  p.lun_file = p.mountpoint + "/lun";
  return p;
}

UnixSocketAddress::UnixSocketAddress(const std::string& path) : storage_(sizeof(sockaddr_un), '\0') {
  auto* addr = reinterpret_cast<sockaddr_un*>(storage_.data());
  addr->sun_family = AF_UNIX;
  std::string name = path;
  if (path.size() >= sizeof addr->sun_path) {
    size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
    dir_fd_ = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd_ < 0) {
      status_ = ErrnoToStatus(errno, "open " + dir);
      return;
    }
    name = "/proc/self/fd/" + std::to_string(dir_fd_) + "/" + path.substr(slash + 1);
    if (name.size() >= sizeof addr->sun_path) {
      status_ = InvalidArgument("socket file name too long: " + path);
      return;
    }
  }
  std::memcpy(addr->sun_path, name.data(), name.size());
}

UnixSocketAddress::~UnixSocketAddress() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

const sockaddr* UnixSocketAddress::addr() const { return reinterpret_cast<const sockaddr*>(storage_.data()); }
unsigned UnixSocketAddress::length() const { return sizeof(sockaddr_un); }

StatusOr<nlohmann::json> CallBridge(const std::string& control_socket, const nlohmann::json& request,
                                    std::chrono::milliseconds timeout) {
  Span span("bridge_call", request.value("op", ""));
  UnixSocketAddress addr(control_socket);
  if (!addr.status().ok()) return Status(StatusCode::kUnavailable, addr.status().message());
  // Non-blocking throughout: a bridge whose threads are stuck stops
  // accepting, its listen backlog fills, and a blocking connect would then
  // wait forever (holding the caller's per-volume lock). One deadline covers
  // connect, send and the answer.
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket for " + control_socket);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto fail = [&](int err, const std::string& what) {
    ::close(fd);
    Status st = ErrnoToStatus(err, what + " " + control_socket);
    // Whatever went wrong, the caller's question is "is the bridge there?".
    return Status(StatusCode::kUnavailable, st.message());
  };
  auto timed_out = [&](const std::string& what) {
    ::close(fd);
    return DeadlineExceeded("bridge at " + control_socket + " " + what + " within " + std::to_string(timeout.count()) +
                            "ms (its I/O may be stuck)");
  };
  while (::connect(fd, addr.addr(), addr.length()) != 0) {
    if (errno == EINTR) continue;
    // A unix socket answers EAGAIN (not EINPROGRESS) when the backlog is full.
    if (errno != EAGAIN && errno != EINPROGRESS) return fail(errno, "connect");
    if (std::chrono::steady_clock::now() >= deadline) return timed_out("did not accept the connection");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string line = request.dump() + "\n";
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::send(fd, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return fail(errno, "send to");
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return timed_out("did not take the request");
      pollfd pfd{fd, POLLOUT, 0};
      (void)::poll(&pfd, 1, static_cast<int>(left.count()));
      continue;
    }
    off += static_cast<size_t>(n);
  }
  std::string reply;
  while (reply.find('\n') == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return timed_out("did not answer");
    pollfd pfd{fd, POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return fail(errno, "poll");
    if (rc == 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return fail(errno, "recv from");
    if (n == 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (reply.empty()) return Unavailable("bridge at " + control_socket + " closed the connection without answering");
  try {
    return nlohmann::json::parse(reply.substr(0, reply.find('\n')));
  } catch (const nlohmann::json::exception& e) {
    return Internal("bridge at " + control_socket + " sent a malformed reply: " + e.what());
  }
}

Status StatusFromReply(const nlohmann::json& reply) {
  if (reply.value("ok", false)) return OkStatus();
  int code = reply.value("code", static_cast<int>(StatusCode::kInternal));
  if (code <= 0 || code > 16) code = static_cast<int>(StatusCode::kInternal);
  return Status(static_cast<StatusCode>(code), reply.value("message", std::string("bridge reported an error")));
}

nlohmann::json ReplyFromStatus(const Status& status) {
  nlohmann::json j;
  j["ok"] = status.ok();
  if (!status.ok()) {
    j["code"] = static_cast<int>(status.code());
    j["message"] = status.message();
  }
  return j;
}

}  // namespace blockcsi
