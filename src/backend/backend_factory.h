// MakeBackend: builds the VolumeBackend the controller drives, from flags.
// `local` hosts the pool and the tgt exporter in-process (and starts its
// reconcile loop); `remote` is a gRPC client of a blockcsi-target agent;
// `rbd` a Ceph pool, when the build has the RBD backend.
// Thread-safe (stateless).
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/backend_options.h"
#include "common/host.h"
#include "common/status.h"

namespace blockcsi {

// INVALID_ARGUMENT naming the flag when the options do not fit the kind;
// UNAVAILABLE when the pool or the agent cannot be reached. `host`: the
// machine a local backend's target daemon runs on (tgtd's management socket
// is looked at through it).
StatusOr<std::shared_ptr<VolumeBackend>> MakeBackend(const BackendOptions& options, const std::shared_ptr<Host>& host);

}  // namespace blockcsi
