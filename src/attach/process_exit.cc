#include "attach/process_exit.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace blockcsi {

ProcessExitWatch ProcessExitWatch::Open(const Host& host, pid_t pid) {
  ProcessExitWatch watch;
  if (pid <= 0) return watch;
  auto fd = host.WatchExit(pid);
  if (!fd.ok()) return watch;
  watch.fd_ = *fd;
  watch.pid_ = pid;
  return watch;
}

ProcessExitWatch::~ProcessExitWatch() {
  if (fd_ >= 0) ::close(fd_);
}

ProcessExitWatch::ProcessExitWatch(ProcessExitWatch&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), pid_(std::exchange(other.pid_, 0)) {}

ProcessExitWatch& ProcessExitWatch::operator=(ProcessExitWatch&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    pid_ = std::exchange(other.pid_, 0);
  }
  return *this;
}

bool ProcessExitWatch::WaitForExit(std::chrono::milliseconds timeout) const {
  if (fd_ < 0) return false;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd pfd{fd_, POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (rc > 0) return true;
    if (rc == 0 || errno != EINTR) return false;
  }
}

}  // namespace blockcsi
