// Where a CSI call's time goes, from the plugin's debug log (issue #18): the
// plugin logs each exec, mount, fsync, mountinfo read, tgtd request and
// bridge start as "span name=<what> ms=<elapsed>" (common/span.h) with the
// call's request id. Collects the spans logged during one step and prints
//   SPAN<TAB>step<TAB>span<TAB>ms per call<TAB>count per call
// lines that hack/bench.sh turns into a table and a chart. Not thread-safe.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace blockcsi::bench {

class SpanBreakdown {
 public:
  explicit SpanBreakdown(std::string log_path) : log_path_(std::move(log_path)) {}

  // Call before a step: spans logged from here on belong to it.
  void Mark() { offset_ = Size(); }

  // Adds the spans logged since Mark() (only those inside a call: they carry
  // a request id) and the step's wall time to `step`.
  void Collect(const std::string& step, double wall_ms) {
    std::ifstream in(log_path_);
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string line;
    Step& s = steps_[step];
    if (s.order < 0) s.order = static_cast<int>(steps_.size());
    s.wall_ms += wall_ms;
    ++s.calls;
    while (std::getline(in, line)) {
      auto at = line.find("] span name=");
      if (at == std::string::npos) continue;
      std::string name = Token(line, "name=");
      double ms = std::strtod(Token(line, "ms=").c_str(), nullptr);
      s.spans[name].ms += ms;
      ++s.spans[name].count;
    }
  }

  // Per step in the order first seen: each span's mean ms per call, then
  // "other" (the wall time no span covers: gRPC, locks, our own code).
  void Print() const {
    std::vector<std::pair<int, const std::string*>> order;
    for (const auto& [name, s] : steps_) order.emplace_back(s.order, &name);
    std::sort(order.begin(), order.end());
    std::printf("Per-step breakdown from the plugin's debug spans (mean per call)\n");
    for (const auto& [_, name] : order) {
      const Step& s = steps_.at(*name);
      double covered = 0;
      for (const auto& [span, total] : s.spans) {
        double ms = total.ms / s.calls;
        covered += ms;
        std::printf("  %-28s %-18s %8.2f ms  x%.1f\n", name->c_str(), span.c_str(), ms,
                    static_cast<double>(total.count) / s.calls);
        std::printf("SPAN\t%s\t%s\t%.3f\t%.1f\n", name->c_str(), span.c_str(), ms,
                    static_cast<double>(total.count) / s.calls);
      }
      double other = s.wall_ms / s.calls - covered;
      std::printf("  %-28s %-18s %8.2f ms\n", name->c_str(), "other", other);
      std::printf("SPAN\t%s\tother\t%.3f\t-\n", name->c_str(), other);
    }
    std::fflush(stdout);
  }

 private:
  struct Total {
    double ms = 0;
    int count = 0;
  };
  struct Step {
    int order = -1;
    int calls = 0;
    double wall_ms = 0;
    std::map<std::string, Total> spans;
  };

  size_t Size() const {
    std::ifstream in(log_path_, std::ios::ate | std::ios::binary);
    return in ? static_cast<size_t>(in.tellg()) : 0;
  }
  static std::string Token(const std::string& line, const std::string& key) {
    auto at = line.find(" " + key);
    if (at == std::string::npos) return "";
    at += key.size() + 1;
    return line.substr(at, line.find(' ', at) - at);
  }

  std::string log_path_;
  size_t offset_ = 0;
  std::map<std::string, Step> steps_;
};

}  // namespace blockcsi::bench
