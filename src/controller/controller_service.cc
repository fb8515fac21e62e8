#include "controller/controller_service.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <limits>
#include <set>

#include "attach/chap_rules.h"
#include "attach/initiator.h"
#include "attach/publish_context.h"
#include "attach/static_volume.h"
#include "common/fs_options.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "controller/capabilities.h"
#include "controller/parameters.h"

namespace blockcsi {
namespace {

std::string Quoted(std::string_view id) { return "\"" + std::string(id) + "\""; }

// Backends name the object in their messages; when one does not, the
// message still has to say which volume/snapshot/node it is about.
Status Named(const Status& status, std::string_view kind, const std::string& id) {
  if (status.ok() || status.message().find(id) != std::string::npos) return status;
  return status.WithContext(std::string(kind) + " " + Quoted(id));
}

// For a call keyed only by an id the CO gave us, INVALID_ARGUMENT from the
// backend means the id is not one it could ever have made (backends validate
// their id format before touching anything): that volume or snapshot does
// not exist, which the spec answers with NOT_FOUND (or OK for deletes).
bool IsMissing(const Status& status) {
  return status.code() == StatusCode::kNotFound || status.code() == StatusCode::kInvalidArgument;
}

uint64_t RoundUp(uint64_t value, uint64_t granularity) {
  if (granularity <= 1) return value;
  return (value + granularity - 1) / granularity * granularity;
}

Status ValidateCapacityRange(const csi::v1::CapacityRange& range, std::string_view what) {
  if (range.required_bytes() < 0 || range.limit_bytes() < 0) {
    return InvalidArgument(std::string(what) + ": capacity_range bytes must not be negative");
  }
  if (range.limit_bytes() > 0 && range.required_bytes() > range.limit_bytes()) {
    // The spec's "unsupported capacity": no size satisfies the range.
    return OutOfRange(std::string(what) + ": required_bytes " + std::to_string(range.required_bytes()) +
                      " exceeds limit_bytes " + std::to_string(range.limit_bytes()));
  }
  return OkStatus();
}

// The size of a new volume: at least `required` and `source_bytes` (a
// clone or restore cannot be smaller than its source), rounded up to the
// backend's granularity, never past the limit.
StatusOr<uint64_t> ChooseVolumeSize(const csi::v1::CapacityRange& range, uint64_t granularity, uint64_t default_bytes,
                                    uint64_t source_bytes, std::string_view what) {
  const uint64_t required = static_cast<uint64_t>(range.required_bytes());
  const uint64_t limit = static_cast<uint64_t>(range.limit_bytes());
  std::string name(what);
  if (required > 0 && required < source_bytes) {
    return OutOfRange(name + ": required_bytes " + std::to_string(required) + " is smaller than the source's " +
                      std::to_string(source_bytes) + " bytes");
  }
  if (limit > 0 && source_bytes > limit) {
    return OutOfRange(name + ": limit_bytes " + std::to_string(limit) + " is smaller than the source's " +
                      std::to_string(source_bytes) + " bytes");
  }
  uint64_t size = 0;
  if (required == 0 && source_bytes == 0) {
    size = RoundUp(default_bytes, granularity);
    // No requirement but a small limit: the largest size under the limit.
    if (limit > 0 && size > limit) size = granularity > 1 ? limit / granularity * granularity : limit;
    if (size == 0) {
      return OutOfRange(name + ": limit_bytes " + std::to_string(limit) + " is below the backend's granularity of " +
                        std::to_string(granularity) + " bytes");
    }
  } else {
    size = RoundUp(std::max(required, source_bytes), granularity);
  }
  if (limit > 0 && size > limit) {
    return OutOfRange(name + ": " + std::to_string(std::max(required, source_bytes)) +
                      " bytes rounded up to the backend's granularity of " + std::to_string(granularity) +
                      " bytes is " + std::to_string(size) + ", past limit_bytes " + std::to_string(limit));
  }
  if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return OutOfRange(name + ": capacity too large");
  }
  return size;
}

// A volume the node formats must be at least as large as its filesystem's
// minimum: grow it to that when limit_bytes allows (the response reports the
// real capacity_bytes), else OUT_OF_RANGE naming the minimum.
StatusOr<uint64_t> RaiseToFilesystemMinimum(uint64_t size, uint64_t minimum, const std::string& fs_type,
                                            const csi::v1::CapacityRange& range, uint64_t granularity,
                                            std::string_view what) {
  if (size >= minimum) return size;
  const uint64_t raised = RoundUp(minimum, granularity);
  const uint64_t limit = static_cast<uint64_t>(range.limit_bytes());
  if (limit > 0 && raised > limit) {
    return OutOfRange(std::string(what) + ": " + fs_type + " needs at least " + std::to_string(minimum) +
                      " bytes on this host, more than limit_bytes " + std::to_string(limit));
  }
  return raised;
}

// Structure only (access type and mode present): a malformed capability is
// INVALID_ARGUMENT everywhere, an unsupported one may be "not confirmed".
Status ValidateCapabilityShape(const csi::v1::VolumeCapability& capability, std::string_view what) {
  if (!capability.has_block() && !capability.has_mount()) {
    return InvalidArgument(std::string(what) + ": volume capability has no access type (block or mount)");
  }
  if (!capability.has_access_mode()) {
    return InvalidArgument(std::string(what) + ": volume capability has no access mode");
  }
  return OkStatus();
}

void FillContentSource(const ContentSource& source, csi::v1::VolumeContentSource* out) {
  if (source.kind == ContentSource::Kind::kSnapshot) out->mutable_snapshot()->set_snapshot_id(source.id);
  if (source.kind == ContentSource::Kind::kVolume) out->mutable_volume()->set_volume_id(source.id);
}

void FillVolume(const VolumeRecord& record, csi::v1::Volume* out) {
  out->set_volume_id(record.id);
  out->set_capacity_bytes(static_cast<int64_t>(record.size_bytes));
  for (const auto& [k, v] : VolumeContextFor(VolumeParametersFromRecord(record.parameters))) {
    (*out->mutable_volume_context())[k] = v;
  }
  if (record.source.kind != ContentSource::Kind::kNone) FillContentSource(record.source, out->mutable_content_source());
  if (!record.topology.empty()) {
    auto* segments = out->add_accessible_topology()->mutable_segments();
    for (const auto& [k, v] : record.topology) (*segments)[k] = v;
  }
}

void FillSnapshot(const SnapshotRecord& record, csi::v1::Snapshot* out) {
  out->set_snapshot_id(record.id);
  out->set_source_volume_id(record.source_volume_id);
  out->set_size_bytes(static_cast<int64_t>(record.size_bytes));
  out->set_ready_to_use(record.ready_to_use);
  *out->mutable_creation_time() = google::protobuf::util::TimeUtil::SecondsToTimestamp(record.created_unix_seconds);
}

std::vector<std::string> PublishedNodeIds(const VolumeRecord& record) {
  std::set<std::string> ids;
  for (const auto& grant : record.grants) {
    if (!grant.node_id.empty()) {
      ids.insert(grant.node_id);
    } else if (auto id = NodeIdFromInitiatorIqn(grant.initiator_iqn)) {
      ids.insert(*id);
    }
  }
  return {ids.begin(), ids.end()};
}

bool GrantIsForNode(const GrantRecord& grant, const std::string& node_id, const std::string& iqn) {
  return grant.initiator_iqn == iqn || (!grant.node_id.empty() && grant.node_id == node_id);
}

std::string GrantNodeName(const GrantRecord& grant) {
  return grant.node_id.empty() ? grant.initiator_iqn : grant.node_id;
}

// What the node needs to find, log in to and verify the LUN. Never a secret.
std::map<std::string, std::string> PublishContextFor(const VolumeRecord& record, bool read_only, bool chap) {
  std::string portals;
  for (const auto& portal : record.portals) portals += (portals.empty() ? "" : ",") + portal;
  std::map<std::string, std::string> context{
      {publish_context::kPortals, portals},
      {publish_context::kTargetIqn, record.target_iqn},
      {publish_context::kLun, std::to_string(record.lun)},
      {publish_context::kSerial, record.serial},
      {publish_context::kWwn, record.wwn},
      {publish_context::kChapRequired, chap ? "true" : "false"},
      {publish_context::kTransport, record.transport.empty() ? "iscsi" : record.transport},
      {publish_context::kReadOnly, read_only ? "true" : "false"},
  };
  // Other transports (rbd: pool, image, monitors, user) describe themselves;
  // the backend promises these are never secrets. They cannot override the
  // keys above.
  for (const auto& [k, v] : record.transport_params) context.emplace(k, v);
  return context;
}

// CHAP credentials from the controller-publish secrets. Errors name the
// missing key, never a value.
StatusOr<ChapCredentials> ChapFromSecrets(const google::protobuf::Map<std::string, std::string>& secrets,
                                          const std::string& volume_id) {
  auto get = [&](const char* key) {
    auto it = secrets.find(key);
    return it == secrets.end() ? std::string() : it->second;
  };
  ChapCredentials chap{get(secret_keys::kChapUsername), get(secret_keys::kChapPassword),
                       get(secret_keys::kChapMutualUsername), get(secret_keys::kChapMutualPassword)};
  auto missing = [&](const char* key) {
    return InvalidArgument("volume " + Quoted(volume_id) +
                           " requires CHAP (StorageClass chap=true) but the controller-publish secret has no \"" + key +
                           "\" (set csi.storage.k8s.io/controller-publish-secret-name)");
  };
  if (chap.username.empty()) return missing(secret_keys::kChapUsername);
  if (chap.password.empty()) return missing(secret_keys::kChapPassword);
  if (!chap.mutual_username.empty() && chap.mutual_password.empty()) return missing(secret_keys::kChapMutualPassword);
  if (chap.mutual_username.empty() && !chap.mutual_password.empty()) return missing(secret_keys::kChapMutualUsername);
  // The rules the target and the node apply too (chap_rules.h): refused here
  // before anything reaches the backend.
  BLOCKCSI_RETURN_IF_ERROR(
      ValidateChapCredentials(chap, "volume " + Quoted(volume_id) + ": controller-publish secret"));
  return chap;
}

}  // namespace

ControllerService::ControllerService(std::shared_ptr<VolumeBackend> backend, ControllerOptions options)
    : backend_(std::move(backend)), options_(std::move(options)) {}

StatusOr<VolumeRecord> ControllerService::GetVolumeRecord(const std::string& volume_id) {
  auto record = backend_->GetVolume(volume_id);
  if (!record.ok()) {
    if (IsMissing(record.status())) {
      return NotFound("volume " + Quoted(volume_id) + " does not exist");
    }
    return Named(record.status(), "volume", volume_id);
  }
  return record;
}

// ---- CreateVolume -------------------------------------------------------
// Idempotent by name: the backend returns the existing volume for the same
// name, size and source (our rounding is deterministic, so a retry computes
// the same size); another size or source → ALREADY_EXISTS.
// accessible_topology is the backend's (e.g. the storage host's segment);
// accessibility_requirements are not matched against it: one backend, and an
// iSCSI portal is reachable from every node unless the backend says otherwise.
grpc::Status ControllerService::CreateVolume(grpc::ServerContext*, const csi::v1::CreateVolumeRequest* request,
                                             csi::v1::CreateVolumeResponse* response) {
  return ToGrpcStatus(DoCreateVolume(*request, response));
}

Status ControllerService::DoCreateVolume(const csi::v1::CreateVolumeRequest& request,
                                         csi::v1::CreateVolumeResponse* response) {
  const std::string& name = request.name();
  if (name.empty()) return InvalidArgument("CreateVolume: name is required");
  const std::string what = "volume name " + Quoted(name);
  if (request.volume_capabilities().empty()) {
    return InvalidArgument(what + ": volume_capabilities are required");
  }
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeParameters params,
                            ParseVolumeParameters({request.parameters().begin(), request.parameters().end()},
                                                  backend_->SupportedParameters()));
  for (const auto& capability : request.volume_capabilities()) {
    BLOCKCSI_RETURN_IF_ERROR(ValidateCapability(capability, what));
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

  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, name_ops_.Acquire(name, "CreateVolume"));

  uint64_t source_bytes = 0;
  if (source.kind == ContentSource::Kind::kSnapshot) {
    auto snapshot = backend_->GetSnapshot(source.id);
    if (!snapshot.ok()) {
      if (IsMissing(snapshot.status())) {
        return NotFound(what + ": source snapshot " + Quoted(source.id) + " does not exist");
      }
      return Named(snapshot.status(), "snapshot", source.id);
    }
    source_bytes = snapshot->size_bytes;
  } else if (source.kind == ContentSource::Kind::kVolume) {
    auto volume = backend_->GetVolume(source.id);
    if (!volume.ok()) {
      if (IsMissing(volume.status())) {
        return NotFound(what + ": source volume " + Quoted(source.id) + " does not exist");
      }
      return Named(volume.status(), "volume", source.id);
    }
    source_bytes = volume->size_bytes;
  }
  BLOCKCSI_ASSIGN_OR_RETURN(uint64_t size, ChooseVolumeSize(request.capacity_range(), backend_->AllocationGranularity(),
                                                            options_.default_volume_bytes, source_bytes, what));
  BLOCKCSI_ASSIGN_OR_RETURN(size, RaiseToFilesystemMinimum(size, fs_minimum, fs_type, request.capacity_range(),
                                                           backend_->AllocationGranularity(), what));

  CreateVolumeSpec spec{name, size, source, params.persisted};
  auto record = backend_->CreateVolume(spec);
  if (!record.ok()) return Named(record.status(), "volume name", name);
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
  return ToGrpcStatus(DoDeleteVolume(*request));
}

Status ControllerService::DoDeleteVolume(const csi::v1::DeleteVolumeRequest& request) {
  const std::string& id = request.volume_id();
  if (id.empty()) return InvalidArgument("DeleteVolume: volume_id is required");
  // An id no backend makes (a static PV's handle among them) names nothing
  // of ours: OK, as for any unknown id, and no backend is asked.
  if (!backend_->MayHoldVolume(id)) {
    LogInfo("DeleteVolume of an id no backend makes (static PV?): nothing to delete", {{"volume", id}});
    return OkStatus();
  }
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, volume_ops_.Acquire(id, "DeleteVolume"));
  auto record = backend_->GetVolume(id);
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
  Status st = backend_->DeleteVolume(id);
  if (IsMissing(st)) return OkStatus();
  BLOCKCSI_RETURN_IF_ERROR(Named(st, "volume", id));
  LogInfo("volume deleted", {{"volume", id}});
  return OkStatus();
}

// ---- ControllerPublishVolume --------------------------------------------
// Idempotent per (volume, node): the same capability and readonly again →
// OK with the same publish_context (the grant is confirmed again, which also
// heals an ACL lost on the target); another capability or readonly on the
// same node → ALREADY_EXISTS. The node's initiator IQN is derived from
// node_id alone (attach/initiator.h).
grpc::Status ControllerService::ControllerPublishVolume(grpc::ServerContext*,
                                                        const csi::v1::ControllerPublishVolumeRequest* request,
                                                        csi::v1::ControllerPublishVolumeResponse* response) {
  return ToGrpcStatus(DoPublish(*request, response));
}

Status ControllerService::DoPublish(const csi::v1::ControllerPublishVolumeRequest& request,
                                    csi::v1::ControllerPublishVolumeResponse* response) {
  const std::string& id = request.volume_id();
  const std::string& node_id = request.node_id();
  if (id.empty()) return InvalidArgument("ControllerPublishVolume: volume_id is required");
  if (node_id.empty())
    return InvalidArgument("ControllerPublishVolume: volume " + Quoted(id) + ": node_id is required");
  BLOCKCSI_RETURN_IF_ERROR(ValidateNodeId(node_id));
  const std::string what = "volume " + Quoted(id) + " on node " + Quoted(node_id);
  if (!request.has_volume_capability()) return InvalidArgument(what + ": volume_capability is required");
  const auto& capability = request.volume_capability();
  BLOCKCSI_RETURN_IF_ERROR(ValidateCapability(capability, what));
  const AccessMode mode = capability.access_mode().mode();
  const bool read_only = request.readonly() || IsReadOnlyMode(mode);
  const std::string fingerprint = CapabilityFingerprint(capability);
  const std::string iqn = InitiatorIqnForNode(node_id);
  const std::map<std::string, std::string> volume_context(request.volume_context().begin(),
                                                          request.volume_context().end());
  if (IsStaticVolume(volume_context)) return PublishStatic(request, volume_context, read_only, response);

  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, volume_ops_.Acquire(id, "ControllerPublishVolume"));
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeRecord record, GetVolumeRecord(id));
  if (options_.node_exists) {
    auto exists = options_.node_exists(node_id);
    if (!exists.ok()) return Named(exists.status(), "node", node_id);
    if (!*exists) return NotFound("node " + Quoted(node_id) + " does not exist (publishing volume " + Quoted(id) + ")");
  }

  const GrantRecord* mine = nullptr;
  int other_writers = 0;
  for (const auto& grant : record.grants) {
    if (GrantIsForNode(grant, node_id, iqn)) {
      mine = &grant;
      continue;
    }
    AccessMode other_mode = ModeFromFingerprint(grant.capability);
    // A grant whose mode we cannot read (made by hand, or by another tool)
    // is taken as exclusive: sharing a LUN by mistake corrupts it.
    const bool other_exclusive =
        IsSingleNodeMode(other_mode) || other_mode == AccessMode::VolumeCapability_AccessMode_Mode_UNKNOWN;
    if (IsSingleNodeMode(mode) || other_exclusive) {
      return FailedPrecondition("volume " + Quoted(id) + " is already published to node " +
                                Quoted(GrantNodeName(grant)) + " (" + grant.capability +
                                "), a single-node access mode; unpublish it there before publishing to node " +
                                Quoted(node_id));
    }
    if (!grant.read_only) ++other_writers;
  }
  if (mine != nullptr && (mine->capability != fingerprint || mine->read_only != read_only)) {
    return AlreadyExists("volume " + Quoted(id) + " is already published to node " + Quoted(node_id) + " as " +
                         mine->capability + (mine->read_only ? " read-only" : " read-write") + ", incompatible with " +
                         fingerprint + (read_only ? " read-only" : " read-write"));
  }
  bool single_writer = mode == AccessMode::VolumeCapability_AccessMode_Mode_MULTI_NODE_SINGLE_WRITER;
  for (const auto& grant : record.grants) {
    single_writer |=
        ModeFromFingerprint(grant.capability) == AccessMode::VolumeCapability_AccessMode_Mode_MULTI_NODE_SINGLE_WRITER;
  }
  if (mine == nullptr && single_writer && !read_only && other_writers > 0) {
    for (const auto& grant : record.grants) {
      if (!grant.read_only && !GrantIsForNode(grant, node_id, iqn)) {
        return FailedPrecondition("volume " + Quoted(id) + " (MULTI_NODE_SINGLE_WRITER) already has a writer on node " +
                                  Quoted(GrantNodeName(grant)) + "; node " + Quoted(node_id) +
                                  " may only publish it read-only");
      }
    }
  }

  VolumeParameters params = VolumeParametersFromRecord(record.parameters);
  auto ctx_chap = request.volume_context().find(storage_class::kChap);
  // The record is the authority; the volume_context is a second opinion so
  // that a statically provisioned PV can ask for CHAP too.
  const bool chap_required = params.chap || (ctx_chap != request.volume_context().end() && ctx_chap->second == "true");
  AccessGrant grant{iqn, node_id, read_only, fingerprint, {}};
  if (chap_required) {
    BLOCKCSI_ASSIGN_OR_RETURN(grant.chap, ChapFromSecrets(request.secrets(), id));
  }

  std::unique_lock<std::mutex> node_lock;
  if (mine == nullptr && options_.max_volumes_per_node > 0) {
    node_lock = std::unique_lock(*NodeLimitMutex(node_id));
    BLOCKCSI_ASSIGN_OR_RETURN(int64_t on_node, CountGrantsOnNode(node_id, id));
    if (on_node >= options_.max_volumes_per_node) {
      return ResourceExhausted(
          "node " + Quoted(node_id) + " already has " + std::to_string(on_node) +
          " volumes published, its maximum (--max-volumes-per-node=" + std::to_string(options_.max_volumes_per_node) +
          "); cannot publish volume " + Quoted(id));
    }
  }
  auto granted = backend_->GrantAccess(id, grant);
  if (!granted.ok()) {
    if (granted.status().code() == StatusCode::kNotFound) {
      return NotFound("volume " + Quoted(id) + " does not exist");
    }
    return Named(granted.status(), "volume", id);
  }
  for (const auto& [k, v] : PublishContextFor(*granted, read_only, chap_required)) {
    (*response->mutable_publish_context())[k] = v;
  }
  LogInfo("volume published", {{"volume", id},
                               {"node", node_id},
                               {"capability", fingerprint},
                               {"readonly", read_only ? "true" : "false"},
                               {"chap", chap_required ? "true" : "false"}});
  return OkStatus();
}

// A static volume (issue #24): the PV's attributes name a LUN no backend
// made. Nothing is granted (the array's admin owns its ACLs) and no backend
// is asked; the publish_context comes from the attributes alone, so the
// call is idempotent by construction. Access-mode conflicts between nodes
// are the CO's to enforce here (there is no grant record to check), and the
// LUN does not count against --max-volumes-per-node (it holds no grant).
Status ControllerService::PublishStatic(const csi::v1::ControllerPublishVolumeRequest& request,
                                        const std::map<std::string, std::string>& volume_context, bool read_only,
                                        csi::v1::ControllerPublishVolumeResponse* response) {
  const std::string& id = request.volume_id();
  // A handle a backend could have made would route DeleteVolume,
  // ControllerUnpublish and ControllerExpand of this PV to that backend's
  // volume of the same id: refuse it so that a static PV can never reach one.
  if (backend_->MayHoldVolume(id)) {
    return InvalidArgument("volume " + Quoted(id) + ": volumeHandle has the form of a blockcsi-made volume id (" +
                           backend_->Name() + "); a static PV needs a handle of another form, e.g. \"static-" +
                           "<array>-<lun>\"");
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto context, StaticPublishContext(id, volume_context, read_only));
  // The spec's NOT_FOUND for an unknown node holds for static volumes too.
  if (options_.node_exists) {
    auto exists = options_.node_exists(request.node_id());
    if (!exists.ok()) return Named(exists.status(), "node", request.node_id());
    if (!*exists) {
      return NotFound("node " + Quoted(request.node_id()) + " does not exist (publishing volume " + Quoted(id) + ")");
    }
  }
  for (const auto& [k, v] : context) (*response->mutable_publish_context())[k] = v;
  LogInfo("static volume published (nothing granted)", {{"volume", id},
                                                        {"node", request.node_id()},
                                                        {"target", context[publish_context::kTargetIqn]},
                                                        {"lun", context[publish_context::kLun]}});
  return OkStatus();
}

std::shared_ptr<std::mutex> ControllerService::NodeLimitMutex(const std::string& node_id) {
  std::lock_guard lock(node_limit_mu_);
  auto& mu = node_limit_locks_[node_id];
  if (!mu) mu = std::make_shared<std::mutex>();
  return mu;
}

StatusOr<int64_t> ControllerService::CountGrantsOnNode(const std::string& node_id,
                                                       const std::string& except_volume_id) {
  const std::string iqn = InitiatorIqnForNode(node_id);
  int64_t count = 0;
  std::string token;
  do {
    auto page = backend_->ListVolumes(token, 0);
    if (!page.ok()) return page.status().WithContext("counting the volumes on node " + Quoted(node_id));
    for (const auto& volume : page->items) {
      if (volume.id == except_volume_id) continue;
      for (const auto& grant : volume.grants) {
        if (GrantIsForNode(grant, node_id, iqn)) {
          ++count;
          break;
        }
      }
    }
    token = page->next_token;
  } while (!token.empty());
  return count;
}

// ---- ControllerUnpublishVolume ------------------------------------------
// Idempotent: an unknown volume, a node without a grant, or a node id that
// could never have been granted (malformed) → OK, so that a VolumeAttachment
// of a deleted node or volume can always be finalized. An empty node_id
// unpublishes from every node, as the spec asks.
grpc::Status ControllerService::ControllerUnpublishVolume(grpc::ServerContext*,
                                                          const csi::v1::ControllerUnpublishVolumeRequest* request,
                                                          csi::v1::ControllerUnpublishVolumeResponse*) {
  return ToGrpcStatus(DoUnpublish(*request));
}

Status ControllerService::DoUnpublish(const csi::v1::ControllerUnpublishVolumeRequest& request) {
  const std::string& id = request.volume_id();
  const std::string& node_id = request.node_id();
  if (id.empty()) return InvalidArgument("ControllerUnpublishVolume: volume_id is required");
  if (!node_id.empty() && !ValidateNodeId(node_id).ok()) return OkStatus();
  // A static PV's handle (or any id no backend makes): nothing was granted.
  if (!backend_->MayHoldVolume(id)) return OkStatus();
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, volume_ops_.Acquire(id, "ControllerUnpublishVolume"));
  std::vector<std::string> iqns;
  if (!node_id.empty()) {
    iqns.push_back(InitiatorIqnForNode(node_id));
  } else {
    auto record = backend_->GetVolume(id);
    if (!record.ok()) {
      if (IsMissing(record.status())) return OkStatus();
      return Named(record.status(), "volume", id);
    }
    for (const auto& grant : record->grants) iqns.push_back(grant.initiator_iqn);
  }
  for (const auto& iqn : iqns) {
    Status st = backend_->RevokeAccess(id, iqn);
    if (IsMissing(st)) continue;
    BLOCKCSI_RETURN_IF_ERROR(Named(st, "volume", id));
  }
  LogInfo("volume unpublished", {{"volume", id}, {"node", node_id.empty() ? "(all)" : node_id}});
  return OkStatus();
}

// ---- ValidateVolumeCapabilities -----------------------------------------
// Read-only. A malformed request is INVALID_ARGUMENT; capabilities or
// parameters this driver cannot serve are "not confirmed" with a message.
grpc::Status ControllerService::ValidateVolumeCapabilities(grpc::ServerContext*,
                                                           const csi::v1::ValidateVolumeCapabilitiesRequest* request,
                                                           csi::v1::ValidateVolumeCapabilitiesResponse* response) {
  return ToGrpcStatus(DoValidate(*request, response));
}

Status ControllerService::DoValidate(const csi::v1::ValidateVolumeCapabilitiesRequest& request,
                                     csi::v1::ValidateVolumeCapabilitiesResponse* response) {
  const std::string& id = request.volume_id();
  if (id.empty()) return InvalidArgument("ValidateVolumeCapabilities: volume_id is required");
  const std::string what = "volume " + Quoted(id);
  if (request.volume_capabilities().empty()) return InvalidArgument(what + ": volume_capabilities are required");
  for (const auto& capability : request.volume_capabilities()) {
    BLOCKCSI_RETURN_IF_ERROR(ValidateCapabilityShape(capability, what));
  }
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeRecord record, GetVolumeRecord(id));
  VolumeParameters params = VolumeParametersFromRecord(record.parameters);
  for (const auto& capability : request.volume_capabilities()) {
    if (Status st = ValidateCapability(capability, what); !st.ok()) {
      response->set_message(st.message());
      return OkStatus();
    }
    if (capability.has_mount() && !capability.mount().fs_type().empty() && !params.fs_type.empty() &&
        capability.mount().fs_type() != params.fs_type) {
      response->set_message(what + " carries " + params.fs_type + ", not " + capability.mount().fs_type());
      return OkStatus();
    }
  }
  auto parsed = ParseVolumeParameters({request.parameters().begin(), request.parameters().end()},
                                      backend_->SupportedParameters());
  if (!parsed.ok()) {
    response->set_message(parsed.status().message());
    return OkStatus();
  }
  auto* confirmed = response->mutable_confirmed();
  *confirmed->mutable_volume_context() = request.volume_context();
  *confirmed->mutable_volume_capabilities() = request.volume_capabilities();
  *confirmed->mutable_parameters() = request.parameters();
  return OkStatus();
}

// ---- ListVolumes --------------------------------------------------------
// Read-only; the backend's stable order and opaque tokens. A token it does
// not know → ABORTED (the CO restarts the listing).
grpc::Status ControllerService::ListVolumes(grpc::ServerContext*, const csi::v1::ListVolumesRequest* request,
                                            csi::v1::ListVolumesResponse* response) {
  return ToGrpcStatus(DoListVolumes(*request, response));
}

Status ControllerService::DoListVolumes(const csi::v1::ListVolumesRequest& request,
                                        csi::v1::ListVolumesResponse* response) {
  if (request.max_entries() < 0) return InvalidArgument("ListVolumes: max_entries must not be negative");
  auto page = backend_->ListVolumes(request.starting_token(), request.max_entries());
  if (!page.ok()) {
    if (!request.starting_token().empty() &&
        (page.status().code() == StatusCode::kInvalidArgument || page.status().code() == StatusCode::kNotFound)) {
      return Aborted("ListVolumes: starting_token " + Quoted(request.starting_token()) + " is not valid");
    }
    return page.status();
  }
  // VOLUME_CONDITION is advertised, so the spec wants the condition here
  // too. Checked for the whole page at once: the local backend then reads
  // tgtd's state once per page, not once per volume.
  std::vector<std::string> ids;
  ids.reserve(page->items.size());
  for (const auto& record : page->items) ids.push_back(record.id);
  std::vector<StatusOr<VolumeHealth>> healths = backend_->CheckVolumes(ids);
  for (size_t i = 0; i < page->items.size(); ++i) {
    const VolumeRecord& record = page->items[i];
    auto* entry = response->add_entries();
    FillVolume(record, entry->mutable_volume());
    auto* status = entry->mutable_status();
    for (const auto& node : PublishedNodeIds(record)) status->add_published_node_ids(node);
    auto* condition = status->mutable_volume_condition();
    if (i >= healths.size()) {  // a backend that broke the one-result-per-id contract
      condition->set_abnormal(true);
      condition->set_message("cannot check volume: no result from the backend");
      continue;
    }
    const auto& health = healths[i];
    if (health.ok()) {
      condition->set_abnormal(health->abnormal);
      condition->set_message(health->message.empty() ? "volume is healthy" : health->message);
    } else {
      condition->set_abnormal(true);
      condition->set_message("cannot check volume: " + health.status().message());
    }
  }
  response->set_next_token(page->next_token);
  return OkStatus();
}

// ---- GetCapacity --------------------------------------------------------
grpc::Status ControllerService::GetCapacity(grpc::ServerContext*, const csi::v1::GetCapacityRequest* request,
                                            csi::v1::GetCapacityResponse* response) {
  return ToGrpcStatus(DoGetCapacity(*request, response));
}

Status ControllerService::DoGetCapacity(const csi::v1::GetCapacityRequest& request,
                                        csi::v1::GetCapacityResponse* response) {
  // Same parameter rules as CreateVolume: a StorageClass that could never
  // provision should not be reported as having room.
  BLOCKCSI_RETURN_IF_ERROR(
      ParseVolumeParameters({request.parameters().begin(), request.parameters().end()}, backend_->SupportedParameters())
          .status());
  for (const auto& given : request.volume_capabilities()) {
    // A part the CO left out constrains nothing: external-provisioner v3.x
    // (up to v4.0.1) asks with `mount {}` and access mode UNKNOWN, and a
    // zero answer to that strands every WaitForFirstConsumer pod (issue
    // #20). The missing part is filled with the most permissive choice, so
    // only what the CO did say can make the answer zero.
    csi::v1::VolumeCapability capability = given;
    if (!capability.has_block() && !capability.has_mount()) capability.mutable_block();
    if (capability.access_mode().mode() == csi::v1::VolumeCapability::AccessMode::UNKNOWN) {
      capability.mutable_access_mode()->set_mode(csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    }
    // Capacity that can hold volumes of a kind we do not make is zero.
    if (!ValidateCapability(capability, "GetCapacity").ok()) {
      response->set_available_capacity(0);
      return OkStatus();
    }
  }
  BLOCKCSI_ASSIGN_OR_RETURN(uint64_t available, backend_->AvailableBytes());
  uint64_t granularity = std::max<uint64_t>(backend_->AllocationGranularity(), 1);
  // Whole allocation units only: a volume cannot use a partial one.
  available = available / granularity * granularity;
  response->set_available_capacity(
      static_cast<int64_t>(std::min<uint64_t>(available, std::numeric_limits<int64_t>::max())));
  response->mutable_minimum_volume_size()->set_value(static_cast<int64_t>(granularity));
  return OkStatus();
}

grpc::Status ControllerService::ControllerGetCapabilities(grpc::ServerContext*,
                                                          const csi::v1::ControllerGetCapabilitiesRequest*,
                                                          csi::v1::ControllerGetCapabilitiesResponse* response) {
  AddControllerCapabilities(response);
  return grpc::Status::OK;
}

// ---- CreateSnapshot -----------------------------------------------------
// Idempotent by name: same name and source → the existing snapshot; same
// name, other source → ALREADY_EXISTS; missing source volume → NOT_FOUND.
grpc::Status ControllerService::CreateSnapshot(grpc::ServerContext*, const csi::v1::CreateSnapshotRequest* request,
                                               csi::v1::CreateSnapshotResponse* response) {
  return ToGrpcStatus(DoCreateSnapshot(*request, response));
}

Status ControllerService::DoCreateSnapshot(const csi::v1::CreateSnapshotRequest& request,
                                           csi::v1::CreateSnapshotResponse* response) {
  const std::string& name = request.name();
  const std::string& source = request.source_volume_id();
  if (name.empty()) return InvalidArgument("CreateSnapshot: name is required");
  if (source.empty())
    return InvalidArgument("CreateSnapshot: snapshot name " + Quoted(name) + ": source_volume_id is required");
  BLOCKCSI_RETURN_IF_ERROR(ValidateSnapshotParameters({request.parameters().begin(), request.parameters().end()})
                               .WithContext("snapshot name " + Quoted(name)));
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, snapshot_ops_.Acquire("name:" + name, "CreateSnapshot"));
  // Looked up first so that a source id the backend rejects as malformed is
  // NOT_FOUND like any other missing volume.
  auto volume = backend_->GetVolume(source);
  if (!volume.ok()) {
    if (IsMissing(volume.status())) {
      return NotFound("snapshot name " + Quoted(name) + ": source volume " + Quoted(source) + " does not exist");
    }
    return Named(volume.status(), "volume", source);
  }
  auto record = backend_->CreateSnapshot(source, name);
  if (!record.ok()) {
    if (record.status().code() == StatusCode::kNotFound) {
      return NotFound("snapshot name " + Quoted(name) + ": source volume " + Quoted(source) + " does not exist");
    }
    return Named(record.status(), "snapshot name", name);
  }
  FillSnapshot(*record, response->mutable_snapshot());
  LogInfo("snapshot created", {{"snapshot", record->id}, {"name", name}, {"volume", source}});
  return OkStatus();
}

// ---- DeleteSnapshot: idempotent, unknown id → OK. -----------------------
grpc::Status ControllerService::DeleteSnapshot(grpc::ServerContext*, const csi::v1::DeleteSnapshotRequest* request,
                                               csi::v1::DeleteSnapshotResponse*) {
  return ToGrpcStatus(DoDeleteSnapshot(*request));
}

Status ControllerService::DoDeleteSnapshot(const csi::v1::DeleteSnapshotRequest& request) {
  const std::string& id = request.snapshot_id();
  if (id.empty()) return InvalidArgument("DeleteSnapshot: snapshot_id is required");
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, snapshot_ops_.Acquire("id:" + id, "DeleteSnapshot"));
  Status st = backend_->DeleteSnapshot(id);
  if (IsMissing(st)) return OkStatus();
  BLOCKCSI_RETURN_IF_ERROR(Named(st, "snapshot", id));
  LogInfo("snapshot deleted", {{"snapshot", id}});
  return OkStatus();
}

// ---- ListSnapshots ------------------------------------------------------
// Read-only. By id: that snapshot or nothing (never NOT_FOUND, as the spec
// asks); by source volume: its snapshots; else all, paged.
grpc::Status ControllerService::ListSnapshots(grpc::ServerContext*, const csi::v1::ListSnapshotsRequest* request,
                                              csi::v1::ListSnapshotsResponse* response) {
  return ToGrpcStatus(DoListSnapshots(*request, response));
}

Status ControllerService::DoListSnapshots(const csi::v1::ListSnapshotsRequest& request,
                                          csi::v1::ListSnapshotsResponse* response) {
  if (request.max_entries() < 0) return InvalidArgument("ListSnapshots: max_entries must not be negative");
  if (!request.snapshot_id().empty()) {
    auto record = backend_->GetSnapshot(request.snapshot_id());
    if (!record.ok()) {
      if (IsMissing(record.status())) return OkStatus();
      return Named(record.status(), "snapshot", request.snapshot_id());
    }
    if (request.source_volume_id().empty() || record->source_volume_id == request.source_volume_id()) {
      FillSnapshot(*record, response->add_entries()->mutable_snapshot());
    }
    return OkStatus();
  }
  auto page = backend_->ListSnapshots(request.source_volume_id(), request.starting_token(), request.max_entries());
  if (!page.ok()) {
    StatusCode code = page.status().code();
    if (!request.starting_token().empty() &&
        (code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound || code == StatusCode::kAborted)) {
      return Aborted("ListSnapshots: starting_token " + Quoted(request.starting_token()) + " is not valid");
    }
    // An unknown source volume simply has no snapshots.
    if (IsMissing(page.status())) return OkStatus();
    return page.status();
  }
  for (const auto& record : page->items) FillSnapshot(record, response->add_entries()->mutable_snapshot());
  response->set_next_token(page->next_token);
  return OkStatus();
}

grpc::Status ControllerService::GetSnapshot(grpc::ServerContext*, const csi::v1::GetSnapshotRequest* request,
                                            csi::v1::GetSnapshotResponse* response) {
  return ToGrpcStatus(DoGetSnapshot(*request, response));
}

Status ControllerService::DoGetSnapshot(const csi::v1::GetSnapshotRequest& request,
                                        csi::v1::GetSnapshotResponse* response) {
  const std::string& id = request.snapshot_id();
  if (id.empty()) return InvalidArgument("GetSnapshot: snapshot_id is required");
  auto record = backend_->GetSnapshot(id);
  if (!record.ok()) {
    if (IsMissing(record.status())) return NotFound("snapshot " + Quoted(id) + " does not exist");
    return Named(record.status(), "snapshot", id);
  }
  FillSnapshot(*record, response->mutable_snapshot());
  return OkStatus();
}

// ---- ControllerExpandVolume ---------------------------------------------
// Idempotent: a volume already at least required_bytes (and within the
// limit) → OK with its size. Never shrinks: a limit below the current size →
// OUT_OF_RANGE. Online: a published volume grows too (the node rescans).
grpc::Status ControllerService::ControllerExpandVolume(grpc::ServerContext*,
                                                       const csi::v1::ControllerExpandVolumeRequest* request,
                                                       csi::v1::ControllerExpandVolumeResponse* response) {
  return ToGrpcStatus(DoExpand(*request, response));
}

Status ControllerService::DoExpand(const csi::v1::ControllerExpandVolumeRequest& request,
                                   csi::v1::ControllerExpandVolumeResponse* response) {
  const std::string& id = request.volume_id();
  if (id.empty()) return InvalidArgument("ControllerExpandVolume: volume_id is required");
  const std::string what = "volume " + Quoted(id);
  if (!request.has_capacity_range()) return InvalidArgument(what + ": capacity_range is required");
  const auto& range = request.capacity_range();
  BLOCKCSI_RETURN_IF_ERROR(ValidateCapacityRange(range, what));
  if (range.required_bytes() == 0) return InvalidArgument(what + ": capacity_range.required_bytes is required");
  if (request.has_volume_capability()) {
    BLOCKCSI_RETURN_IF_ERROR(ValidateCapability(request.volume_capability(), what));
  }
  // Block volumes have nothing for the node to grow; a mount (or unknown)
  // volume has a filesystem the node must grow.
  const bool node_expansion = !(request.has_volume_capability() && IsBlock(request.volume_capability()));

  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, volume_ops_.Acquire(id, "ControllerExpandVolume"));
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeRecord record, GetVolumeRecord(id));
  const uint64_t limit = static_cast<uint64_t>(range.limit_bytes());
  if (limit > 0 && record.size_bytes > limit) {
    return OutOfRange(what + " is " + std::to_string(record.size_bytes) + " bytes, above limit_bytes " +
                      std::to_string(limit) + ": volumes never shrink");
  }
  uint64_t size = record.size_bytes;
  if (record.size_bytes < static_cast<uint64_t>(range.required_bytes())) {
    BLOCKCSI_ASSIGN_OR_RETURN(size, ChooseVolumeSize(range, backend_->AllocationGranularity(), 0, 0, what));
    auto grown = backend_->ExpandVolume(id, size);
    if (!grown.ok()) {
      if (IsMissing(grown.status())) return NotFound(what + " does not exist");
      return Named(grown.status(), "volume", id);
    }
    size = grown->size_bytes;
    LogInfo("volume expanded", {{"volume", id}, {"bytes", std::to_string(size)}});
  }
  response->set_capacity_bytes(static_cast<int64_t>(size));
  response->set_node_expansion_required(node_expansion);
  return OkStatus();
}

// ---- ControllerGetVolume: read-only; NOT_FOUND for an unknown id. -------
grpc::Status ControllerService::ControllerGetVolume(grpc::ServerContext*,
                                                    const csi::v1::ControllerGetVolumeRequest* request,
                                                    csi::v1::ControllerGetVolumeResponse* response) {
  return ToGrpcStatus(DoGetVolume(*request, response));
}

Status ControllerService::DoGetVolume(const csi::v1::ControllerGetVolumeRequest& request,
                                      csi::v1::ControllerGetVolumeResponse* response) {
  const std::string& id = request.volume_id();
  if (id.empty()) return InvalidArgument("ControllerGetVolume: volume_id is required");
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeRecord record, GetVolumeRecord(id));
  FillVolume(record, response->mutable_volume());
  auto* status = response->mutable_status();
  for (const auto& node : PublishedNodeIds(record)) status->add_published_node_ids(node);
  auto health = backend_->CheckVolume(id);
  if (!health.ok()) {
    if (IsMissing(health.status())) return NotFound("volume " + Quoted(id) + " does not exist");
    return Named(health.status(), "volume", id);
  }
  status->mutable_volume_condition()->set_abnormal(health->abnormal);
  // A healthy volume may still say something (e.g. "export repaired").
  status->mutable_volume_condition()->set_message(health->message.empty() ? "volume is healthy" : health->message);
  return OkStatus();
}

}  // namespace blockcsi
