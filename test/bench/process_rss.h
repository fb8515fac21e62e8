// The resident memory of the plugin and of its bridges, from /proc, for the
// lifecycle bench's storm figures. Reads only; thread-safe.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include "support/test_util.h"

namespace blockcsi::bench {

// Resident set of a process in MiB (VmRSS), 0 when it is gone.
inline double RssMib(pid_t pid) {
  std::istringstream status(testing::ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  }
  return 0;
}

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
