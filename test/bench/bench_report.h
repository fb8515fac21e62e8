// What the benchmark programs under test/bench share: timing, medians and
// one output format. Every figure is printed as a machine-readable line
//   RESULT<TAB>figure<TAB>measured<TAB>baseline<TAB>ratio
// (hack/bench.sh turns those into docs/performance.md) after a human line.
// Nothing here asserts: these are figures, not tests. Not thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace blockcsi::bench {

using Clock = std::chrono::steady_clock;

inline double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

inline double P90(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, v.size() * 9 / 10)];
}

inline std::string Format(double value, const char* unit) {
  char buf[64];
  if (value >= 100) {
    std::snprintf(buf, sizeof buf, "%.0f %s", value, unit);
  } else if (value >= 10) {
    std::snprintf(buf, sizeof buf, "%.1f %s", value, unit);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", value, unit);
  }
  return buf;
}

// One row: `measured` against `baseline` (same unit), ratio measured/baseline.
inline void Report(const std::string& figure, double measured, double baseline, const char* unit,
                   const std::string& baseline_label = "") {
  std::string base = Format(baseline, unit);
  if (!baseline_label.empty()) base += " (" + baseline_label + ")";
  double ratio = baseline > 0 ? measured / baseline : 0;
  std::printf("  %-58s %14s  vs %-34s ratio %.2f\n", figure.c_str(), Format(measured, unit).c_str(), base.c_str(),
              ratio);
  std::printf("RESULT\t%s\t%s\t%s\t%.2f\n", figure.c_str(), Format(measured, unit).c_str(), base.c_str(), ratio);
  std::fflush(stdout);
}

// The spread of a figure's samples, "min / median / max" (a median alone
// hides a side that is fast once and slow the rest).
inline std::string Spread(std::vector<double> v, const char* unit) {
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  return Format(v.front(), unit) + " / " + Format(Median(v), unit) + " / " + Format(v.back(), unit);
}

// A human line under a Report row: both sides' spreads over their rounds.
inline void ReportSpread(const std::vector<double>& measured, const std::vector<double>& baseline, const char* unit) {
  std::printf("  %-58s %s  vs %s  (min / median / max, %zu rounds each)\n", "", Spread(measured, unit).c_str(),
              Spread(baseline, unit).c_str(), measured.size());
  std::fflush(stdout);
}

// One row from both sides' samples (one per measured round, the warm-up
// already dropped): medians compared, and each side's min / median / max
// printed and carried into the RESULT line, so that the report's table shows
// the spread next to the figure.
inline void ReportSamples(const std::string& figure, const std::vector<double>& measured,
                          const std::vector<double>& baseline, const char* unit, const std::string& baseline_label) {
  double m = Median(measured), b = Median(baseline);
  double ratio = b > 0 ? m / b : 0;
  std::printf("  %-58s %14s  vs %-34s ratio %.2f\n", figure.c_str(), Format(m, unit).c_str(),
              (Format(b, unit) + " (" + baseline_label + ")").c_str(), ratio);
  ReportSpread(measured, baseline, unit);
  std::printf("RESULT\t%s\t%s\t%s\t%.2f\n", figure.c_str(), ("min/median/max " + Spread(measured, unit)).c_str(),
              ("min/median/max " + Spread(baseline, unit) + " (" + baseline_label + ")").c_str(), ratio);
  std::fflush(stdout);
}

// A figure that has no baseline of its own (a count, e.g. errors).
inline void ReportCount(const std::string& figure, long value) {
  std::printf("  %-58s %14ld\n", figure.c_str(), value);
  std::printf("RESULT\t%s\t%ld\t-\t-\n", figure.c_str(), value);
  std::fflush(stdout);
}

}  // namespace blockcsi::bench
