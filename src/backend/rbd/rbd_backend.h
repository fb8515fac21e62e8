// RbdBackend: the VolumeBackend for Ceph RBD — one pool, driven through
// librados/librbd (no `rbd`/`ceph` CLI on any path). Thread-safe: one rados
// connection and pool context shared by all calls (librados handles are
// thread-safe); mutating calls on one image are serialized by a per-image
// mutex, so the metadata read-modify-write cycles below cannot interleave.
//
// Identifiers (strictly parsed; anything else is "not one of ours"):
//   volume   rbd.<pool>.csi-vol-<32 hex>                  image csi-vol-<32 hex>
//   snapshot rbd.<pool>.csi-vol-<32 hex>@csi-snap-<32 hex>
// The hex is the first 128 bits of SHA-256 of the CO's name, so CreateVolume
// and CreateSnapshot are idempotent without any lookup table, and a volume id
// routes to its pool and image without one either. Pool names are limited to
// [A-Za-z0-9_-]{1,40} so that every id stays within CSI's 128 bytes.
//
// What is kept where (image metadata, `rbd image-meta`, keys "blockcsi.*"):
//   blockcsi.name            the CO's volume name (written last: commit mark)
//   blockcsi.source          "snapshot:<id>" | "volume:<id>" | absent
//   blockcsi.param.<key>     the StorageClass parameters the controller persists
//   blockcsi.grant.<node>    a GrantRecord (JSON): the node it is published to
//   blockcsi.wrapped_data_key  an encrypted volume's data key, wrapped (never
//                            plain); its snapshots and their restores use it
//   blockcsi.fence.<node>    client addresses we blocklisted for that node
//   blockcsi.client.<node>   optional, written by the node plugin: the rados
//                            client address(es) it opened the image with
// and in the pool's metadata (`rbd pool-meta`):
//   blockcsi.snap.<csi-snap-…>  {"volume","name"}: which image holds the CO's
//                               snapshot, so a name reused on another volume
//                               is ALREADY_EXISTS.
// No cephx key is ever logged, put in metadata, an error or a VolumeRecord.
//
// Fencing (RevokeAccess): the node's clients are blocklisted (`osd blocklist
// add <addr>`, with an expiry as a backstop) and their exclusive lock broken,
// so a node that lost its VolumeAttachment cannot keep writing. Which
// watchers are the node's: the addresses it recorded under blockcsi.client.
// <node>, and — when no other node holds a grant afterwards — every watcher
// of the image but ourselves. A blocklist entry names one client instance
// (ip:port/nonce), so a fresh client on the same node is unaffected; the
// node plugin must therefore use one rados connection per attachment, or a
// fence would cut all of that node's volumes. Entries are removed again
// (`osd blocklist rm`) on the next GrantAccess to the same node once none of
// the fenced clients is still a watcher, and when the image is deleted;
// otherwise they expire after `fence_expiry`.
//
// Snapshots are RBD snapshots, protected at creation (clone v1 needs it; v2
// ignores it). Restores are clones of that snapshot, left unflattened (fast);
// DeleteSnapshot flattens the snapshot's children first, so a snapshot can
// always be deleted. Clones of a volume go through a temporary snapshot
// (csi-tmp-…) and are flattened at once so the temporary snapshot can go.
// A volume with snapshots cannot be deleted (FAILED_PRECONDITION naming them),
// as CSI allows for snapshots that are not independent of their volume.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "common/status.h"
#include "contract/publish_context.h"

namespace blockcsi {

struct RbdBackendOptions {
  std::string ceph_conf;  // ceph.conf: monitors and client settings
  std::string ceph_user;  // cephx id without "client." (e.g. "blockcsi")
  // Exactly one of keyring (a file) and key (e.g. from a CSI secret) may be
  // set; neither → whatever ceph_conf's keyring setting finds. `key` is
  // secret: kept only inside librados.
  std::string keyring;
  std::string key;
  std::string pool;
  std::map<std::string, std::string> topology;
  // How long a fence (blocklist entry) lives if nothing removes it earlier.
  std::chrono::seconds fence_expiry{std::chrono::hours(24)};
  // librados mon/osd op timeout, so that no call hangs on a sick cluster.
  std::chrono::seconds op_timeout{std::chrono::seconds(30)};
};

// Keys of the publish transport_params (VolumeRecord) for transport "rbd".
// The names are the publish_context schema's (contract/publish_context.h).
namespace rbd_params {
inline constexpr const char* kPool = publish_context::kRbdPool;
inline constexpr const char* kImage = publish_context::kRbdImage;
inline constexpr const char* kImageId = publish_context::kRbdImageId;  // guards against a re-created image
inline constexpr const char* kMonitors = publish_context::kCephMonitors;
inline constexpr const char* kUser = publish_context::kCephUser;
}  // namespace rbd_params

// Keys of CSI secrets carrying cephx credentials.
namespace rbd_secret_keys {
inline constexpr const char* kUserId = secret_keys::kCephUserId;
inline constexpr const char* kUserKey = secret_keys::kCephUserKey;
}  // namespace rbd_secret_keys

// Fills options.ceph_user/key from CSI secrets when they carry both keys;
// INVALID_ARGUMENT naming the missing key (never a value) when only one is
// there; secrets without either leave the options as they are.
Status ApplyRbdSecrets(const std::map<std::string, std::string>& secrets, RbdBackendOptions* options);

// Connects (UNAVAILABLE when the cluster or pool cannot be reached;
// INVALID_ARGUMENT naming the option when the options are wrong).
StatusOr<std::shared_ptr<VolumeBackend>> MakeRbdBackend(const RbdBackendOptions& options);

// Exposed for tests and for routing: the image a volume id names, or nullopt
// for anything that is not a well-formed rbd volume id.
struct RbdVolumeRef {
  std::string pool;
  std::string image;
};
std::optional<RbdVolumeRef> ParseRbdVolumeId(std::string_view id);

}  // namespace blockcsi
