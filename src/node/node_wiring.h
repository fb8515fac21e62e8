// Builds the production Node service from the plugin's configuration: the
// attacher for the chosen connector (which adopts what earlier runs left)
// and the real OS seams (libmount, libblkid, process executor, host). The
// test-only fault points (BLOCKCSI_FAULT_POINT) reach the attacher's steps
// too. Called once from main.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "node/node_service.h"

namespace blockcsi {

// <state-dir>/node-id: the --node-id of the plugin that owns the state dir.
inline constexpr char kNodeIdFileName[] = "node-id";

struct NodeWiring {
  std::string connector;  // "iscsi" | "userspace"
  std::string state_dir;
  std::string node_id;
  std::string zone;  // --zone; empty: none
  int64_t max_volumes_per_node = 0;
  std::chrono::milliseconds bridge_io_timeout{std::chrono::seconds(30)};
  std::string bridge_cgroup;  // userspace connector; see attacher_factory.h
  std::string ceph_conf;      // empty: the attacher's default
  std::string rbd_map_options;
  // Kernel iSCSI: open-iscsi's node database, where CHAP settings are written.
  std::string iscsi_nodes_dir = "/etc/iscsi/nodes";
  std::chrono::milliseconds rbd_timeout{std::chrono::seconds(120)};
  // The smallest device each filesystem formats (FilesystemMinimums); empty: not checked.
  std::function<uint64_t(const std::string& fs_type)> fs_minimum_bytes;
};

StatusOr<std::shared_ptr<NodeService>> BuildNodeService(const NodeWiring& wiring);

}  // namespace blockcsi
