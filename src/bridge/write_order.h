// WriteOrder: what lets the bridge answer a flush or fsync only after every
// write submitted before it completed on the storage, while later writes
// keep flowing. Each write takes a ticket when it is submitted and returns
// it when it completed (either way); AfterPriorWrites runs its action once
// every ticket taken before the call was returned. Thread-safe; actions run
// on the thread that returned the last such ticket, or on the caller's when
// nothing was outstanding, never under the internal lock.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace blockcsi {

class WriteOrder {
 public:
  uint64_t Begin() {
    MutexLock lock(mu_);
    uint64_t ticket = ++last_;
    outstanding_.insert(ticket);
    return ticket;
  }

  void End(uint64_t ticket) {
    std::vector<std::function<void()>> ready;
    {
      MutexLock lock(mu_);
      outstanding_.erase(ticket);
      uint64_t oldest = outstanding_.empty() ? last_ + 1 : *outstanding_.begin();
      for (auto it = waiters_.begin(); it != waiters_.end();) {
        if (it->first < oldest) {
          ready.push_back(std::move(it->second));
          it = waiters_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& action : ready) action();
  }

  void AfterPriorWrites(std::function<void()> action) {
    {
      MutexLock lock(mu_);
      if (!outstanding_.empty()) {
        waiters_.emplace_back(last_, std::move(action));
        return;
      }
    }
    action();
  }

  size_t outstanding() const {
    MutexLock lock(mu_);
    return outstanding_.size();
  }

 private:
  mutable Mutex mu_;
  uint64_t last_ GUARDED_BY(mu_) = 0;               // the latest ticket handed out
  std::set<uint64_t> outstanding_ GUARDED_BY(mu_);  // tickets not yet returned
  // (the latest ticket at the call, action): runs once no ticket <= it is out.
  std::vector<std::pair<uint64_t, std::function<void()>>> waiters_ GUARDED_BY(mu_);
};

}  // namespace blockcsi
