// Everything `blockcsi` is configured with, filled in from flags in one
// place (plugin_flags.cc). A plain value type.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend_options.h"

namespace blockcsi {

enum class PluginMode { kController, kNode, kAll };

struct PluginConfig {
  // Common.
  std::string endpoint = "unix:///csi/csi.sock";
  PluginMode mode = PluginMode::kAll;
  std::string driver_name = "blockcsi.io";
  std::string node_id;
  std::string state_dir = "/var/lib/blockcsi";
  std::string log_format = "text";
  std::string log_level = "info";
  std::chrono::milliseconds shutdown_grace{std::chrono::seconds(10)};
  // HOST:PORT serving Prometheus /metrics; empty: no metrics port.
  std::string metrics_address;

  // Node side.
  std::string connector = "kernel";  // kernel (alias: iscsi) | userspace
  // The zone this node is in (NodeGetInfo's topology.blockcsi.io/zone);
  // empty: none, and the node reaches only storage hosts with no zone.
  std::string zone;
  int64_t max_volumes_per_node = 0;  // 0: no limit advertised
  // Userspace bridge: a SCSI command / RBD op that takes longer fails with
  // EIO (and the volume's condition turns abnormal) instead of hanging.
  std::chrono::milliseconds bridge_io_timeout{std::chrono::seconds(30)};
  // Userspace bridge: the cgroup v2 directory bridges move into, outside the
  // plugin container's cgroup, so that they outlive a restart or update of
  // the container; empty: they stay in the plugin's cgroup.
  std::string bridge_cgroup;
  // Kernel RBD (krbd): `rbd device map --options` and the command timeout.
  std::string rbd_map_options;
  // Kernel iSCSI: open-iscsi's node database (CHAP goes into the record file).
  std::string iscsi_nodes_dir = "/etc/iscsi/nodes";
  std::chrono::milliseconds rbd_timeout{std::chrono::seconds(120)};
  // How often the staged filesystem volumes are trimmed (FITRIM), one at a
  // time (node/trim_loop.h); 0: never (the default: a trim costs the
  // storage a burst of discards, which an operator schedules knowingly).
  std::chrono::milliseconds fstrim_interval{0};

  // Controller side.
  // Node ids ControllerPublishVolume may grant to besides, in --mode all,
  // the plugin's own --node-id (--known-node-ids). A controller alone
  // without it takes any well-formed id at its word.
  std::vector<std::string> known_node_ids;
  // Where the Kubernetes API is (--kubeconfig); unset: the pod's service
  // account when in a pod. With either, a node id is known when its CSINode
  // lists this driver (controller/k8s_node_directory.h).
  std::string kubeconfig;
  // --backend and the flags of each kind, filled in directly. With --backend
  // rbd and no --ceph-user the cephx credentials come from the CSI secrets of
  // each call (backend/rbd/rbd_secret_backend.h). The node side reads
  // --ceph-conf from here too (RBD volumes it attaches).
  BackendOptions backend;
  // Several named backends instead of the one above (backend/backend_config.h).
  std::string backend_config;

  // Fencing (docs/deploy.md, "Fencing"). Controller: fence a Node
  // that has been NotReady or Unknown this long (0: the watcher is off), and
  // then give it the out-of-service taint (--taint-fenced-nodes, separately
  // opt-in). Node: how often the plugin asks whether its node is fenced (0:
  // never). Both: the namespace of the fences' Leases.
  std::chrono::milliseconds fence_dead_nodes_after{0};
  bool taint_fenced_nodes = false;
  std::chrono::milliseconds fence_check_interval{std::chrono::seconds(30)};
  std::string fence_namespace;

  bool runs_controller() const { return mode != PluginMode::kNode; }
  bool runs_node() const { return mode != PluginMode::kController; }
};

const char* ModeName(PluginMode mode);

}  // namespace blockcsi
