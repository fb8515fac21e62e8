// Mutex, MutexLock and CondVar: std::mutex, its scoped lock and its
// condition variable with clang's thread-safety attributes, so that what a
// mutex guards is declared (`int n_ GUARDED_BY(mu_);`) and checked by the
// compiler (-Wthread-safety, run over src/ by hack/verify.sh) instead of being
// a comment nobody checks. libstdc++'s own std::mutex carries no attributes,
// hence the wrappers. Under gcc the attributes expand to nothing and the
// wrappers compile to the std types they hold. Same thread-safety as std.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define BLOCKCSI_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define BLOCKCSI_THREAD_ANNOTATION(x)
#endif

// The names abseil and the clang documentation use, so that they read as
// everyone knows them. abseil's internal thread_annotations.h (which gRPC's
// headers include) defines five of them to the same attributes; it comes
// first here, so that those five have one definition in every file, whatever
// order the file includes gRPC and this header in.
#if __has_include(<absl/base/internal/thread_annotations.h>)
#include <absl/base/internal/thread_annotations.h>
#endif
#define CAPABILITY(x) BLOCKCSI_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY BLOCKCSI_THREAD_ANNOTATION(scoped_lockable)
#ifndef GUARDED_BY
#define GUARDED_BY(x) BLOCKCSI_THREAD_ANNOTATION(guarded_by(x))
#endif
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) BLOCKCSI_THREAD_ANNOTATION(pt_guarded_by(x))
#endif
#ifndef ACQUIRED_BEFORE
#define ACQUIRED_BEFORE(...) BLOCKCSI_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#endif
#ifndef ACQUIRED_AFTER
#define ACQUIRED_AFTER(...) BLOCKCSI_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#endif
#define REQUIRES(...) BLOCKCSI_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) BLOCKCSI_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) BLOCKCSI_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) BLOCKCSI_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) BLOCKCSI_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) BLOCKCSI_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) BLOCKCSI_THREAD_ANNOTATION(lock_returned(x))
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS BLOCKCSI_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif

namespace blockcsi {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// A condition variable used with one Mutex that the caller holds. Wait
// releases it while blocked and holds it again on return, as std does; the
// analysis sees it held throughout, which is what the caller's code relies on.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex& mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Waits until signalled or `deadline`; false when the deadline passed.
  // Callers loop on their own condition, written where the analysis can see
  // that `mu` is held (a predicate lambda would be checked on its own).
  bool WaitUntil(Mutex& mu, std::chrono::steady_clock::time_point deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool signalled = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return signalled;
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace blockcsi
