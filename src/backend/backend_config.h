// The --backend-config file: several named backends served by one
// controller, one of them the default. An INI file, read by inih:
//
//   # a comment; ";" also starts one, and " ;" ends a value
//   [backend fast]
//   kind = local
//   pool = /var/lib/blockcsi/pool
//   portal = 10.0.0.5:3260
//   portal = 10.0.0.6:3260
//   default = true
//
//   zone = a
//
//   [backend ceph]
//   kind = rbd
//   ceph-conf = /etc/ceph/ceph.conf
//   ceph-user = blockcsi
//   ceph-keyring = /etc/ceph/ceph.client.blockcsi.keyring
//   rbd-pool = kube
//
// A section per backend, "[backend NAME]"; `kind` is local, remote or rbd;
// exactly one backend says `default = true` (optional when there is only
// one); repeatable keys (portal) are given once per value. An rbd backend
// without ceph-user and ceph-keyring takes its cephx credentials from the
// CSI secrets (userID/userKey) of each call. `zone` (any kind) puts the
// backend's host in that topology zone (common/topology.h): its volumes are
// accessible from nodes started with the same --zone, CreateVolume places
// volumes by the CO's accessibility requirements, and GetCapacity answers
// per zone (routing/placement.h).
// Keys are the controller flags of that kind without "--" (local: pool,
// tgt-control-port, portal, iqn-prefix, target, configfs-root,
// reconcile-interval; remote: target-agent, tls-cert, tls-key, tls-ca,
// insecure; rbd: ceph-conf, ceph-user, ceph-keyring, rbd-pool). Names are
// 1-32 of [a-z0-9-], starting and ending alphanumeric; they become the
// prefix of every volume and snapshot id ("<name>~<backend's id>"), so an
// rbd backend's name and pool together may be at most 40 characters
// (CSI ids are at most 128 bytes). Lines are at most 199 characters (inih's
// limit) and an indented line continues the key above it (as another value of
// that key). Pure functions; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "common/host.h"
#include "common/status.h"

namespace blockcsi {

struct NamedBackendOptions {
  std::string name;
  BackendOptions options;
  std::string zone;  // empty: reachable from every node
};

struct BackendConfig {
  std::vector<NamedBackendOptions> backends;  // in file order (ListVolumes' order)
  std::string default_name;
};

// INVALID_ARGUMENT naming `source` (the file), the line and the key.
StatusOr<BackendConfig> ParseBackendConfig(std::string_view text, std::string_view source);
StatusOr<BackendConfig> LoadBackendConfig(const std::string& path);

// True for a well-formed backend name (see above).
bool IsValidBackendName(std::string_view name);

// MakeBackend, except that an rbd backend without ceph_user takes its
// cephx credentials from each call's CSI secrets (rbd_secret_backend.h).
StatusOr<std::shared_ptr<VolumeBackend>> MakeControllerBackend(const BackendOptions& options,
                                                               const std::shared_ptr<Host>& host);

// Every backend of `config` behind one RoutingBackend. Errors name the
// backend.
StatusOr<std::shared_ptr<VolumeBackend>> MakeRoutedBackends(const BackendConfig& config,
                                                            const std::shared_ptr<Host>& host);

}  // namespace blockcsi
