// VolumeBackend: the storage side that the CSI controller drives — a pool of
// volumes (tgt/LIO pool directory, or an RBD pool) and their exports. One
// interface, reached in-process (--backend local) or through the agent
// (--backend remote, proto/target.proto). Implementations are thread-safe
// and every operation is idempotent; they guard their own per-volume state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/chap.h"
#include "common/status.h"
#include "common/topology.h"

namespace blockcsi {

struct ContentSource {
  enum class Kind { kNone, kSnapshot, kVolume };
  Kind kind = Kind::kNone;
  std::string id;
  bool operator==(const ContentSource&) const = default;
};

// CreateVolume's accessibility_requirements: the volume must be reachable
// from at least one requisite segment (none: from anywhere), and
// preferably from the preferred ones, in order. A backend of one storage
// host ignores them (its host is where it is); the routing backend picks a
// host with them (routing/placement.h).
struct AccessibilityRequirements {
  std::vector<TopologySegments> requisite;
  std::vector<TopologySegments> preferred;
  bool empty() const { return requisite.empty() && preferred.empty(); }
};

struct CreateVolumeSpec {
  std::string name;         // the CO's name: the idempotency key
  uint64_t size_bytes = 0;  // already rounded to AllocationGranularity()
  ContentSource source;
  // Backend parameters from the StorageClass (already validated by the
  // controller against the backend's SupportedParameters()).
  std::map<std::string, std::string> parameters;
  AccessibilityRequirements accessibility = {};
};

// INVALID_ARGUMENT naming the volume when `spec.source` is not one a backend
// can act on: a kind outside the enum (a caller's cast), a source id without
// a kind, or a kind without an id. Checked by every backend before it makes
// anything, so that such a request never becomes a blank volume whose
// record keeps a source id.
Status CheckContentSource(const CreateVolumeSpec& spec);

// The csi_secret fields of one CSI call (e.g. the cephx userID and userKey
// of a provisioner secret). Never logged, persisted or put in a message.
struct CallSecrets {
  std::map<std::string, std::string> values;
};

// What GetCapacity asks about: the StorageClass parameters (the routing
// backend reads `backend`) and the segment whose capacity is wanted (empty:
// anywhere).
struct CapacityQuery {
  std::map<std::string, std::string> parameters;
  TopologySegments accessible_topology = {};
};

// One node's access to a volume. `capability` is an opaque fingerprint of the
// access mode and access type the controller published with, kept so that a
// second publish to the same node can be told apart (same → OK,
// different → ALREADY_EXISTS).
struct AccessGrant {
  std::string initiator_iqn;
  std::string node_id;
  bool read_only = false;
  std::string capability;
  ChapCredentials chap;  // enabled() → the target requires CHAP for this volume
};

// What is persisted of a grant: never the CHAP secret.
struct GrantRecord {
  std::string initiator_iqn;
  std::string node_id;
  bool read_only = false;
  std::string capability;
  bool chap = false;
};

struct VolumeRecord {
  std::string id;
  std::string name;
  uint64_t size_bytes = 0;
  int64_t created_unix_seconds = 0;
  ContentSource source;
  std::map<std::string, std::string> parameters;
  // Export: how a node reaches the volume and verifies it is the right LUN.
  std::vector<std::string> portals;  // "host:port"
  std::string target_iqn;
  int lun = 1;
  std::string serial;  // VPD 0x80 unit serial
  std::string wwn;     // NAA identifier from VPD 0x83, lower-case hex
  std::string transport = "iscsi";
  // Transport-specific export fields beyond the iSCSI ones above (rbd: pool,
  // image, image id, monitors, cephx user). Never a secret.
  std::map<std::string, std::string> transport_params;
  std::vector<GrantRecord> grants;
  std::map<std::string, std::string> topology;  // accessible_topology segment
  // What the volume really takes on the storage (a sparse image's
  // allocated blocks), as read when the record was fetched; never stored.
  // 0: not known (a backend that does not say).
  uint64_t allocated_bytes = 0;
  // An encrypted volume's data key, wrapped under its class's key-encryption
  // key with this id bound in (contract/volume_key.h). Only ever the wrapped
  // form: a backend never sees a plain key or a KEK. Empty: not encrypted,
  // or CreateVolume's second step (SetWrappedDataKey) has not run yet.
  std::string wrapped_data_key;
};

struct SnapshotRecord {
  std::string id;
  std::string name;
  std::string source_volume_id;
  uint64_t size_bytes = 0;
  int64_t created_unix_seconds = 0;
  bool ready_to_use = true;
  // The source volume's wrapped data key as it was when the snapshot was
  // taken (bound to source_volume_id, not to the snapshot's id): a restore
  // opens with its source's key even once that volume is gone. Empty: the
  // source was not encrypted.
  std::string wrapped_data_key;
};

template <typename T>
struct Page {
  std::vector<T> items;
  std::string next_token;  // empty: no more
};

// Whether a volume is fully in place (image present, export live).
struct VolumeHealth {
  bool abnormal = false;
  std::string message;
};

// Fencing: a node cut off from a storage host. Fencing revokes every grant
// the node holds there (ACL first, then its sessions: RevokeAccess), closes
// any session its initiator still has on any target, cuts off its Ceph
// clients (blocklist), and records the fence durably on that host before
// any of it, so that until UnfenceNode the host refuses every GrantAccess
// to the node (FAILED_PRECONDITION) and its reconcile never puts the
// node's initiator back in an ACL, whatever grant record a crash left.
struct FencedGrant {
  std::string volume_id;
  GrantRecord grant;
};
struct FenceRecord {
  std::string node_id;
  std::string initiator_iqn;
  int64_t since_unix_seconds = 0;  // the first fence; fencing again keeps it
  std::vector<FencedGrant> held;   // what the node held when it was fenced
};
// "1970-01-01T00:00:00Z" of a fence's since_unix_seconds.
std::string FenceTime(int64_t unix_seconds);
// The one message a grant to a fenced node is refused with, on every backend
// (FAILED_PRECONDITION): it names the node, the fence and the way out.
std::string FencedMessage(const FenceRecord& fence, const std::string& volume_id);

// The durable form of a fence record (JSON), shared by the backends that
// store one; INVALID_ARGUMENT for text that is not one.
std::string FenceRecordToJson(const FenceRecord& record);
StatusOr<FenceRecord> FenceRecordFromJson(std::string_view text);

// One storage host's answer to a fencing call: `host` is the backend's
// name (the routing backend's configured name of each host); `status` OK
// when the call was done there; `fences` its records (FenceNode: the one
// of that node; ListFences: all of them).
struct HostFences {
  std::string host;
  Status status;
  std::vector<FenceRecord> fences;
};

// An id that names nothing of a backend's, whatever its form (another
// backend's, malformed, deleted), is NOT_FOUND for every lookup and OK for
// deletes and revokes: never INVALID_ARGUMENT, which callers report as the
// caller's mistake.
class VolumeBackend {
 public:
  virtual ~VolumeBackend() = default;

  virtual std::string Name() const = 0;
  // Sizes are multiples of this (e.g. 1 MiB).
  virtual uint64_t AllocationGranularity() const = 0;
  // StorageClass parameter keys this backend understands.
  virtual std::vector<std::string> SupportedParameters() const = 0;

  // Same name and size and source → the existing volume; same name with
  // another size or source → ALREADY_EXISTS; missing source → NOT_FOUND.
  virtual StatusOr<VolumeRecord> CreateVolume(const CreateVolumeSpec& spec) = 0;
  // Unknown id → OK. Still granted to a node → FAILED_PRECONDITION.
  virtual Status DeleteVolume(const std::string& volume_id) = 0;
  // Grows image and LUN; never shrinks (OUT_OF_RANGE). Same size → OK.
  virtual StatusOr<VolumeRecord> ExpandVolume(const std::string& volume_id, uint64_t new_size_bytes) = 0;
  // Adds (or confirms) the grant; ACL by initiator name only.
  virtual StatusOr<VolumeRecord> GrantAccess(const std::string& volume_id, const AccessGrant& grant) = 0;
  // Removes the grant and closes that initiator's live sessions on the
  // target (fencing). Unknown volume or grant → OK.
  virtual Status RevokeAccess(const std::string& volume_id, const std::string& initiator_iqn) = 0;
  virtual StatusOr<VolumeRecord> GetVolume(const std::string& volume_id) = 0;
  virtual StatusOr<VolumeHealth> CheckVolume(const std::string& volume_id) = 0;
  // CheckVolume of each id, one result per id in order: what ListVolumes
  // reports for a page. A backend that can read its live state once for
  // many volumes overrides it (local: one `tgtadm --op show` per page
  // instead of one per volume).
  virtual std::vector<StatusOr<VolumeHealth>> CheckVolumes(const std::vector<std::string>& volume_ids) {
    std::vector<StatusOr<VolumeHealth>> out;
    out.reserve(volume_ids.size());
    for (const auto& id : volume_ids) out.push_back(CheckVolume(id));
    return out;
  }
  // Stable order; `start_token` from a previous page's next_token
  // (an unknown token → ABORTED); max_entries 0 means no limit.
  virtual StatusOr<Page<VolumeRecord>> ListVolumes(const std::string& start_token, int max_entries) = 0;
  virtual StatusOr<uint64_t> AvailableBytes(const CapacityQuery& query) = 0;

  // Same name and source → the existing snapshot; same name, other source →
  // ALREADY_EXISTS; missing source volume → NOT_FOUND.
  virtual StatusOr<SnapshotRecord> CreateSnapshot(const std::string& source_volume_id, const std::string& name) = 0;
  virtual Status DeleteSnapshot(const std::string& snapshot_id) = 0;  // unknown → OK
  virtual StatusOr<SnapshotRecord> GetSnapshot(const std::string& snapshot_id) = 0;
  // Filtered by source volume when given.
  virtual StatusOr<Page<SnapshotRecord>> ListSnapshots(const std::string& source_volume_id,
                                                       const std::string& start_token, int max_entries) = 0;

  // Stores `wrapped` as the wrapped data key of the volume or snapshot `id`
  // when its current one is `expected` ("" for none): a compare-and-set, so
  // that a retried CreateVolume never gives a volume a second data key and a
  // rotation never overwrites a key it did not read. Already `wrapped` → OK
  // (a retry); another key → ABORTED (someone else changed it: re-read).
  // Durable on return. Unknown id → NOT_FOUND. The text is stored as given.
  virtual Status SetWrappedDataKey(const std::string& id, const std::string& expected, const std::string& wrapped) = 0;

  // OK when the backend can serve (pool readable, target daemon answering).
  virtual Status Healthy() = 0;

  // Fences `node_id` (see FenceRecord): one answer per storage host, in a
  // stable order. Idempotent; a retry completes a fence a crash or a
  // failure cut short. A host answering non-OK may still hold grants of
  // the node: the fence is not complete until every host answers OK.
  virtual std::vector<HostFences> FenceNode(const std::string& node_id, const std::string& initiator_iqn) = 0;
  // Lifts the fence record (grants are not given back: the node is
  // published again by the CO). No fence → OK.
  virtual std::vector<HostFences> UnfenceNode(const std::string& node_id) = 0;
  virtual std::vector<HostFences> ListFences() = 0;

  // The backend that serves the calls of one CSI request carrying
  // `secrets`, for the length of that request. A backend with an identity
  // of its own serves every request alike: it answers nullptr (the
  // default), meaning "use me". One that acts with its callers'
  // credentials (rbd without --ceph-user) answers a view bound to them;
  // the view's operations fail when those credentials cannot connect.
  virtual std::shared_ptr<VolumeBackend> WithSecrets(const CallSecrets& /*secrets*/) { return nullptr; }

  // Whether `volume_id` has the shape of an id this backend makes. Pure: no
  // I/O, no lock. The controller asks it before any call that gets only a
  // volume id (DeleteVolume, ControllerUnpublish, ControllerExpand), so that
  // a static PV's handle never reaches a backend; and it refuses a static
  // PV whose handle could be one of ours. The default (true), for a backend
  // that cannot tell: it is asked, and answers OK for an id it does not know.
  virtual bool MayHoldVolume(const std::string& /*volume_id*/) const { return true; }
};

}  // namespace blockcsi
