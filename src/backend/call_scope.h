// CallScope: what one CSI call carries that the VolumeBackend interface does
// not — the request's secrets and (CreateVolume, GetCapacity) its
// parameters — made visible to backend code that runs on the handler's
// thread while that call lasts. Set by ControllerService (one RAII
// ScopedCall per RPC, controller/request_scope.h); read by backends that
// need it (RbdSecretBackend: the cephx credentials; RoutingBackend:
// GetCapacity's `backend` and segment).
//
// Why a per-thread scope rather than a parameter: the gRPC server is
// synchronous, so a call's handler, the ControllerService and the backend
// all run on one thread, start to finish; passing secrets explicitly would
// change every VolumeBackend method and every backend for the benefit of
// one, and the controller service would have to know which calls a backend
// needs credentials for. Thread-safety: each thread sees only its own scope;
// nothing is shared. Secrets in a scope are never logged by anything here.
#pragma once

#include <map>
#include <string>

#include "common/topology.h"

namespace blockcsi {

struct CallScope {
  std::map<std::string, std::string> secrets;     // csi_secret: never log
  std::map<std::string, std::string> parameters;  // StorageClass parameters
  // GetCapacity's accessible_topology: the segment whose capacity is asked
  // (RoutingBackend answers it from the hosts that segment reaches).
  TopologySegments accessible_topology = {};
};

// The scope of the call running on this thread, or nullptr outside one.
const CallScope* CurrentCallScope();

// Installs `scope` for this thread until destruction (nests: the previous
// scope comes back).
class ScopedCall {
 public:
  explicit ScopedCall(CallScope scope);
  ~ScopedCall();
  ScopedCall(const ScopedCall&) = delete;
  ScopedCall& operator=(const ScopedCall&) = delete;

 private:
  CallScope scope_;
  const CallScope* previous_;
};

}  // namespace blockcsi
