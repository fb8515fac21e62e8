// The one place `blockcsi`'s flags are declared and checked.
#pragma once

#include "cmd/plugin_config.h"
#include "common/status.h"

namespace CLI {
class App;
}

namespace blockcsi {

// Declares every flag on `app`, writing into `config` when parsed.
void RegisterPluginFlags(CLI::App& app, PluginConfig& config, std::string& mode_text, std::string& shutdown_grace_text,
                         std::string& reconcile_interval_text);

// Parses argv. Returns the exit code to use when the process should stop
// right away (help, version, usage error), or -1 to go on.
int ParsePluginFlags(int argc, char** argv, PluginConfig& config);

// Cross-flag rules, after parsing (e.g. node mode needs --node-id).
Status ValidatePluginConfig(const PluginConfig& config);

}  // namespace blockcsi
