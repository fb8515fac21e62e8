// Per-volume in-flight guard: at most one operation per key (volume or
// snapshot id) at a time; a second one is refused with ABORTED, as the CSI
// spec asks, instead of queueing behind the first. Thread-safe.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "common/status.h"

namespace blockcsi {

class InFlightGuard;

// Holds a key while alive. Move-only.
class InFlightLease {
 public:
  InFlightLease(InFlightLease&& other) noexcept : guard_(other.guard_), key_(std::move(other.key_)) {
    other.guard_ = nullptr;
  }
  InFlightLease& operator=(InFlightLease&&) = delete;
  InFlightLease(const InFlightLease&) = delete;
  InFlightLease& operator=(const InFlightLease&) = delete;
  ~InFlightLease();

  const std::string& key() const { return key_; }

 private:
  friend class InFlightGuard;
  InFlightLease(InFlightGuard* guard, std::string key) : guard_(guard), key_(std::move(key)) {}
  InFlightGuard* guard_;
  std::string key_;
};

class InFlightGuard {
 public:
  InFlightGuard() = default;
  InFlightGuard(const InFlightGuard&) = delete;
  InFlightGuard& operator=(const InFlightGuard&) = delete;

  // ABORTED naming `operation` and the key when the key is already held.
  StatusOr<InFlightLease> Acquire(std::string_view key, std::string_view operation);

  bool IsHeld(std::string_view key) const;

 private:
  friend class InFlightLease;
  void Release(const std::string& key);

  mutable Mutex mu_;
  std::set<std::string, std::less<>> held_ GUARDED_BY(mu_);
};

}  // namespace blockcsi
