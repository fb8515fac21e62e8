// Clock: time for code that waits or stamps (device wait loops, reconcile
// timers, creation times). Tests use a fake that advances on Sleep.
// Implementations must be thread-safe.
#pragma once

#include <chrono>
#include <memory>

namespace blockcsi {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::chrono::steady_clock::time_point Now() const = 0;
  virtual std::chrono::system_clock::time_point WallNow() const = 0;
  virtual void Sleep(std::chrono::milliseconds duration) = 0;
};

std::shared_ptr<Clock> RealClock();

}  // namespace blockcsi
