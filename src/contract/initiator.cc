#include "contract/initiator.h"

namespace blockcsi {

Status ValidateNodeId(std::string_view node_id) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("node id \"" + std::string(node_id.substr(0, 300)) + "\" " + std::string(why));
  };
  if (node_id.empty()) return bad("is empty");
  if (node_id.size() > 253) return bad("is longer than 253 characters");
  for (char c : node_id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    if (!ok) return bad("must contain only lower-case letters, digits, '-' and '.' (a Kubernetes node name)");
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(node_id.front()) || !alnum(node_id.back())) return bad("must start and end with a letter or digit");
  return OkStatus();
}

std::string InitiatorIqnForNode(std::string_view node_id) { return kInitiatorIqnPrefix + std::string(node_id); }

std::optional<std::string> NodeIdFromInitiatorIqn(std::string_view iqn) {
  std::string_view prefix = kInitiatorIqnPrefix;
  if (!iqn.starts_with(prefix)) return std::nullopt;
  std::string node_id(iqn.substr(prefix.size()));
  if (!ValidateNodeId(node_id).ok()) return std::nullopt;
  return node_id;
}

}  // namespace blockcsi
