// RbdSecretBackend: the rbd backend for a controller without a cephx
// identity of its own (no --ceph-user/--ceph-keyring). Each call connects
// with the cephx credentials of its CSI secrets — the provisioner,
// controller-publish and controller-expand secrets with keys userID and
// userKey, which the controller binds to each request with WithSecrets
// (backend.h) — and is then served by an RbdBackend on that connection. Connections stay open in
// memory, keyed by the user and a SHA-256 digest of the key (the key itself
// is no map key, no log field, no file), at most kMaxConnections of them,
// least recently used dropped first. A call without such a secret
// (ListVolumes, GetCapacity, ControllerGetVolume carry none) uses the most
// recently used connection, and FAILED_PRECONDITION when there is none yet.
// Healthy() is OK until the first connection: a controller waiting for its
// first secret is ready (the sidecars only call once Probe says so).
// Thread-safe.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/rbd/rbd_backend.h"
#include "common/status.h"

namespace blockcsi {

inline constexpr size_t kMaxRbdSecretConnections = 16;

// `options` without ceph_user, keyring or key (INVALID_ARGUMENT naming the
// flag otherwise). Connects nothing yet.
StatusOr<std::shared_ptr<VolumeBackend>> MakeRbdSecretBackend(const RbdBackendOptions& options);

}  // namespace blockcsi
