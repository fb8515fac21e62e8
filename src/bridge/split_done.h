// SplitDone: one transport request carried out as several commands; the
// request's completion runs once, after the last of them, with the first
// error. Thread-safe: the parts may complete on any threads.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

#include "bridge/bridge_transport.h"
#include "common/mutex.h"

namespace blockcsi {

class SplitDone {
 public:
  SplitDone(size_t parts, BridgeTransport::Done done) : left_(parts), done_(std::move(done)) {}
  SplitDone(const SplitDone&) = delete;
  SplitDone& operator=(const SplitDone&) = delete;

  // A part's completion; the request's runs with the last call.
  void Finish(Status st) {
    Status result;
    {
      MutexLock lock(mu_);
      if (!st.ok() && first_error_.ok()) first_error_ = std::move(st);
      if (--left_ > 0) return;
      result = std::move(first_error_);
    }
    done_(std::move(result));
  }
  // A completion for one part, for the transport's async calls.
  static BridgeTransport::Done Part(const std::shared_ptr<SplitDone>& split) {
    return [split](Status st) { split->Finish(std::move(st)); };
  }

 private:
  Mutex mu_;
  size_t left_ GUARDED_BY(mu_);
  Status first_error_ GUARDED_BY(mu_);
  BridgeTransport::Done done_;
};

}  // namespace blockcsi
