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

  // Services and readiness checks are gathered per mode; Identity is built
  // last so that Probe sees every check.
  std::vector<ReadinessCheck> checks;
  std::vector<std::shared_ptr<grpc::Service>> owned_services;
  if (config.runs_node()) {
    checks.push_back({"state-dir", [dir = config.state_dir] { return StateDirWritable(dir); }});
  }

  // ---- controller wiring (controller service owner): build the backend from
  // config, push a readiness check to `checks` and the Controller service to
  // `owned_services` ----
  // ---- end controller wiring ----

  // ---- node wiring (node service owner): build the attacher from config,
  // push the Node service to `owned_services` ----
  // ---- end node wiring ----

  IdentityService identity(config.driver_name, config.runs_controller(), std::move(checks));
  std::vector<grpc::Service*> services{&identity};
  for (const auto& service : owned_services) services.push_back(service.get());

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
