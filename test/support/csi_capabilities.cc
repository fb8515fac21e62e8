#include "support/csi_capabilities.h"

namespace blockcsi::testing {

csi::v1::VolumeCapability MountCapability(const std::string& fs_type,
                                          csi::v1::VolumeCapability::AccessMode::Mode mode) {
  csi::v1::VolumeCapability cap;
  cap.mutable_access_mode()->set_mode(mode);
  cap.mutable_mount()->set_fs_type(fs_type);
  return cap;
}

csi::v1::VolumeCapability BlockCapability(csi::v1::VolumeCapability::AccessMode::Mode mode) {
  csi::v1::VolumeCapability cap;
  cap.mutable_access_mode()->set_mode(mode);
  cap.mutable_block();
  return cap;
}

csi::v1::VolumeCapability CapabilityFor(const std::string& fs_or_block) {
  return fs_or_block == "block" ? BlockCapability() : MountCapability(fs_or_block);
}

}  // namespace blockcsi::testing
