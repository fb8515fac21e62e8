#include "common/fault_points.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "common/logging.h"

namespace blockcsi {
namespace {

// The innermost FaultPointScope's role on this thread; empty for none.
thread_local std::string_view current_scope;

void PauseAt(const std::string& armed) {
  const char* dir = std::getenv(kFaultPauseDirEnv);
  if (dir == nullptr || *dir == '\0') return;
  const std::string marker = std::string(dir) + "/" + armed;
  { std::ofstream(marker) << ::getpid() << "\n"; }
  LogWarn("fault point reached: paused until the test removes the marker",
          {{"fault_point", armed}, {"marker", marker}});
  for (int i = 0; i < 1200 && ::access(marker.c_str(), F_OK) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

bool FaultPointListed(std::string_view spec, std::string_view name) {
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    if (!item.empty() && item == name) return true;
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
  return false;
}

std::string ScopedFaultPointName(std::string_view scope, std::string_view name) {
  size_t dot = name.find('.');
  if (scope.empty() || dot == std::string_view::npos) return std::string(name);
  return std::string(scope) + std::string(name.substr(dot));
}

std::string ArmedFaultPointName(std::string_view name) { return ScopedFaultPointName(current_scope, name); }

FaultPointScope::FaultPointScope(std::string_view role) : previous_(current_scope) { current_scope = role; }

FaultPointScope::~FaultPointScope() { current_scope = previous_; }

void FaultPoint(std::string_view name) {
  // Read once: the variables are set by the test that starts the process.
  static const std::string spec = [] {
    const char* v = std::getenv(kFaultPointEnv);
    return std::string(v == nullptr ? "" : v);
  }();
  static const std::string pause = [] {
    const char* v = std::getenv(kFaultPauseEnv);
    return std::string(v == nullptr ? "" : v);
  }();
  if (spec.empty() && pause.empty()) return;
  std::string armed = ArmedFaultPointName(name);
  if (!pause.empty() && FaultPointListed(pause, armed)) PauseAt(armed);
  if (!FaultPointListed(spec, armed)) return;
  LogError("fault point reached: killing the process", {{"fault_point", armed}});
  ::raise(SIGKILL);
  ::_exit(137);  // not reached; SIGKILL cannot be caught
}

Status FaultStatus(std::string_view name) {
  FaultPoint(name);
  static const std::string fail = [] {
    const char* v = std::getenv(kFaultFailEnv);
    return std::string(v == nullptr ? "" : v);
  }();
  if (fail.empty()) return OkStatus();
  std::string armed = ArmedFaultPointName(name);
  if (!FaultPointListed(fail, armed)) return OkStatus();
  LogWarn("fault point reached: failing the call", {{"fault_point", armed}});
  return Internal("injected failure at " + armed);
}

}  // namespace blockcsi
