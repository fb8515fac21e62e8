// Placement: which of several storage hosts a new volume may go to, and in
// which order they are tried, from CreateVolume's
// accessibility_requirements. Pure functions; thread-safe.
//
// A host whose segment reaches (common/topology.h) no requisite segment is
// never tried. The rest are tried preferred segment by preferred segment,
// in the order the CO gave them (external-provisioner puts the segment of
// the node the scheduler picked first); within one segment, the default
// host first, then configuration order; then the allowed hosts no
// preferred segment names, in the same order. No requirements at all: the
// default host alone (the behaviour of a StorageClass without topology).
// Only the default host and hosts with a segment (a zone) are placed on:
// another backend without a zone (say, a Ceph pool next to zoned iSCSI
// hosts) is used only when a StorageClass names it, so that a full zone
// never moves a class's volumes to another kind of storage.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/topology.h"

namespace blockcsi {

// `hosts[i]` is host i's segment (empty: reachable from everywhere).
std::vector<size_t> PlacementOrder(const std::vector<TopologySegments>& hosts, size_t default_index,
                                   const AccessibilityRequirements& requirements);

// Whether host `host` may hold a volume with these requirements at all.
bool PlacementAllows(const TopologySegments& host, const AccessibilityRequirements& requirements);

// "{k=v,k=v}": a segment for messages.
std::string DescribeSegments(const TopologySegments& segments);

}  // namespace blockcsi
