#include "cmd/plugin_flags.h"

#include <CLI/CLI.hpp>
#include <iostream>

#include "common/duration.h"
#include "common/logging.h"
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

void RegisterPluginFlags(CLI::App& app, PluginConfig& c, std::string& mode_text, std::string& shutdown_grace_text,
                         std::string& reconcile_interval_text) {
  app.add_option("--endpoint", c.endpoint, "CSI endpoint, unix:///path/to/csi.sock")->capture_default_str();
  app.add_option("--mode", mode_text, "Services to run: controller, node or all")
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
  app.add_option("--shutdown-grace", shutdown_grace_text, "How long in-flight RPCs may run after SIGTERM (e.g. 10s)")
      ->capture_default_str();

  auto* node = "Node";
  app.add_option("--connector", c.connector, "How the node attaches volumes: iscsi (kernel) or userspace")
      ->check(CLI::IsMember({"iscsi", "userspace"}))
      ->group(node)
      ->capture_default_str();
  app.add_option("--max-volumes-per-node", c.max_volumes_per_node,
                 "Volumes this node accepts (NodeGetInfo); 0 means no limit")
      ->check(CLI::NonNegativeNumber)
      ->group(node)
      ->capture_default_str();

  auto* controller = "Controller";
  app.add_option("--backend", c.backend, "Volume backend: local (in-process pool), remote (agent) or rbd")
      ->check(CLI::IsMember({"local", "remote", "rbd"}))
      ->group(controller)
      ->capture_default_str();
  app.add_option("--pool", c.pool_dir, "Pool directory for --backend local")->group(controller);
  app.add_option("--tgt-control-port", c.tgt_control_port, "tgtd control port for --backend local")
      ->check(CLI::Range(0, 65535))
      ->group(controller);
  app.add_option("--portal", c.portals, "iSCSI portal HOST:PORT advertised to nodes (repeatable)")->group(controller);
  app.add_option("--iqn-prefix", c.iqn_prefix, "IQN prefix of the targets we create")
      ->group(controller)
      ->capture_default_str();
  app.add_option("--reconcile-interval", reconcile_interval_text,
                 "How often the exports are compared with the pool (e.g. 30s)")
      ->group(controller)
      ->capture_default_str();
  app.add_option("--target-agent", c.target_agent, "blockcsi-target address HOST:PORT for --backend remote")
      ->group(controller);
  app.add_option("--tls-cert", c.tls_cert, "Client certificate for the agent (mTLS)")->group(controller);
  app.add_option("--tls-key", c.tls_key, "Client key for the agent (mTLS)")->group(controller);
  app.add_option("--tls-ca", c.tls_ca, "CA that signed the agent's certificate")->group(controller);
  app.add_flag("--insecure", c.insecure, "Talk to the agent without TLS (tests only)")->group(controller);
}

int ParsePluginFlags(int argc, char** argv, PluginConfig& config) {
  CLI::App app{"blockcsi: CSI driver for network block storage (iSCSI and Ceph RBD)", "blockcsi"};
  std::string mode_text = ModeName(config.mode);
  std::string shutdown_grace_text = FormatDuration(config.shutdown_grace);
  std::string reconcile_interval_text = FormatDuration(config.reconcile_interval);
  RegisterPluginFlags(app, config, mode_text, shutdown_grace_text, reconcile_interval_text);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print the version and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // prints help (exit 0) or the usage error (exit non-zero)
  }
  if (show_version) {
    std::cout << "blockcsi " << BuildVersion() << " (" << BuildCommit() << ")\n";
    return 0;
  }
  config.mode = mode_text == "controller" ? PluginMode::kController
                : mode_text == "node"     ? PluginMode::kNode
                                          : PluginMode::kAll;
  for (auto [text, target] : {std::pair{&shutdown_grace_text, &config.shutdown_grace},
                              std::pair{&reconcile_interval_text, &config.reconcile_interval}}) {
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
  if (config.state_dir.empty() || config.state_dir.front() != '/') {
    return InvalidArgument("--state-dir must be an absolute path");
  }
  return OkStatus();
}

}  // namespace blockcsi
