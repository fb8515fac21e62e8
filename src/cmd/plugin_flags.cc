#include "cmd/plugin_flags.h"

#include <CLI/CLI.hpp>
#include <iostream>

#include "common/duration.h"
#include "common/logging.h"
#include "common/topology.h"
#include "common/version.h"

namespace blockcsi {

const char* ModeName(PluginMode mode) {
  switch (mode) {
    case PluginMode::kController:
      return "controller";
    case PluginMode::kNode:
      return "node";
    case PluginMode::kAll:
      return "all";
  }
  return "all";
}

namespace {

// The flags every mode takes.
void RegisterCommonFlags(CLI::App& app, PluginConfig& c, PluginFlagTexts& texts) {
  app.add_option("--endpoint", c.endpoint, "CSI endpoint, unix:///path/to/csi.sock")->capture_default_str();
  app.add_option("--mode", texts.mode, "Services to run: controller, node or all")
      ->check(CLI::IsMember({"controller", "node", "all"}))
      ->capture_default_str();
  app.add_option("--driver-name", c.driver_name, "CSI driver name (GetPluginInfo)")->capture_default_str();
  app.add_option("--node-id", c.node_id,
                 "This node's id (the Kubernetes node name); the initiator IQN is derived from it");
  app.add_option("--state-dir", c.state_dir, "Directory for durable node state (attach records)")
      ->capture_default_str();
  app.add_option("--log-format", c.log_format, "Log format: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--log-level", c.log_level, "Log level: debug, info, warn, error")
      ->check(CLI::IsMember({"debug", "info", "warn", "warning", "error"}))
      ->capture_default_str();
  app.add_option("--shutdown-grace", texts.shutdown_grace, "How long in-flight RPCs may run after SIGTERM (e.g. 10s)")
      ->capture_default_str();

  app.add_option("--metrics-address", c.metrics_address,
                 "HOST:PORT to serve Prometheus metrics on at /metrics (plain HTTP); off when not given");
}

// The Node group: how volumes are attached on this host.
void RegisterNodeFlags(CLI::App& app, PluginConfig& c, PluginFlagTexts& texts) {
  auto* node = "Node";
  app.add_option("--connector", c.connector,
                 "How the node attaches volumes: kernel (open-iscsi for iSCSI, krbd for RBD; \"iscsi\" is an alias "
                 "kept for existing manifests) or userspace (libiscsi / librbd behind a FUSE file and a loop device)")
      ->check(CLI::IsMember({"kernel", "iscsi", "userspace"}))
      ->group(node)
      ->capture_default_str();
  app.add_option("--zone", c.zone,
                 "The zone this node is in: NodeGetInfo reports it as topology.blockcsi.io/zone, and volumes go to "
                 "the storage hosts of that zone (backend config `zone`); empty: only hosts with no zone")
      ->group(node);
  app.add_option("--max-volumes-per-node", c.max_volumes_per_node,
                 "Volumes this node accepts (NodeGetInfo); 0 means no limit")
      ->check(CLI::NonNegativeNumber)
      ->group(node)
      ->capture_default_str();
  app.add_option("--bridge-io-timeout", texts.bridge_io_timeout,
                 "userspace connector: an I/O to the storage that takes longer fails (EIO) instead of hanging")
      ->group(node)
      ->capture_default_str();
  app.add_option("--bridge-cgroup", c.bridge_cgroup,
                 "userspace connector: cgroup v2 directory (e.g. /sys/fs/cgroup/blockcsi-bridges, created if "
                 "missing) each bridge moves into, outside this container's cgroup, so that volumes keep working "
                 "while the plugin's container restarts or updates")
      ->group(node);
  app.add_option("--iscsi-nodes-dir", c.iscsi_nodes_dir,
                 "iscsi connector: open-iscsi's node database; CHAP settings are written into the node record "
                 "file there, never passed on iscsiadm's command line")
      ->group(node)
      ->capture_default_str();
  app.add_option("--rbd-map-options", c.rbd_map_options,
                 "iscsi connector, RBD volumes: extra `rbd device map --options` (e.g. queue_depth=128)")
      ->group(node);
  app.add_option("--rbd-timeout", texts.rbd_timeout, "iscsi connector, RBD volumes: timeout of each rbd command")
      ->group(node)
      ->capture_default_str();
  app.add_option("--fstrim-interval", texts.fstrim_interval,
                 "How often the staged filesystem volumes are trimmed (FITRIM, one volume at a time, volumes busy "
                 "being staged or unstaged skipped until the next round), e.g. 24h; 0: never")
      ->group(node)
      ->capture_default_str();
}

// The Controller group: which backend, and its settings.
void RegisterControllerFlags(CLI::App& app, PluginConfig& c, PluginFlagTexts& texts) {
  auto* controller = "Controller";
  app.add_option("--backend", c.backend.kind, "Volume backend: local (in-process pool), remote (agent) or rbd")
      ->check(CLI::IsMember({"local", "remote", "rbd"}))
      ->group(controller)
      ->capture_default_str();
  app.add_option("--pool", c.backend.pool_dir, "Pool directory for --backend local")->group(controller);
  app.add_option("--tgt-control-port", c.backend.tgt_control_port, "tgtd control port for --backend local")
      ->check(CLI::Range(0, 65535))
      ->group(controller);
  app.add_option("--tgtadm", c.backend.tgtadm,
                 "tgtadm program for --backend local, by absolute path (PATH is never searched)")
      ->group(controller)
      ->capture_default_str();
  app.add_option("--tgt-control", c.backend.tgt_control,
                 "--backend local: how tgtd is driven, socket (no CHAP secret in any argv) or tgtadm")
      ->check(CLI::IsMember({"socket", "tgtadm"}))
      ->group(controller)
      ->capture_default_str();
  app.add_option("--overcommit-ratio", c.backend.overcommit_ratio,
                 "--backend local: a new volume (or a grow) may take up to the pool's free space times this")
      ->check(CLI::Range(0.001, 1000.0))
      ->group(controller)
      ->capture_default_str();
  app.add_option("--max-volumes", c.backend.max_volumes,
                 "--backend local: the most volumes the pool holds (0: no limit); more is RESOURCE_EXHAUSTED")
      ->group(controller)
      ->capture_default_str();
  app.add_option("--portal", c.backend.portals, "iSCSI portal HOST:PORT advertised to nodes (repeatable)")
      ->group(controller);
  app.add_option("--known-node-ids", c.known_node_ids,
                 "Node ids ControllerPublishVolume accepts besides --node-id in --mode all (comma-separated or "
                 "repeated); any other is NOT_FOUND. Unset on a controller alone: every well-formed id")
      ->delimiter(',')
      ->group(controller);
  app.add_option("--kubeconfig", c.kubeconfig,
                 "Kubernetes API access for ControllerPublishVolume's node check (a node id whose CSINode does not "
                 "list this driver is NOT_FOUND) and for fencing, on both sides. Unset: the pod's service account, "
                 "when run in a pod")
      ->group(controller);
  app.add_option("--iqn-prefix", c.backend.iqn_prefix, "IQN prefix of the targets we create")
      ->group(controller)
      ->capture_default_str();
  app.add_option("--reconcile-interval", texts.reconcile_interval,
                 "How often the exports are compared with the pool (e.g. 30s)")
      ->group(controller)
      ->capture_default_str();
  app.add_option("--target-agent", c.backend.target_agent, "blockcsi-target address HOST:PORT for --backend remote")
      ->group(controller);
  app.add_option("--tls-cert", c.backend.tls_cert, "Client certificate for the agent (mTLS)")->group(controller);
  app.add_option("--tls-key", c.backend.tls_key, "Client key for the agent (mTLS)")->group(controller);
  app.add_option("--tls-ca", c.backend.tls_ca, "CA that signed the agent's certificate")->group(controller);
  app.add_flag("--insecure", c.backend.insecure, "Talk to the agent without TLS (tests only)")->group(controller);
  app.add_option("--ceph-conf", c.backend.ceph_conf,
                 "ceph.conf (monitors) for --backend rbd; on a node, for RBD volumes whose publish_context names "
                 "no monitors")
      ->group(controller);
  app.add_option("--ceph-user", c.backend.ceph_user,
                 "cephx id (without \"client.\") for --backend rbd; omit it (and --ceph-keyring) to use the "
                 "userID/userKey of each call's CSI secrets")
      ->group(controller);
  app.add_option("--ceph-keyring", c.backend.ceph_keyring, "Keyring file of --ceph-user for --backend rbd")
      ->group(controller);
  app.add_option("--rbd-pool", c.backend.rbd_pool, "RBD pool the volumes live in for --backend rbd")->group(controller);
  app.add_option("--backend-config", c.backend_config,
                 "File of several named backends, replacing --backend and its flags: sections\n"
                 "\"[backend NAME]\" with \"key = value\" lines (kind = local|remote|rbd, the flags of that kind\n"
                 "without \"--\", default = true on one); StorageClass parameter backend=NAME picks one.\n"
                 "See docs/deploy.md, \"Several backends\"")
      ->group(controller);
}

// The Fencing group: the controller's fencing of dead nodes and the node's
// own check whether it is fenced (docs/deploy.md, "Fencing").
void RegisterFencingFlags(CLI::App& app, PluginConfig& c, PluginFlagTexts& texts) {
  auto* fencing = "Fencing";
  app.add_option("--fence-dead-nodes-after", texts.fence_dead_nodes_after,
                 "Fence a Node that has been NotReady or Unknown this long (e.g. 5m): revoke its access on every "
                 "storage host. Unset or 0: off. Run it on one controller instance only")
      ->group(fencing);
  app.add_flag("--taint-fenced-nodes", c.taint_fenced_nodes,
               "After a complete fence, give the Node the node.kubernetes.io/out-of-service taint (its pods are "
               "deleted and its volumes force-detached); removed again when it is unfenced")
      ->group(fencing);
  app.add_option("--fence-namespace", c.fence_namespace,
                 "Namespace of the fences' Leases (the node plugins read and report on them). Default: "
                 "$POD_NAMESPACE, else kube-system")
      ->group(fencing);
  app.add_option("--fence-check-interval", texts.fence_check_interval,
                 "Node: how often the plugin asks whether its node is fenced (0: never)")
      ->group(fencing)
      ->capture_default_str();
}

}  // namespace

void RegisterPluginFlags(CLI::App& app, PluginConfig& c, PluginFlagTexts& texts) {
  RegisterCommonFlags(app, c, texts);
  RegisterNodeFlags(app, c, texts);
  RegisterControllerFlags(app, c, texts);
  RegisterFencingFlags(app, c, texts);
}

int ParsePluginFlags(int argc, char** argv, PluginConfig& config) {
  CLI::App app{"blockcsi: CSI driver for network block storage (iSCSI and Ceph RBD)", "blockcsi"};
  PluginFlagTexts texts{.mode = ModeName(config.mode),
                        .shutdown_grace = FormatDuration(config.shutdown_grace),
                        .reconcile_interval = FormatDuration(config.backend.reconcile_interval),
                        .bridge_io_timeout = FormatDuration(config.bridge_io_timeout),
                        .rbd_timeout = FormatDuration(config.rbd_timeout),
                        .fence_dead_nodes_after = FormatDuration(config.fence_dead_nodes_after),
                        .fence_check_interval = FormatDuration(config.fence_check_interval),
                        .fstrim_interval = FormatDuration(config.fstrim_interval)};
  RegisterPluginFlags(app, config, texts);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print the version and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // prints help (exit 0) or the usage error (exit non-zero)
  }
  // --backend-config names every backend itself; a flag of the single
  // backend next to it would be silently ignored, so it is refused.
  if (!config.backend_config.empty()) {
    for (const char* flag :
         {"--backend", "--pool", "--tgt-control-port", "--tgtadm", "--tgt-control", "--overcommit-ratio",
          "--max-volumes", "--portal", "--iqn-prefix", "--reconcile-interval", "--target-agent", "--tls-cert",
          "--tls-key", "--tls-ca", "--insecure", "--ceph-conf", "--ceph-user", "--ceph-keyring", "--rbd-pool"}) {
      if (app.count(flag) > 0) {
        std::cerr << "blockcsi: " << flag << " cannot be combined with --backend-config (set it in the file)\n";
        return 2;
      }
    }
  }
  if (show_version) {
    std::cout << "blockcsi " << BuildVersion() << " (" << BuildCommit() << ")\n";
    return 0;
  }
  config.mode = texts.mode == "controller" ? PluginMode::kController
                : texts.mode == "node"     ? PluginMode::kNode
                                           : PluginMode::kAll;
  for (auto [text, target] : {std::pair{&texts.shutdown_grace, &config.shutdown_grace},
                              std::pair{&texts.reconcile_interval, &config.backend.reconcile_interval},
                              std::pair{&texts.bridge_io_timeout, &config.bridge_io_timeout},
                              std::pair{&texts.rbd_timeout, &config.rbd_timeout},
                              std::pair{&texts.fence_dead_nodes_after, &config.fence_dead_nodes_after},
                              std::pair{&texts.fence_check_interval, &config.fence_check_interval},
                              std::pair{&texts.fstrim_interval, &config.fstrim_interval}}) {
    auto parsed = ParseDuration(*text);
    if (!parsed.ok()) {
      std::cerr << "blockcsi: " << parsed.status().message() << "\n";
      return 2;
    }
    *target = *parsed;
  }
  return -1;
}

Status ValidatePluginConfig(const PluginConfig& config) {
  if (config.runs_node() && config.node_id.empty()) {
    return InvalidArgument("--node-id is required when the node service runs (--mode node or all)");
  }
  if (!config.zone.empty()) BLOCKCSI_RETURN_IF_ERROR(ValidateZoneName(config.zone, "--zone"));
  if (config.runs_controller() && config.backend_config.empty() && config.backend.kind == "rbd") {
    if (config.backend.rbd_pool.empty()) return InvalidArgument("--rbd-pool is required for --backend rbd");
    if (config.backend.ceph_conf.empty()) return InvalidArgument("--ceph-conf is required for --backend rbd");
    if (!config.backend.ceph_keyring.empty() && config.backend.ceph_user.empty()) {
      return InvalidArgument("--ceph-keyring needs --ceph-user");
    }
  }
  if (config.taint_fenced_nodes && config.fence_dead_nodes_after.count() == 0) {
    return InvalidArgument("--taint-fenced-nodes needs --fence-dead-nodes-after (the watcher that fences)");
  }
  if (config.state_dir.empty() || config.state_dir.front() != '/') {
    return InvalidArgument("--state-dir must be an absolute path");
  }
  return OkStatus();
}

}  // namespace blockcsi
