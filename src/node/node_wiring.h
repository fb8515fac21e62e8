// Builds the production Node service from the plugin's configuration: the
// attacher for the chosen connector (which adopts what earlier runs left)
// and the real OS seams (libmount, libblkid, process executor, host). Called
// once from main.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "attach/attacher_factory.h"
#include "common/status.h"
#include "node/node_service.h"

namespace blockcsi {

// <state-dir>/node-id: the --node-id of the plugin that owns the state dir.
inline constexpr char kNodeIdFileName[] = "node-id";

struct NodeWiring {
  // How volumes attach: the connector, state_dir, node_id and the bridge's
  // and kernel initiators' settings (attacher_factory.h). Its host seams
  // left empty are `host`.
  AttacherOptions attacher;
  // Required: the machine's files and processes, for the node service, the
  // attacher and the metrics that read the node's state.
  std::shared_ptr<Host> host;
  std::string zone;  // --zone; empty: none
  int64_t max_volumes_per_node = 0;
  // The smallest device each filesystem formats (FilesystemMinimums); empty: not checked.
  std::function<uint64_t(const std::string& fs_type)> fs_minimum_bytes;
};

struct BuiltNode {
  std::shared_ptr<NodeService> service;
  // How many times the node's connections to its storage were lost, summed
  // over the volumes attached now: each userspace bridge's dropped
  // connections and failed I/Os, plus one for a bridge whose client was
  // fenced. Local (the bridges' control sockets); the fence monitor reads it
  // every second to ask at once whether a fence ended the sessions. The
  // kernel initiator's sessions are not counted: their node hears of a
  // fence by the periodic check.
  std::function<uint64_t()> connection_losses;
};

StatusOr<BuiltNode> BuildNodeService(const NodeWiring& wiring);

}  // namespace blockcsi
