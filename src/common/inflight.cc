#include "common/inflight.h"

namespace blockcsi {

InFlightLease::~InFlightLease() {
  if (guard_ != nullptr) guard_->Release(key_);
}

StatusOr<InFlightLease> InFlightGuard::Acquire(std::string_view key, std::string_view operation) {
  std::lock_guard lock(mu_);
  if (!held_.emplace(key).second) {
    return Aborted("an operation on " + std::string(key) + " is already in progress; " + std::string(operation) +
                   " refused, retry later");
  }
  return InFlightLease(this, std::string(key));
}

bool InFlightGuard::IsHeld(std::string_view key) const {
  std::lock_guard lock(mu_);
  return held_.find(key) != held_.end();
}

void InFlightGuard::Release(const std::string& key) {
  std::lock_guard lock(mu_);
  held_.erase(key);
}

}  // namespace blockcsi
