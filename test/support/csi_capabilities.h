// VolumeCapability builders for CSI requests, shared by the unit,
// conformance, e2e and fault suites (one definition instead of a copy each).
#pragma once

#include <string>

#include "csi.pb.h"

namespace blockcsi::testing {

// A filesystem volume; fs_type "" lets the plugin pick its default.
csi::v1::VolumeCapability MountCapability(
    const std::string& fs_type = "",
    csi::v1::VolumeCapability::AccessMode::Mode mode = csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
csi::v1::VolumeCapability BlockCapability(
    csi::v1::VolumeCapability::AccessMode::Mode mode = csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
// "block" → BlockCapability(), anything else → MountCapability(fs).
csi::v1::VolumeCapability CapabilityFor(const std::string& fs_or_block);

}  // namespace blockcsi::testing
