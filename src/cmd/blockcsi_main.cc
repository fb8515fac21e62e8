// blockcsi: the CSI plugin. Parses flags, wires the services for the chosen
// mode and serves them until told to stop.
#include <unistd.h>

#include <functional>
#include <iostream>
#include <memory>
#include <set>
#include <string_view>

#include "backend/backend_config.h"
#include "backend/backend_factory.h"
#include "cmd/grpc_server.h"
#include "cmd/identity_service.h"
#include "cmd/plugin_flags.h"
#include "cmd/process_memory.h"
#include "common/atomic_file.h"
#include "common/executor.h"
#include "common/fs_minimums.h"
#include "common/host.h"
#include "common/logging.h"
#include "common/metrics_server.h"
#include "common/version.h"
#include "controller/controller_service.h"
#include "controller/k8s_node_directory.h"
#include "node/node_wiring.h"

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

// The Kubernetes API's node directory: from --kubeconfig (unreadable →
// the plugin does not start), else the pod's service account when there is
// one; nullptr outside a cluster.
StatusOr<std::shared_ptr<KubeNodeDirectory>> NodeDirectory(const PluginConfig& config) {
  StatusOr<KubeApiAccess> access = NotFound("");
  if (!config.kubeconfig.empty()) {
    access = KubeAccessFromKubeconfig(config.kubeconfig, *MachineHost());
    if (!access.ok()) return access.status();
  } else {
    access = KubeAccessInCluster("/var/run/secrets/kubernetes.io/serviceaccount", *MachineHost());
    if (!access.ok()) {
      if (access.status().code() != StatusCode::kNotFound) {
        LogWarn("no Kubernetes node check: service account unusable", {{"error", access.status().message()}});
      }
      return std::shared_ptr<KubeNodeDirectory>();
    }
  }
  LogInfo("node check: CSINode objects", {{"server", access->server}});
  return std::make_shared<KubeNodeDirectory>(MakeKubeApiClient(*std::move(access), MachineHost()), config.driver_name);
}

// The controller's answer to "does this node exist" (ControllerPublish of an
// unknown node is NOT_FOUND): in --mode all the node this plugin serves,
// plus any --known-node-ids, then the cluster's CSINode objects when the
// API is reachable; a controller alone with neither cannot tell and takes
// any well-formed id.
std::function<StatusOr<bool>(const std::string&)> KnownNodes(const PluginConfig& config,
                                                             const std::shared_ptr<KubeNodeDirectory>& directory) {
  std::set<std::string> ids(config.known_node_ids.begin(), config.known_node_ids.end());
  if (config.runs_node()) ids.insert(config.node_id);
  if (ids.empty() && !directory) return nullptr;
  return [ids = std::move(ids), directory](const std::string& node_id) -> StatusOr<bool> {
    if (ids.count(node_id) > 0) return true;
    if (directory) return directory->Known(node_id);
    return false;
  };
}

using FsMinimumBytes = std::function<uint64_t(const std::string& fs_type)>;

// The Controller service on the configured backend(s); the backend's health
// joins the readiness `checks`.
StatusOr<std::shared_ptr<grpc::Service>> BuildController(const PluginConfig& config,
                                                         const FsMinimumBytes& fs_minimum_bytes,
                                                         std::vector<ReadinessCheck>& checks) {
  // One backend keeps its own ids; several (--backend-config) sit behind a
  // RoutingBackend whose ids name the backend.
  auto backend = [&]() -> StatusOr<std::shared_ptr<VolumeBackend>> {
    if (config.backend_config.empty()) return MakeControllerBackend(config.backend, MachineHost());
    BLOCKCSI_ASSIGN_OR_RETURN(BackendConfig backend_config, LoadBackendConfig(config.backend_config));
    return MakeRoutedBackends(backend_config, MachineHost());
  }();
  if (!backend.ok()) return backend.status();
  std::shared_ptr<VolumeBackend> volume_backend = *backend;
  checks.push_back({"backend", [volume_backend] { return volume_backend->Healthy(); }});
  // The node advertises --max-volumes-per-node through NodeGetInfo; the
  // controller enforces the same number (see controller_service.h).
  ControllerOptions controller_options;
  controller_options.max_volumes_per_node = config.max_volumes_per_node;
  auto directory = NodeDirectory(config);
  // An unusable --kubeconfig is a usage error.
  if (!directory.ok()) return InvalidArgument(directory.status().message());
  controller_options.node_exists = KnownNodes(config, *directory);
  controller_options.fs_minimum_bytes = fs_minimum_bytes;
  return std::shared_ptr<grpc::Service>(
      std::make_shared<ControllerService>(volume_backend, std::move(controller_options)));
}

StatusOr<std::shared_ptr<grpc::Service>> BuildNode(const PluginConfig& config, const FsMinimumBytes& fs_minimum_bytes) {
  NodeWiring wiring;
  wiring.zone = config.zone;
  wiring.max_volumes_per_node = config.max_volumes_per_node;
  wiring.fs_minimum_bytes = fs_minimum_bytes;
  wiring.host = MachineHost();
  AttacherOptions& attacher = wiring.attacher;
  attacher.connector = config.connector;
  attacher.state_dir = config.state_dir;
  attacher.node_id = config.node_id;
  attacher.bridge_io_timeout = config.bridge_io_timeout;
  attacher.bridge_cgroup = config.bridge_cgroup;
  attacher.ceph_conf = config.backend.ceph_conf;  // one --ceph-conf for both sides
  attacher.rbd_map_options = config.rbd_map_options;
  attacher.iscsi_nodes_dir = config.iscsi_nodes_dir;
  attacher.rbd_command_timeout = config.rbd_timeout;
  BLOCKCSI_ASSIGN_OR_RETURN(auto node, BuildNodeService(wiring));
  return std::shared_ptr<grpc::Service>(node);
}

// The metrics port comes up first: a plugin that cannot bind the port it
// was told to serve on is misconfigured, and says so before anything else.
// -1, or the exit code.
int StartMetrics(const PluginConfig& config, std::unique_ptr<MetricsServer>* server) {
  RecordBuildInfo("blockcsi");
  if (config.metrics_address.empty()) return -1;
  auto started = StartMetricsServer(config.metrics_address, Metrics());
  if (!started.ok()) {
    std::cerr << "blockcsi: " << started.status().message() << "\n";
    return started.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  *server = std::move(*started);
  return -1;
}

int Main(int argc, char** argv) {
  TunePluginMemory();
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

  std::unique_ptr<MetricsServer> metrics_server;
  if (int exit_code = StartMetrics(config, &metrics_server); exit_code >= 0) return exit_code;

  // Services and readiness checks are gathered per mode; Identity is built
  // last so that Probe sees every check.
  std::vector<ReadinessCheck> checks;
  // One answer to "how small may a volume of this filesystem be", shared
  // by CreateVolume (sizes volumes) and NodeStageVolume (refuses devices).
  auto fs_minimums =
      std::make_shared<FilesystemMinimums>(std::shared_ptr<Executor>(MakeProcessExecutor()), MachineHost());
  auto fs_minimum_bytes = [fs_minimums](const std::string& fs_type) { return fs_minimums->MinimumBytes(fs_type); };
  std::vector<std::shared_ptr<grpc::Service>> owned_services;
  if (config.runs_node()) {
    checks.push_back({"state-dir", [dir = config.state_dir] { return StateDirWritable(dir); }});
  }

  // ---- controller wiring (controller service owner): the backend from
  // config, a readiness check in `checks`, the Controller service ----
  if (config.runs_controller()) {
    auto controller = BuildController(config, fs_minimum_bytes, checks);
    if (!controller.ok()) {
      LogError("cannot start the controller service", {{"error", controller.status().ToString()}});
      std::cerr << "blockcsi: " << controller.status().message() << "\n";
      // Bad flags exit like a usage error; an unreachable backend is worth a restart.
      return controller.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
    owned_services.push_back(*controller);
  }
  // ---- end controller wiring ----

  // ---- node wiring (node service owner): the attacher from config, the
  // Node service ----
  if (config.runs_node()) {
    auto node = BuildNode(config, fs_minimum_bytes);
    if (!node.ok()) {
      LogError("cannot start the node service", {{"error", node.status().ToString()}});
      std::cerr << "blockcsi: " << node.status().message() << "\n";
      return 1;
    }
    owned_services.push_back(*node);
  }
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
