// KeyedMutex, the per-volume lock of LocalBackend, shared by the
// local_backend*.cc files. Not an interface.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace blockcsi {

// Per-key blocking locks, created on demand and dropped when unused.
class KeyedMutex {
 public:
  class Lock {
   public:
    Lock(KeyedMutex* owner, std::string key) : owner_(owner), key_(std::move(key)) { owner_->Acquire(key_); }
    ~Lock() { owner_->Release(key_); }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    KeyedMutex* owner_;
    std::string key_;
  };

 private:
  struct Entry {
    bool held = false;
    int waiters = 0;
  };
  void Acquire(const std::string& key) {
    std::unique_lock lock(mu_);
    Entry& e = entries_[key];
    ++e.waiters;
    cv_.wait(lock, [&] { return !e.held; });
    --e.waiters;
    e.held = true;
  }
  void Release(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = entries_.find(key);
    it->second.held = false;
    if (it->second.waiters == 0) entries_.erase(it);
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry> entries_;  // guarded by mu_; std::map keeps references stable
};

}  // namespace blockcsi
