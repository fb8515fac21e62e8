// ProcessExitWatch: waits for another process to end as an event, not by
// polling /proc: it owns the fd Host::WatchExit gives (a pidfd on the real
// host), which becomes readable when the process exits, whoever its parent
// is. Not thread-safe: one owner; movable.
#pragma once

#include <sys/types.h>

#include <chrono>

#include "common/host.h"

namespace blockcsi {

class ProcessExitWatch {
 public:
  ProcessExitWatch() = default;
  // Holds `pid` from now on; empty when it is gone already or the kernel
  // has no pidfds (callers then fall back to looking for the process).
  static ProcessExitWatch Open(const Host& host, pid_t pid);
  ~ProcessExitWatch();
  ProcessExitWatch(ProcessExitWatch&& other) noexcept;
  ProcessExitWatch& operator=(ProcessExitWatch&& other) noexcept;
  ProcessExitWatch(const ProcessExitWatch&) = delete;
  ProcessExitWatch& operator=(const ProcessExitWatch&) = delete;

  bool held() const { return fd_ >= 0; }
  pid_t pid() const { return pid_; }
  // True once the held process has exited; false at the timeout (or when
  // nothing is held).
  bool WaitForExit(std::chrono::milliseconds timeout) const;

 private:
  int fd_ = -1;
  pid_t pid_ = 0;
};

}  // namespace blockcsi
