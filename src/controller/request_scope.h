// RequestScope: the CallScope (backend/call_scope.h) a CSI Controller request
// carries: its secrets, and for CreateVolume and GetCapacity its parameters
// (and GetCapacity's topology). ControllerService installs it with a
// ScopedCall around each call it hands to the backend, so cephx credentials
// from the provisioner / controller-publish / controller-expand secrets reach
// the RBD backend without a parameter on every VolumeBackend method.
// Stateless; secrets are copied, never logged.
#pragma once

#include <map>
#include <string>

#include "backend/call_scope.h"
#include "csi.pb.h"

namespace blockcsi {

CallScope SecretsScope(const google::protobuf::Map<std::string, std::string>& secrets);
CallScope RequestScope(const csi::v1::CreateVolumeRequest& request);
CallScope RequestScope(const csi::v1::GetCapacityRequest& request);

// Any other request: its secrets when it has a secrets field, else nothing.
template <class Request>
CallScope RequestScope(const Request& request) {
  if constexpr (requires { request.secrets(); }) {
    return SecretsScope(request.secrets());
  } else {
    return CallScope{};
  }
}

}  // namespace blockcsi
