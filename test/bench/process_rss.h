// The memory of benchmarked processes, from /proc: VmRSS (status) and the
// smaps_rollup figures, for lifecycle_bench, memory_bench and
// bridge_memory_bench. Reads only; thread-safe.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "support/test_util.h"

namespace blockcsi::bench {

// The "Name:   123 kB" fields of a /proc file (status, smaps_rollup) in MiB,
// by name; empty when the process is gone.
inline std::map<std::string, double> ProcMibFields(pid_t pid, const std::string& file) {
  std::map<std::string, double> fields;
  std::istringstream lines(testing::ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/" + file));
  for (std::string line; std::getline(lines, line);) {
    size_t colon = line.find(':');
    if (colon == std::string::npos || !line.ends_with(" kB")) continue;
    fields[line.substr(0, colon)] = std::strtod(line.c_str() + colon + 1, nullptr) / 1024.0;
  }
  return fields;
}

struct ProcessMemory {
  double rss = 0, pss = 0, priv = 0;  // MiB; priv = Private_Clean + Private_Dirty
};

// RSS from status (what `ps` shows), PSS and private pages from smaps_rollup.
inline ProcessMemory MeasureProcessMemory(pid_t pid) {
  auto rollup = ProcMibFields(pid, "smaps_rollup");
  return {ProcMibFields(pid, "status")["VmRSS"], rollup["Pss"], rollup["Private_Clean"] + rollup["Private_Dirty"]};
}

// Resident set of a process in MiB (VmRSS), 0 when it is gone.
inline double RssMib(pid_t pid) { return ProcMibFields(pid, "status")["VmRSS"]; }

// Summed RSS of the processes other than `except` whose command line names
// a path under `dir`: the plugin's bridges.
inline double BridgesRssMib(const std::string& dir, pid_t except, int* count) {
  double total = 0;
  *count = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::string name = entry.path().filename();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == except || pid == ::getpid()) continue;
    std::string cmdline = testing::ReadFileOrEmpty(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(dir + "/") == std::string::npos) continue;
    total += RssMib(pid);
    ++*count;
  }
  return total;
}

}  // namespace blockcsi::bench
