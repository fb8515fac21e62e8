// The node id <-> initiator IQN rule. The controller learns only node_id
// (from NodeGetInfo, through the CSINode object), so the initiator name it
// puts in a target's ACL must be a pure function of node_id:
//
//   initiator IQN = "iqn.2026-11.io.blockcsi:node:" + node_id
//
// node_id is the Kubernetes node name (a DNS-1123 subdomain: lower-case
// letters, digits, '-' and '.', at most 253 characters), every character of
// which is also legal in an IQN. Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace blockcsi {

inline constexpr char kInitiatorIqnPrefix[] = "iqn.2026-11.io.blockcsi:node:";

// INVALID_ARGUMENT naming the node id when it is not a DNS-1123 subdomain.
Status ValidateNodeId(std::string_view node_id);

std::string InitiatorIqnForNode(std::string_view node_id);

// The node id an initiator IQN of ours names; nullopt for foreign IQNs.
std::optional<std::string> NodeIdFromInitiatorIqn(std::string_view iqn);

}  // namespace blockcsi
