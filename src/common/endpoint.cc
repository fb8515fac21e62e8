#include "common/endpoint.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace blockcsi {

StatusOr<std::string> ParseUnixEndpoint(std::string_view endpoint) {
  std::string_view rest;
  if (endpoint.starts_with("unix://")) {
    rest = endpoint.substr(7);
  } else if (endpoint.starts_with("unix:")) {
    rest = endpoint.substr(5);
  } else {
    return InvalidArgument("endpoint \"" + std::string(endpoint) + "\" must be unix:///absolute/path.sock");
  }
  if (rest.empty() || rest.front() != '/') {
    return InvalidArgument("endpoint \"" + std::string(endpoint) + "\" must name an absolute socket path");
  }
  if (rest.size() >= sizeof(sockaddr_un::sun_path)) {
    return InvalidArgument("endpoint path \"" + std::string(rest) + "\" is too long for a unix socket");
  }
  return std::string(rest);
}

Status PrepareUnixSocket(const Host& host, const std::string& socket_path) {
  size_t slash = socket_path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    BLOCKCSI_RETURN_IF_ERROR(host.MakeDirectory(socket_path.substr(0, slash), 0755));
  }
  PathKind kind = host.Kind(socket_path);
  if (kind == PathKind::kMissing) return OkStatus();
  if (kind != PathKind::kSocket) {
    return FailedPrecondition(socket_path + " exists and is not a socket; refusing to replace it");
  }
  // A socket file outlives its server: only one that nobody answers on is
  // stale. The probe is a connect, not a file operation, so it dials the
  // path the seam maps to.
  const std::string real = host.Resolve(socket_path);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, real.c_str(), sizeof addr.sun_path - 1);
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  ::close(fd);
  if (rc == 0) {
    return FailedPrecondition("a server is already listening on " + socket_path +
                              "; refusing to start a second one on the same endpoint");
  }
  if (err != ECONNREFUSED && err != ENOENT) return ErrnoToStatus(err, "probe " + socket_path);
  if (Status st = host.RemovePath(socket_path); !st.ok()) {
    return Status(st.code(), "remove stale " + socket_path + ": " + st.message());
  }
  return OkStatus();
}

}  // namespace blockcsi
