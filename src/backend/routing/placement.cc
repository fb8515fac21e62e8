#include "backend/routing/placement.h"

#include <algorithm>

namespace blockcsi {

bool PlacementAllows(const TopologySegments& host, const AccessibilityRequirements& requirements) {
  if (requirements.requisite.empty()) return true;
  return std::any_of(requirements.requisite.begin(), requirements.requisite.end(),
                     [&](const TopologySegments& requested) { return SegmentReaches(host, requested); });
}

std::vector<size_t> PlacementOrder(const std::vector<TopologySegments>& hosts, size_t default_index,
                                   const AccessibilityRequirements& requirements) {
  if (requirements.empty()) {
    if (default_index < hosts.size()) return {default_index};
    return {};
  }
  // Default first, then configuration order.
  std::vector<size_t> by_rank;
  if (default_index < hosts.size()) by_rank.push_back(default_index);
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (i != default_index && !hosts[i].empty()) by_rank.push_back(i);
  }
  std::vector<size_t> order;
  auto add = [&](size_t i) {
    if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
  };
  for (const auto& preferred : requirements.preferred) {
    for (size_t i : by_rank) {
      if (PlacementAllows(hosts[i], requirements) && SegmentReaches(hosts[i], preferred)) add(i);
    }
  }
  for (size_t i : by_rank) {
    if (PlacementAllows(hosts[i], requirements)) add(i);
  }
  return order;
}

std::string DescribeSegments(const TopologySegments& segments) {
  std::string out = "{";
  for (const auto& [key, value] : segments) out += (out.size() == 1 ? "" : ",") + key + "=" + value;
  return out + "}";
}

}  // namespace blockcsi
