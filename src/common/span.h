// A timed step inside a call (an exec, a mount, an fsync, a mountinfo read,
// a wait), logged at debug level when it ends as
//   span name=<what> ms=<elapsed> <fields...> request_id=<call>
// so that a debug log shows where a CSI call's time goes
// (test/bench/lifecycle_bench.cc sums them per step). With debug logging off
// a span reads no clock and logs nothing. Not shared between threads.
#pragma once

#include <chrono>
#include <string>

#include "common/logging.h"

namespace blockcsi {

class Span {
 public:
  // `name` is a short constant ("exec", "fsync", "mount"...); `detail`
  // tells instances apart (the program, the path) and never holds a secret.
  explicit Span(std::string_view name, std::string detail = "");
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  bool enabled_;
  std::string_view name_;
  std::string detail_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace blockcsi
