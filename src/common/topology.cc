#include "common/topology.h"

#include <algorithm>

namespace blockcsi {

Status ValidateZoneName(std::string_view zone, std::string_view what) {
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  bool ok = !zone.empty() && zone.size() <= 63 && alnum(zone.front()) && alnum(zone.back()) &&
            std::all_of(zone.begin(), zone.end(), [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
  if (ok) return OkStatus();
  return InvalidArgument(std::string(what) + ": zone \"" + std::string(zone) +
                         "\" is not a Kubernetes label value (1-63 of [A-Za-z0-9._-], starting and ending with a "
                         "letter or digit)");
}

bool SegmentReaches(const TopologySegments& host, const TopologySegments& requested) {
  return std::all_of(host.begin(), host.end(), [&](const auto& kv) {
    auto it = requested.find(kv.first);
    return it != requested.end() && it->second == kv.second;
  });
}

}  // namespace blockcsi
