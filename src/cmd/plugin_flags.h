// The one place `blockcsi`'s flags are declared and checked.
#pragma once

#include <string>

#include "cmd/plugin_config.h"
#include "common/status.h"

namespace CLI {
class App;
}

namespace blockcsi {

// Flags parsed as text first and converted after (durations, the mode).
struct PluginFlagTexts {
  std::string mode;
  std::string shutdown_grace;
  std::string reconcile_interval;
  std::string bridge_io_timeout;
  std::string rbd_timeout;
  std::string fence_dead_nodes_after;
  std::string fence_check_interval;
  std::string fstrim_interval;
};

// Declares every flag on `app`, writing into `config` (and `texts`) when parsed.
void RegisterPluginFlags(CLI::App& app, PluginConfig& config, PluginFlagTexts& texts);

// Parses argv. Returns the exit code to use when the process should stop
// right away (help, version, usage error), or -1 to go on.
int ParsePluginFlags(int argc, char** argv, PluginConfig& config);

// Cross-flag rules, after parsing (e.g. node mode needs --node-id).
Status ValidatePluginConfig(const PluginConfig& config);

}  // namespace blockcsi
