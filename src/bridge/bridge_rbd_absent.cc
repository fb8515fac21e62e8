// Bridge::OpenRbd for blockcsi-bridge, the iSCSI-only program: librbd and
// librados (and the ~20 libraries they pull in) stay out of every iSCSI
// bridge. The plugin starts blockcsi-bridge-rbd for RBD volumes.
#include "bridge/bridge_internal.h"

namespace blockcsi::bridge_internal {

StatusOr<std::unique_ptr<BridgeTransport>> Bridge::OpenRbd(const std::string&) {
  return FailedPrecondition("volume \"" + args_.volume_id +
                            "\": this blockcsi-bridge serves iSCSI only; RBD volumes need blockcsi-bridge-rbd");
}

}  // namespace blockcsi::bridge_internal
