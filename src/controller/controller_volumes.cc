#include "controller/controller_service.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <limits>
#include <set>

#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/mkfs_mount_options.h"
#include "contract/chap_rules.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "contract/static_volume.h"
#include "controller/capabilities.h"
#include "controller/controller_internal.h"
#include "controller/parameters.h"

// CreateVolume, DeleteVolume and ControllerExpandVolume.
namespace blockcsi {

using namespace controller_internal;  // NOLINT(google-build-using-namespace): the controller_*.cc files share these
                                      // helpers

// ---- CreateVolume -------------------------------------------------------
// Idempotent by name: the backend returns the existing volume for the same
// name, size and source (our rounding is deterministic, so a retry computes
// the same size); another size or source → ALREADY_EXISTS.
// accessible_topology is the backend's (e.g. the zone of the storage host
// that holds it). accessibility_requirements go to the backend: the routing
// backend of a --backend-config chooses a host in an allowed zone with them
// (RESOURCE_EXHAUSTED when none is allowed or none has room); a single
// backend is one host, reachable from every node unless it says otherwise.
grpc::Status ControllerService::CreateVolume(grpc::ServerContext*, const csi::v1::CreateVolumeRequest* request,
                                             csi::v1::CreateVolumeResponse* response) {
  return ToGrpcStatus(Provision(*request, response));
}

namespace {

// The snapshot or volume a new volume starts from; kind kNone for an empty one.
StatusOr<ContentSource> ParseContentSource(const csi::v1::CreateVolumeRequest& request, const std::string& what) {
  ContentSource source;
  if (request.has_volume_content_source()) {
    const auto& cs = request.volume_content_source();
    if (cs.has_snapshot()) {
      source = {ContentSource::Kind::kSnapshot, cs.snapshot().snapshot_id()};
      if (source.id.empty()) return InvalidArgument(what + ": content source snapshot_id is empty");
    } else if (cs.has_volume()) {
      source = {ContentSource::Kind::kVolume, cs.volume().volume_id()};
      if (source.id.empty()) return InvalidArgument(what + ": content source volume_id is empty");
    } else {
      return InvalidArgument(what + ": volume_content_source has neither a snapshot nor a volume");
    }
  }
  return source;
}

// The size of the source a volume is made from (0 for none), as its pod
// sees it: the new volume is at least that big; and its wrapped data key, which an encrypted
// clone or restore opens with. A source that is gone is NOT_FOUND.
StatusOr<SourceFacts> SourceFactsOf(VolumeBackend& backend, const ContentSource& source, const std::string& what) {
  SourceFacts facts;
  facts.kind = source.kind;
  facts.id = source.id;
  if (source.kind == ContentSource::Kind::kSnapshot) {
    auto snapshot = backend.GetSnapshot(source.id);
    if (!snapshot.ok()) {
      if (IsMissing(snapshot.status())) {
        return NotFound(what + ": source snapshot " + Quoted(source.id) + " does not exist");
      }
      return Named(snapshot.status(), "snapshot", source.id);
    }
    facts.bytes = UsableBytes(snapshot->size_bytes, HeaderBytes(!snapshot->wrapped_data_key.empty()));
    facts.wrapped_data_key = snapshot->wrapped_data_key;
    facts.key_volume_id = snapshot->source_volume_id;
  } else if (source.kind == ContentSource::Kind::kVolume) {
    auto volume = backend.GetVolume(source.id);
    if (!volume.ok()) {
      if (IsMissing(volume.status())) {
        return NotFound(what + ": source volume " + Quoted(source.id) + " does not exist");
      }
      return Named(volume.status(), "volume", source.id);
    }
    facts.bytes = UsableBytes(volume->size_bytes, HeaderBytes(*volume));
    facts.wrapped_data_key = volume->wrapped_data_key;
    facts.key_volume_id = volume->id;
  }
  return facts;
}

}  // namespace

Status ControllerService::Provision(const csi::v1::CreateVolumeRequest& request,
                                    csi::v1::CreateVolumeResponse* response) {
  const std::shared_ptr<VolumeBackend> backend = BackendFor(request.secrets());
  const std::string& name = request.name();
  if (name.empty()) return InvalidArgument("CreateVolume: name is required");
  const std::string what = "volume name " + Quoted(name);
  if (request.volume_capabilities().empty()) {
    return InvalidArgument(what + ": volume_capabilities are required");
  }
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeParameters params,
                            ParseVolumeParameters({request.parameters().begin(), request.parameters().end()},
                                                  backend_->SupportedParameters()));
  BLOCKCSI_ASSIGN_OR_RETURN(std::optional<SecretBytes> kek, ClassKek(params, request.secrets(), name));
  for (const auto& capability : request.volume_capabilities()) {
    BLOCKCSI_RETURN_IF_ERROR(ValidateCapabilityAndFsType(capability, what));
    if (capability.has_mount() && !capability.mount().fs_type().empty() && !params.fs_type.empty() &&
        capability.mount().fs_type() != params.fs_type) {
      return InvalidArgument(what + ": capability fs_type \"" + capability.mount().fs_type() +
                             "\" disagrees with parameter fsType \"" + params.fs_type + "\"");
    }
  }
  // The StorageClass may leave fsType to the PV's capability.
  if (params.fs_type.empty()) {
    for (const auto& capability : request.volume_capabilities()) {
      if (capability.has_mount() && !capability.mount().fs_type().empty()) {
        params.fs_type = capability.mount().fs_type();
        params.persisted[storage_class::kFsType] = params.fs_type;
        break;
      }
    }
  }
  BLOCKCSI_RETURN_IF_ERROR(ValidateCapacityRange(request.capacity_range(), what));
  bool mounted = std::any_of(request.volume_capabilities().begin(), request.volume_capabilities().end(),
                             [](const auto& capability) { return capability.has_mount(); });
  // The filesystem the node will make: the class's, else the node's default.
  const std::string fs_type = params.fs_type.empty() ? std::string(kDefaultFsType) : params.fs_type;
  if (!params.mkfs_options.empty()) {
    // Checked here, where a bad StorageClass fails its first PVC, rather
    // than at every NodeStageVolume of a volume that then never mounts.
    // The node checks the same rules again before it runs mkfs.
    BLOCKCSI_RETURN_IF_ERROR(ParseMkfsOptions("name " + Quoted(name), fs_type, params.mkfs_options).status());
  }
  const uint64_t fs_minimum = mounted && options_.fs_minimum_bytes ? options_.fs_minimum_bytes(fs_type) : 0;

  BLOCKCSI_ASSIGN_OR_RETURN(ContentSource source, ParseContentSource(request, what));

  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, name_ops_.Acquire(name, "CreateVolume"));

  BLOCKCSI_ASSIGN_OR_RETURN(SourceFacts source_facts, SourceFactsOf(*backend, source, what));
  BLOCKCSI_RETURN_IF_ERROR(CheckSourceEncryption(source_facts, kek ? &*kek : nullptr, name));
  // An encrypted volume's device also holds its LUKS2 header: the range
  // counts what the pod gets (the opened mapping), so the device is made
  // that much bigger, and limit_bytes bounds the mapping, not the device.
  const uint64_t header = HeaderBytes(params.encrypted);
  BLOCKCSI_ASSIGN_OR_RETURN(uint64_t size,
                            ChooseVolumeSize(request.capacity_range(), backend_->AllocationGranularity(),
                                             options_.default_volume_bytes, source_facts.bytes, what, header));
  BLOCKCSI_ASSIGN_OR_RETURN(size, RaiseToFilesystemMinimum(size, fs_minimum, fs_type, request.capacity_range(),
                                                           backend_->AllocationGranularity(), what, header));

  CreateVolumeSpec spec{name, size, source, params.persisted};
  // Where the volume must be (and should be) reachable from; the routing
  // backend places it among its hosts with them (backend/routing/placement.h).
  for (const auto& t : request.accessibility_requirements().requisite()) {
    spec.accessibility.requisite.emplace_back(t.segments().begin(), t.segments().end());
  }
  for (const auto& t : request.accessibility_requirements().preferred()) {
    spec.accessibility.preferred.emplace_back(t.segments().begin(), t.segments().end());
  }
  auto record = backend->CreateVolume(spec);
  if (!record.ok()) return Named(record.status(), "volume name", name);
  BLOCKCSI_ASSIGN_OR_RETURN(*record,
                            KeyNewVolume(*backend, std::move(*record), kek ? &*kek : nullptr, source_facts, name));
  FillVolume(*record, response->mutable_volume());
  LogInfo("volume created", {{"volume", record->id}, {"name", name}, {"bytes", std::to_string(record->size_bytes)}});
  return OkStatus();
}

// ---- DeleteVolume -------------------------------------------------------
// Idempotent: an unknown id (never made, or already deleted) → OK. Still
// granted to a node → FAILED_PRECONDITION naming the nodes; the
// external-attacher unpublishes first and the provisioner retries.
grpc::Status ControllerService::DeleteVolume(grpc::ServerContext*, const csi::v1::DeleteVolumeRequest* request,
                                             csi::v1::DeleteVolumeResponse*) {
  return ToGrpcStatus(Deprovision(*request));
}

Status ControllerService::Deprovision(const csi::v1::DeleteVolumeRequest& request) {
  const std::shared_ptr<VolumeBackend> backend = BackendFor(request.secrets());
  const std::string& id = request.volume_id();
  if (id.empty()) return InvalidArgument("DeleteVolume: volume_id is required");
  // An id no backend makes (a static PV's handle among them) names nothing
  // of ours: OK, as for any unknown id, and no backend is asked.
  if (!backend_->MayHoldVolume(id)) {
    LogInfo("DeleteVolume of an id no backend makes (static PV?): nothing to delete", {{"volume", id}});
    return OkStatus();
  }
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, volume_ops_.Acquire(id, "DeleteVolume"));
  auto record = backend->GetVolume(id);
  if (!record.ok()) {
    if (IsMissing(record.status())) return OkStatus();
    return Named(record.status(), "volume", id);
  }
  if (!record->grants.empty()) {
    std::string nodes;
    for (const auto& n : PublishedNodeIds(*record)) nodes += (nodes.empty() ? "" : ", ") + n;
    return FailedPrecondition("volume " + Quoted(id) + " is still published to node(s) " + nodes +
                              "; unpublish it first");
  }
  Status st = backend->DeleteVolume(id);
  if (IsMissing(st)) return OkStatus();
  BLOCKCSI_RETURN_IF_ERROR(Named(st, "volume", id));
  LogInfo("volume deleted", {{"volume", id}});
  return OkStatus();
}

// ---- ControllerExpandVolume ---------------------------------------------
// Idempotent: a volume already at least required_bytes (and within the
// limit) → OK with its size. Never shrinks: a limit below the current size →
// OUT_OF_RANGE. Online: a published volume grows too (the node rescans).
grpc::Status ControllerService::ControllerExpandVolume(grpc::ServerContext*,
                                                       const csi::v1::ControllerExpandVolumeRequest* request,
                                                       csi::v1::ControllerExpandVolumeResponse* response) {
  return ToGrpcStatus(Expand(*request, response));
}

Status ControllerService::Expand(const csi::v1::ControllerExpandVolumeRequest& request,
                                 csi::v1::ControllerExpandVolumeResponse* response) {
  const std::shared_ptr<VolumeBackend> backend = BackendFor(request.secrets());
  const std::string& id = request.volume_id();
  if (id.empty()) return InvalidArgument("ControllerExpandVolume: volume_id is required");
  const std::string what = "volume " + Quoted(id);
  if (!request.has_capacity_range()) return InvalidArgument(what + ": capacity_range is required");
  const auto& range = request.capacity_range();
  BLOCKCSI_RETURN_IF_ERROR(ValidateCapacityRange(range, what));
  if (range.required_bytes() == 0) return InvalidArgument(what + ": capacity_range.required_bytes is required");
  if (request.has_volume_capability()) {
    BLOCKCSI_RETURN_IF_ERROR(ValidateCapabilityAndFsType(request.volume_capability(), what));
  }
  // Block volumes have nothing for the node to grow; a mount (or unknown)
  // volume has a filesystem the node must grow.
  const bool node_expansion = !(request.has_volume_capability() && IsBlock(request.volume_capability()));
  // A static PV's handle (an id no backend makes): its LUN is grown by the
  // array's admin, so there is nothing to do here and no backend is asked.
  // The node checks the device really is that big (OUT_OF_RANGE otherwise)
  // and grows the filesystem, so node expansion is asked for even for a
  // raw block volume. (A mistyped handle of ours still has our form and is
  // NOT_FOUND below.)
  if (!backend_->MayHoldVolume(id)) {
    LogInfo("ControllerExpandVolume of a static volume: nothing to grow here, the node checks the LUN",
            {{"volume", id}, {"bytes", std::to_string(range.required_bytes())}});
    response->set_capacity_bytes(range.required_bytes());
    response->set_node_expansion_required(true);
    return OkStatus();
  }

  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, volume_ops_.Acquire(id, "ControllerExpandVolume"));
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeRecord record, GetVolumeRecord(*backend, id));
  // As at CreateVolume, the range counts what the pod gets: an encrypted
  // volume's device grows to the bytes asked for plus its LUKS2 header (the
  // node's cryptsetup resize then gives the mapping all but the header).
  const uint64_t header = HeaderBytes(record);
  const uint64_t usable = UsableBytes(record.size_bytes, header);
  const uint64_t limit = static_cast<uint64_t>(range.limit_bytes());
  if (limit > 0 && usable > limit) {
    return OutOfRange(what + " is " + std::to_string(usable) + " bytes, above limit_bytes " + std::to_string(limit) +
                      ": volumes never shrink");
  }
  uint64_t size = usable;
  if (usable < static_cast<uint64_t>(range.required_bytes())) {
    BLOCKCSI_ASSIGN_OR_RETURN(uint64_t device_bytes,
                              ChooseVolumeSize(range, backend_->AllocationGranularity(), 0, 0, what, header));
    auto grown = backend->ExpandVolume(id, device_bytes);
    if (!grown.ok()) {
      if (IsMissing(grown.status())) return NotFound(what + " does not exist");
      return Named(grown.status(), "volume", id);
    }
    size = UsableBytes(grown->size_bytes, header);
    LogInfo("volume expanded", {{"volume", id}, {"bytes", std::to_string(grown->size_bytes)}});
  }
  response->set_capacity_bytes(static_cast<int64_t>(size));
  response->set_node_expansion_required(node_expansion);
  return OkStatus();
}

}  // namespace blockcsi
