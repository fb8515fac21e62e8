#include "common/inflight.h"

namespace blockcsi {

InFlightLease::~InFlightLease() {
  if (guard_ != nullptr) guard_->Release(key_);
}

StatusOr<InFlightLease> InFlightGuard::Acquire(std::string_view key, std::string_view operation) {
  MutexLock lock(mu_);
  if (!held_.emplace(key).second) {
    return Aborted("an operation on " + std::string(key) + " is already in progress; " + std::string(operation) +
                   " refused, retry later");
  }
  return InFlightLease(this, std::string(key));
}

bool InFlightGuard::IsHeld(std::string_view key) const {
  MutexLock lock(mu_);
  return held_.find(key) != held_.end();
}

void InFlightGuard::Release(const std::string& key) {
  MutexLock lock(mu_);
  held_.erase(key);
}

}  // namespace blockcsi
