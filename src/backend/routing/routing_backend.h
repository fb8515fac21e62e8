// RoutingBackend: several named VolumeBackends behind one, for
// --backend-config. The ControllerService sees one backend; each call goes
// to the backend its ids or parameters name:
//
//   CreateVolume      the StorageClass parameter `backend=<name>`; without
//                     it, the backend of the content source; else, with
//                     accessibility_requirements, the hosts they allow in
//                     the order placement.h gives, a full one skipped
//                     (RESOURCE_EXHAUSTED or OUT_OF_RANGE from it); else
//                     the default
//   everything else   the id: volume and snapshot ids are "<name>~<id the
//                     backend made>", so routing needs no lookup table
//   GetCapacity       `backend=<name>` of the query's parameters, else,
//                     for a segment (accessible_topology), the largest
//                     free space of the hosts that segment reaches (a
//                     volume lives on one host); else the default backend
//   ListVolumes/-Snapshots  backend after backend in configuration order,
//                     with tokens "<name>~<that backend's token>"
//
// An id whose backend is not configured is NOT_FOUND for lookups and OK for
// deletes and revokes (the volume cannot exist here). An id without "~" is
// taken as the default backend's own id: volumes made before the switch
// from a single --backend to a --backend-config keep working if that
// backend becomes the default. Ids longer than CSI's 128 bytes are refused
// (INTERNAL) rather than handed out. A backend configured with a zone
// (backend_config.h) adds its segment to every record's topology, which the
// controller returns as accessible_topology. Thread-safe: the set of backends is
// fixed at construction and each backend is thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"

namespace blockcsi {

inline constexpr char kBackendIdSeparator = '~';
inline constexpr size_t kMaxCsiIdBytes = 128;

struct NamedBackend {
  std::string name;
  std::shared_ptr<VolumeBackend> backend;
  // The host's segment, e.g. {topology.blockcsi.io/zone: a}; empty: the
  // host is reachable from every node.
  TopologySegments topology = {};
};

class RoutingBackend final : public VolumeBackend {
 public:
  // INVALID_ARGUMENT for no backends, a duplicate or malformed name, or a
  // default that is not one of them.
  static StatusOr<std::shared_ptr<RoutingBackend>> Make(std::vector<NamedBackend> backends,
                                                        const std::string& default_name);

  std::string Name() const override;
  // The least common multiple of the backends' granularities, so that a
  // size the controller rounds fits whichever backend gets the volume.
  uint64_t AllocationGranularity() const override { return granularity_; }
  // The union of the backends' keys; CreateVolume refuses keys the chosen
  // backend does not know.
  std::vector<std::string> SupportedParameters() const override;

  StatusOr<VolumeRecord> CreateVolume(const CreateVolumeSpec& spec) override;
  Status DeleteVolume(const std::string& volume_id) override;
  StatusOr<VolumeRecord> ExpandVolume(const std::string& volume_id, uint64_t new_size_bytes) override;
  StatusOr<VolumeRecord> GrantAccess(const std::string& volume_id, const AccessGrant& grant) override;
  Status RevokeAccess(const std::string& volume_id, const std::string& initiator_iqn) override;
  StatusOr<VolumeRecord> GetVolume(const std::string& volume_id) override;
  StatusOr<VolumeHealth> CheckVolume(const std::string& volume_id) override;
  // Grouped per backend, so that each keeps its one-read-per-page batching.
  std::vector<StatusOr<VolumeHealth>> CheckVolumes(const std::vector<std::string>& volume_ids) override;
  StatusOr<Page<VolumeRecord>> ListVolumes(const std::string& start_token, int max_entries) override;
  StatusOr<uint64_t> AvailableBytes(const CapacityQuery& query) override;
  StatusOr<SnapshotRecord> CreateSnapshot(const std::string& source_volume_id, const std::string& name) override;
  Status DeleteSnapshot(const std::string& snapshot_id) override;
  StatusOr<SnapshotRecord> GetSnapshot(const std::string& snapshot_id) override;
  StatusOr<Page<SnapshotRecord>> ListSnapshots(const std::string& source_volume_id, const std::string& start_token,
                                               int max_entries) override;
  // OK when every backend is; otherwise the sick ones, by name.
  Status SetWrappedDataKey(const std::string& id, const std::string& expected, const std::string& wrapped) override;
  Status Healthy() override;
  // Every host at once (a down one does not delay the others), one answer
  // per host in configuration order, named by its configured name.
  std::vector<HostFences> FenceNode(const std::string& node_id, const std::string& initiator_iqn) override;
  std::vector<HostFences> UnfenceNode(const std::string& node_id) override;
  std::vector<HostFences> ListFences() override;
  bool MayHoldVolume(const std::string& volume_id) const override;
  // The same routes over each backend's view for `secrets` (nullptr when
  // no backend takes secrets).
  std::shared_ptr<VolumeBackend> WithSecrets(const CallSecrets& secrets) override;

  // "<name>~<inner>", for tests and tools.
  static std::string JoinId(std::string_view backend_name, std::string_view inner_id);

 private:
  RoutingBackend(std::vector<NamedBackend> backends, size_t default_index, uint64_t granularity)
      : backends_(std::move(backends)), default_index_(default_index), granularity_(granularity) {}

  struct Routed {
    const NamedBackend* backend;
    std::string inner_id;
  };
  // NOT_FOUND naming `what` and `id` when its backend is not configured.
  StatusOr<Routed> Route(std::string_view what, const std::string& id) const;
  const NamedBackend* Find(std::string_view name) const;
  StatusOr<std::string> Outer(const NamedBackend& backend, const std::string& inner_id) const;
  StatusOr<VolumeRecord> Outer(const NamedBackend& backend, VolumeRecord record) const;
  StatusOr<SnapshotRecord> Outer(const NamedBackend& backend, SnapshotRecord record) const;
  // The backends CreateVolume tries, in order (see the top of this file).
  StatusOr<std::vector<const NamedBackend*>> Candidates(const CreateVolumeSpec& spec, const std::string& what,
                                                        std::string* inner_source_id) const;
  // The backend among all that already holds a volume named `name`, or
  // nullptr: a retried CreateVolume must find the volume an earlier try
  // made on a host it then skipped past.
  StatusOr<const NamedBackend*> HolderOf(const std::string& name) const;
  std::vector<HostFences> EachHost(const std::function<std::vector<HostFences>(VolumeBackend&)>& call);
  // Parses "<name>~<inner token>" into the index of the backend to resume
  // at and its token; ABORTED for anything else.
  StatusOr<std::pair<size_t, std::string>> ParseToken(std::string_view what, const std::string& token) const;

  const std::vector<NamedBackend> backends_;
  const size_t default_index_;
  const uint64_t granularity_;
};

}  // namespace blockcsi
