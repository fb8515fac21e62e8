#include "node/fault_points.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/logging.h"

namespace blockcsi {

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

void FaultPoint(std::string_view name) {
  // Read once: the variable is set by the test that starts the process.
  static const std::string spec = [] {
    const char* v = std::getenv(kFaultPointEnv);
    return std::string(v == nullptr ? "" : v);
  }();
  if (spec.empty() || !FaultPointListed(spec, name)) return;
  LogError("fault point reached: killing the plugin", {{"fault_point", name}});
  ::raise(SIGKILL);
  ::_exit(137);  // not reached; SIGKILL cannot be caught
}

}  // namespace blockcsi
