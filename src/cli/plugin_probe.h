// Asks the plugin over its CSI socket whether it is there: GetPluginInfo,
// then Probe, both within one 2 s deadline. For `status` and for cleanup's
// "is a stage in flight?" guard. Thread-compatible.
#pragma once

#include <map>
#include <string>

namespace blockcsi::cli {

struct PluginState {
  bool reachable = false;
  std::string name;
  std::string version;
  std::string ready;  // Probe's answer: "true", "false" or "" when not said
  std::map<std::string, std::string> manifest;
  std::string error;  // why it is unreachable
};

PluginState AskPlugin(const std::string& endpoint);

}  // namespace blockcsi::cli
