// CSI request builders shared by the controller's unit tests and its
// conformance suite, which send the same requests in-process and over gRPC.
#pragma once

#include <string>

#include "csi.pb.h"
#include "support/csi_capabilities.h"

namespace blockcsi::testing {

inline csi::v1::ControllerPublishVolumeRequest PublishRequest(
    const std::string& id, const std::string& node, const csi::v1::VolumeCapability& cap = MountCapability(),
    bool readonly = false) {
  csi::v1::ControllerPublishVolumeRequest r;
  r.set_volume_id(id);
  r.set_node_id(node);
  *r.mutable_volume_capability() = cap;
  r.set_readonly(readonly);
  return r;
}

}  // namespace blockcsi::testing
