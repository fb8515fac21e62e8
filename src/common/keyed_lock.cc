#include "common/keyed_lock.h"

#include <utility>

namespace blockcsi {

KeyedLock::Guard::Guard(Guard&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), key_(std::move(other.key_)) {}

KeyedLock::Guard& KeyedLock::Guard::operator=(Guard&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = std::exchange(other.owner_, nullptr);
    key_ = std::move(other.key_);
  }
  return *this;
}

KeyedLock::Guard::~Guard() { Release(); }

void KeyedLock::Guard::Release() {
  if (owner_ != nullptr) std::exchange(owner_, nullptr)->Release(key_);
}

KeyedLock::Guard KeyedLock::Lock(std::string_view key) {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) it = entries_.emplace(std::string(key), Entry{}).first;
  Entry& entry = it->second;
  ++entry.waiters;
  while (entry.held) released_.Wait(mu_);
  --entry.waiters;
  entry.held = true;
  return Guard(this, it->first);
}

size_t KeyedLock::KeysInUse() const {
  MutexLock lock(mu_);
  return entries_.size();
}

void KeyedLock::Release(const std::string& key) {
  {
    MutexLock lock(mu_);
    auto it = entries_.find(key);
    it->second.held = false;
    if (it->second.waiters == 0) entries_.erase(it);
  }
  // Waiters of every key share the condition; each checks its own entry.
  released_.SignalAll();
}

}  // namespace blockcsi
