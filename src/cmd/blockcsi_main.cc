// blockcsi: the CSI plugin. Parses flags, wires the services for the chosen
// mode and serves them until told to stop.
#include <unistd.h>

#include <iostream>
#include <memory>

#include "cmd/grpc_server.h"
#include "cmd/identity_service.h"
#include "cmd/plugin_flags.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/version.h"

namespace blockcsi {
namespace {

// The node keeps its attach records under the state dir: if it cannot
// write there, it cannot stage anything safely.
Status StateDirWritable(const std::string& state_dir) {
  BLOCKCSI_RETURN_IF_ERROR(MakeDirectories(state_dir, 0700));
  std::string probe = state_dir + "/.probe";
  BLOCKCSI_RETURN_IF_ERROR(WriteFileAtomically(probe, "ok\n"));
  return RemoveFileDurably(probe);
}

int Main(int argc, char** argv) {
  // ---- subcommand dispatch (e.g. `blockcsi bridge ...`, the per-volume
  // userspace bridge process; attach layer owner) ----
  // ---- end subcommand dispatch ----
  BlockTerminationSignals();
  PluginConfig config;
  if (int exit_code = ParsePluginFlags(argc, argv, config); exit_code >= 0) return exit_code;
  InitLogging("blockcsi", *ParseLogFormat(config.log_format), *ParseLogLevel(config.log_level));
  if (Status st = ValidatePluginConfig(config); !st.ok()) {
    std::cerr << "blockcsi: " << st.message() << "\n";
    return 2;
  }
  LogInfo("starting", {{"version", BuildVersion()},
                       {"commit", BuildCommit()},
                       {"mode", ModeName(config.mode)},
                       {"driver", config.driver_name},
                       {"node_id", config.node_id},
                       {"connector", config.connector}});

  std::vector<ReadinessCheck> checks;
  if (config.runs_node()) {
    checks.push_back({"state-dir", [dir = config.state_dir] { return StateDirWritable(dir); }});
  }
  IdentityService identity(config.driver_name, config.runs_controller(), std::move(checks));
  std::vector<grpc::Service*> services{&identity};

  // ---- controller wiring (controller service owner): build the backend from
  // config, add a readiness check and the Controller service to `services` ----
  // ---- end controller wiring ----

  // ---- node wiring (node service owner): build the attacher from config and
  // add the Node service to `services` ----
  // ---- end node wiring ----

  if (Status st = ServeUntilSignal(config.endpoint, services, config.shutdown_grace); !st.ok()) {
    LogError("cannot serve", {{"error", st.ToString()}});
    std::cerr << "blockcsi: " << st.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace blockcsi

int main(int argc, char** argv) { return blockcsi::Main(argc, argv); }
