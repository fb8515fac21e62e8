// blockcsi: the CSI plugin. Parses flags, wires the services for the chosen
// mode and serves them until told to stop.
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>

#include "backend/backend_config.h"
#include "backend/backend_factory.h"
#include "cmd/grpc_server.h"
#include "cmd/identity_service.h"
#include "cmd/plugin_flags.h"
#include "cmd/process_memory.h"
#include "common/atomic_file.h"
#include "common/duration.h"
#include "common/executor.h"
#include "common/fs_minimums.h"
#include "common/host.h"
#include "common/logging.h"
#include "common/metrics_server.h"
#include "common/version.h"
#include "controller/controller_service.h"
#include "controller/fencing.h"
#include "controller/fencing_service.h"
#include "controller/k8s_node_directory.h"
#include "controller/node_fence_watcher.h"
#include "controller/volume_keys_service.h"
#include "node/fence_monitor.h"
#include "node/node_wiring.h"
#include "node/trim_loop.h"

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

// Access to the Kubernetes API: from --kubeconfig (unreadable → the plugin
// does not start), else the pod's service account when there is one;
// nullopt outside a cluster.
StatusOr<std::optional<KubeApiAccess>> KubeAccess(const PluginConfig& config) {
  if (!config.kubeconfig.empty()) {
    auto access = KubeAccessFromKubeconfig(config.kubeconfig, *MachineHost());
    if (!access.ok()) return access.status();
    return std::optional<KubeApiAccess>(*std::move(access));
  }
  auto access = KubeAccessInCluster("/var/run/secrets/kubernetes.io/serviceaccount", *MachineHost());
  if (!access.ok()) {
    if (access.status().code() != StatusCode::kNotFound) {
      LogWarn("no Kubernetes API access: service account unusable", {{"error", access.status().message()}});
    }
    return std::optional<KubeApiAccess>();
  }
  return std::optional<KubeApiAccess>(*std::move(access));
}

// The Kubernetes API's node directory; nullptr outside a cluster.
StatusOr<std::shared_ptr<KubeNodeDirectory>> NodeDirectory(const PluginConfig& config) {
  BLOCKCSI_ASSIGN_OR_RETURN(std::optional<KubeApiAccess> access, KubeAccess(config));
  if (!access) return std::shared_ptr<KubeNodeDirectory>();
  LogInfo("node check: CSINode objects", {{"server", access->server}});
  return std::make_shared<KubeNodeDirectory>(MakeKubeApiClient(*std::move(access), MachineHost()), config.driver_name);
}

// Where the fences' Leases live: --fence-namespace, else the pod's own.
std::string FenceNamespace(const PluginConfig& config) {
  if (!config.fence_namespace.empty()) return config.fence_namespace;
  const char* ns = std::getenv("POD_NAMESPACE");
  return ns != nullptr && *ns != '\0' ? ns : "kube-system";
}

// What runs beside the services: loops that stop when the process does.
struct Background {
  std::shared_ptr<NodeFenceWatcher> watcher;
  std::shared_ptr<NodeFenceMonitor> monitor;
  std::shared_ptr<NodeTrimLoop> trim;
};

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
// `extra` gets the services served beside it (fencing, key rotation).
StatusOr<std::shared_ptr<grpc::Service>> BuildController(const PluginConfig& config,
                                                         const FsMinimumBytes& fs_minimum_bytes,
                                                         std::vector<ReadinessCheck>& checks,
                                                         std::vector<std::shared_ptr<grpc::Service>>& extra,
                                                         Background& background) {
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
  // Fences are recorded on the storage hosts; the mirror is rebuilt from
  // them before the first CSI call is served (a fence a crash cut short is
  // completed here).
  // Where fencing is deployed (the watcher, or --fence-namespace shared with
  // the nodes), every fence (the watcher's, blockctl's) is told to its node
  // through a Lease and its cleanup report read back there. Elsewhere the API
  // grants no Leases (the base manifests): a Lease the controller could make
  // but never delete would keep a hand-made fence from being lifted.
  BLOCKCSI_ASSIGN_OR_RETURN(std::optional<KubeApiAccess> api_access, KubeAccess(config));
  std::shared_ptr<KubeApiClient> api;
  if (api_access) api = MakeKubeApiClient(*std::move(api_access), MachineHost());
  const bool fencing_deployed = !config.fence_namespace.empty() || config.fence_dead_nodes_after.count() > 0;
  auto fencer = std::make_shared<NodeFencer>(
      volume_backend, api && fencing_deployed ? std::make_shared<FenceLeases>(api, FenceNamespace(config)) : nullptr);
  for (const auto& [host, why] : fencer->Load()) {
    LogWarn("fences of a storage host not read at start; that host still refuses its fenced nodes",
            {{"host", host}, {"error", why}});
  }
  controller_options.fencer = fencer;
  extra.push_back(std::make_shared<FencingService>(fencer));
  extra.push_back(std::make_shared<VolumeKeysService>(volume_backend));
  if (config.fence_dead_nodes_after.count() > 0) {
    if (!api) {
      return InvalidArgument("--fence-dead-nodes-after needs the Kubernetes API (--kubeconfig, or a service account)");
    }
    NodeFenceWatcherOptions watch;
    watch.dead_after = std::chrono::duration_cast<std::chrono::seconds>(config.fence_dead_nodes_after);
    watch.taint = config.taint_fenced_nodes;
    watch.driver_name = config.driver_name;
    if (*directory) watch.runs_driver = [d = *directory](const std::string& node) { return d->Known(node); };
    background.watcher = std::make_shared<NodeFenceWatcher>(api, fencer, watch);
  }
  return std::shared_ptr<grpc::Service>(
      std::make_shared<ControllerService>(volume_backend, std::move(controller_options)));
}

// The node's fence monitor over the fence's Lease (controller/node_fence_watcher.h):
// absent → not fenced; its fence-id annotation → fenced; the report sets
// its cleaned-up annotation to that id.
std::shared_ptr<NodeFenceMonitor> FenceMonitor(const PluginConfig& config, std::shared_ptr<NodeService> node,
                                               KubeApiAccess access, std::function<uint64_t()> connection_losses) {
  std::shared_ptr<KubeApiClient> api = MakeKubeApiClient(std::move(access), MachineHost());
  const std::string path =
      "/apis/coordination.k8s.io/v1/namespaces/" + FenceNamespace(config) + "/leases/" + FenceLeaseName(config.node_id);
  NodeFenceMonitorOptions options;
  options.interval = config.fence_check_interval;
  // A fence ends the node's sessions: asked at once then, not an interval later.
  options.connection_losses = std::move(connection_losses);
  options.check = [api, path]() -> StatusOr<FenceNotice> {
    BLOCKCSI_ASSIGN_OR_RETURN(KubeApiResponse got, api->Get(path));
    if (got.http_status == 404) return FenceNotice{};
    if (got.http_status != 200) return Unavailable("GET " + path + ": HTTP " + std::to_string(got.http_status));
    auto lease = nlohmann::json::parse(got.body, nullptr, false);
    if (lease.is_discarded()) return Unavailable("GET " + path + ": not JSON");
    auto annotations = lease.value("/metadata/annotations"_json_pointer, nlohmann::json::object());
    return FenceNotice{annotations.value(fence_annotations::kFenceId, ""),
                       annotations.value(fence_annotations::kCleanedUp, "")};
  };
  options.report = [api, path](const std::string& fence_id, const std::vector<std::string>& lazily) -> Status {
    std::string paths;
    for (const auto& p : lazily) paths += (paths.empty() ? "" : ",") + p;
    nlohmann::json patch = {
        {"metadata",
         {{"annotations", {{fence_annotations::kCleanedUp, fence_id}, {fence_annotations::kLazilyUnmounted, paths}}}}}};
    BLOCKCSI_ASSIGN_OR_RETURN(KubeApiResponse patched,
                              api->Send("PATCH", path, "application/merge-patch+json", patch.dump()));
    if (patched.http_status != 200) {
      return Unavailable("PATCH " + path + ": HTTP " + std::to_string(patched.http_status));
    }
    return OkStatus();
  };
  return std::make_shared<NodeFenceMonitor>(std::move(node), std::move(options));
}

StatusOr<std::shared_ptr<grpc::Service>> BuildNode(const PluginConfig& config, const FsMinimumBytes& fs_minimum_bytes,
                                                   Background& background) {
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
  BLOCKCSI_ASSIGN_OR_RETURN(BuiltNode built, BuildNodeService(wiring));
  std::shared_ptr<NodeService> node = built.service;
  if (config.fence_check_interval.count() > 0) {
    BLOCKCSI_ASSIGN_OR_RETURN(std::optional<KubeApiAccess> access, KubeAccess(config));
    if (access) {
      background.monitor = FenceMonitor(config, node, *std::move(access), built.connection_losses);
    } else {
      LogInfo("no Kubernetes API: this node does not check whether it is fenced");
    }
  }
  if (config.fstrim_interval.count() > 0) {
    background.trim = std::make_shared<NodeTrimLoop>(node, config.fstrim_interval);
    LogInfo("periodic trim on", {{"interval", FormatDuration(config.fstrim_interval)}});
  }
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
  Background background;
  if (config.runs_node()) {
    checks.push_back({"state-dir", [dir = config.state_dir] { return StateDirWritable(dir); }});
  }

  // ---- controller wiring (controller service owner): the backend from
  // config, a readiness check in `checks`, the Controller service ----
  if (config.runs_controller()) {
    auto controller = BuildController(config, fs_minimum_bytes, checks, owned_services, background);
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
    auto node = BuildNode(config, fs_minimum_bytes, background);
    if (!node.ok()) {
      LogError("cannot start the node service", {{"error", node.status().ToString()}});
      std::cerr << "blockcsi: " << node.status().message() << "\n";
      return 1;
    }
    owned_services.push_back(*node);
  }
  // ---- end node wiring ----

  // The loops start once every service is built; they stop before the
  // services go (Background's members are destroyed at return).
  if (background.watcher) background.watcher->Start();
  if (background.monitor) background.monitor->Start();
  if (background.trim) background.trim->Start();

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
