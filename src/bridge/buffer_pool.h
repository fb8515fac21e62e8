// BufferPool: the bridge's request buffers. Small ones come from malloc
// (glibc serves them from its heap, cheaply); large ones (from kLargeFrom up
// to the largest FUSE request) are kept for reuse, because the bridge caps
// glibc's mmap threshold for its memory budget and a fresh 512 KiB buffer
// then costs an mmap, a page fault per page (zeroed by the kernel) and an
// munmap: measured at ~290 µs per 512 KiB on the bench machine, half the
// target's own time for a 1 MiB read. At most `keep` large buffers are
// kept; Trim (when the volume is idle) returns them, so an idle bridge
// keeps none resident. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <vector>

#include "common/mutex.h"

namespace blockcsi {

class BufferPool {
 public:
  static constexpr size_t kLargeFrom = size_t{64} * 1024;

  BufferPool(size_t largest, size_t keep) : largest_(largest), keep_(keep) {}
  void set_keep(size_t keep) {
    MutexLock lock(mu_);
    keep_ = keep;
  }
  ~BufferPool() { Trim(); }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `size` bytes (size <= largest), or null.
  char* Take(size_t size) {
    if (size < kLargeFrom || size > largest_) return static_cast<char*>(std::malloc(size == 0 ? 1 : size));
    {
      MutexLock lock(mu_);
      if (!free_.empty()) {
        char* p = free_.back();
        free_.pop_back();
        return p;
      }
    }
    return static_cast<char*>(std::malloc(largest_));
  }

  // Back from Take(size), with the same size.
  void Give(char* p, size_t size) {
    if (p == nullptr) return;
    if (size >= kLargeFrom && size <= largest_) {
      MutexLock lock(mu_);
      if (free_.size() < keep_) {
        free_.push_back(p);
        return;
      }
    }
    std::free(p);
  }

  void Trim() {
    std::vector<char*> drop;
    {
      MutexLock lock(mu_);
      drop.swap(free_);
    }
    for (char* p : drop) std::free(p);
  }

  size_t kept() const {
    MutexLock lock(mu_);
    return free_.size();
  }

 private:
  const size_t largest_;
  mutable Mutex mu_;
  size_t keep_ GUARDED_BY(mu_);
  std::vector<char*> free_ GUARDED_BY(mu_);
};

}  // namespace blockcsi
