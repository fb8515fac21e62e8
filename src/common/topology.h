// Topology segments: the keys blockcsi puts in accessible_topology and the
// one rule for whether a storage host's segment is reachable from a
// requested one. Shared by the node (NodeGetInfo), the routing backend
// (which host a volume goes to) and the controller. Pure; thread-safe.
//
// A zone is a place from which a set of storage hosts is reachable: a
// backend says which zone its host is in (backend config `zone = NAME`);
// a node says which zone it is in (`--zone NAME`). A node is in one zone:
// CSI topology is one value per key, so a node cannot advertise two values
// of the same key.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/status.h"

namespace blockcsi {

using TopologySegments = std::map<std::string, std::string>;

inline constexpr char kTopologyZoneKey[] = "topology.blockcsi.io/zone";

// OK for a zone name that is a valid Kubernetes label value (it becomes
// the value of kTopologyZoneKey on Node objects and in PV node affinity):
// 1-63 of [A-Za-z0-9._-], starting and ending with a letter or digit.
// INVALID_ARGUMENT naming `what` otherwise.
Status ValidateZoneName(std::string_view zone, std::string_view what);

// Whether a volume on a host whose accessible segment is `host` can be
// reached from `requested` (e.g. one entry of accessibility_requirements,
// or GetCapacity's accessible_topology): every key the host names must be
// in `requested` with the same value. A host that names no key (no zone
// configured) is reachable from everywhere; keys only `requested` has
// (e.g. topology.blockcsi.io/node) do not narrow it.
bool SegmentReaches(const TopologySegments& host, const TopologySegments& requested);

}  // namespace blockcsi
