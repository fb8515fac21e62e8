// A file descriptor closed when its owner goes out of scope, so that every
// early return of a function that opened it closes it exactly once.
#pragma once

#include <unistd.h>

namespace blockcsi {

class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  // Movable, so that a function can hand an open descriptor to its caller.
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  UniqueFd& operator=(UniqueFd&&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace blockcsi
