// KeyedLock: the one waiting lock per key (a volume, an image, a node, an
// iSCSI path). Callers of one key run one at a time; other keys go on. The
// sibling of InFlightGuard (common/inflight.h), which refuses a second caller
// with ABORTED where the CSI spec asks for that; this one makes it wait, for
// the steps below the CSI boundary that must not interleave. An entry exists
// only while its key is held or waited for. Not reentrant: a thread that
// locks a key it holds deadlocks. Thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "common/mutex.h"

namespace blockcsi {

class KeyedLock {
 public:
  // Holds one key while alive; an empty (default or moved-from) guard holds
  // nothing. Move-only.
  class Guard {
   public:
    Guard() = default;
    Guard(Guard&& other) noexcept;
    Guard& operator=(Guard&& other) noexcept;
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard();

    bool holds() const { return owner_ != nullptr; }

   private:
    friend class KeyedLock;
    Guard(KeyedLock* owner, std::string key) : owner_(owner), key_(std::move(key)) {}
    void Release();
    KeyedLock* owner_ = nullptr;
    std::string key_;
  };

  KeyedLock() = default;
  KeyedLock(const KeyedLock&) = delete;
  KeyedLock& operator=(const KeyedLock&) = delete;

  // Waits until no other guard holds `key`, then holds it.
  [[nodiscard]] Guard Lock(std::string_view key);

  // Keys held or waited for now (tests: entries do not pile up).
  size_t KeysInUse() const;

 private:
  struct Entry {
    bool held = false;
    int waiters = 0;
  };
  void Release(const std::string& key) EXCLUDES(mu_);

  mutable Mutex mu_;
  CondVar released_;
  // std::map keeps references to entries stable while others are added.
  std::map<std::string, Entry, std::less<>> entries_ GUARDED_BY(mu_);
};

}  // namespace blockcsi
