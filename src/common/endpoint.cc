#include "common/endpoint.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/atomic_file.h"

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

Status PrepareUnixSocket(const std::string& socket_path) {
  std::string dir = std::filesystem::path(socket_path).parent_path().string();
  if (!dir.empty()) BLOCKCSI_RETURN_IF_ERROR(MakeDirectories(dir, 0755));
  struct stat st {};
  if (::lstat(socket_path.c_str(), &st) != 0) {
    if (errno == ENOENT) return OkStatus();
    return ErrnoToStatus(errno, "stat " + socket_path);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return FailedPrecondition(socket_path + " exists and is not a socket; refusing to replace it");
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  ::close(fd);
  if (rc == 0) {
    return FailedPrecondition("a server is already listening on " + socket_path +
                              "; refusing to start a second one on the same endpoint");
  }
  if (err != ECONNREFUSED && err != ENOENT) return ErrnoToStatus(err, "probe " + socket_path);
  if (::unlink(socket_path.c_str()) != 0 && errno != ENOENT) return ErrnoToStatus(errno, "remove stale " + socket_path);
  return OkStatus();
}

}  // namespace blockcsi
