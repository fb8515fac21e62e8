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

namespace blockcsi {

using namespace controller_internal;  // NOLINT(google-build-using-namespace): the controller_*.cc files share these
                                      // helpers

ControllerService::ControllerService(std::shared_ptr<VolumeBackend> backend, ControllerOptions options)
    : backend_(std::move(backend)), options_(std::move(options)) {}

std::shared_ptr<VolumeBackend> ControllerService::BackendFor(
    const google::protobuf::Map<std::string, std::string>& secrets) const {
  if (secrets.empty()) return backend_;
  auto bound = backend_->WithSecrets(CallSecrets{{secrets.begin(), secrets.end()}});
  return bound != nullptr ? bound : backend_;
}

StatusOr<VolumeRecord> ControllerService::GetVolumeRecord(VolumeBackend& backend, const std::string& volume_id) {
  auto record = backend.GetVolume(volume_id);
  if (!record.ok()) {
    if (IsMissing(record.status())) {
      return NotFound("volume " + Quoted(volume_id) + " does not exist");
    }
    return Named(record.status(), "volume", volume_id);
  }
  return record;
}

// ---- ValidateVolumeCapabilities -----------------------------------------
// Read-only. A malformed request is INVALID_ARGUMENT; capabilities or
// parameters this driver cannot serve are "not confirmed" with a message.
grpc::Status ControllerService::ValidateVolumeCapabilities(grpc::ServerContext*,
                                                           const csi::v1::ValidateVolumeCapabilitiesRequest* request,
                                                           csi::v1::ValidateVolumeCapabilitiesResponse* response) {
  return ToGrpcStatus(Validate(*request, response));
}

Status ControllerService::Validate(const csi::v1::ValidateVolumeCapabilitiesRequest& request,
                                   csi::v1::ValidateVolumeCapabilitiesResponse* response) {
  const std::shared_ptr<VolumeBackend> backend = BackendFor(request.secrets());
  const std::string& id = request.volume_id();
  if (id.empty()) return InvalidArgument("ValidateVolumeCapabilities: volume_id is required");
  const std::string what = "volume " + Quoted(id);
  if (request.volume_capabilities().empty()) return InvalidArgument(what + ": volume_capabilities are required");
  for (const auto& capability : request.volume_capabilities()) {
    BLOCKCSI_RETURN_IF_ERROR(ValidateCapabilityShape(capability, what));
  }
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeRecord record, GetVolumeRecord(*backend, id));
  VolumeParameters params = VolumeParametersFromRecord(record.parameters);
  for (const auto& capability : request.volume_capabilities()) {
    if (Status st = ValidateCapabilityAndFsType(capability, what); !st.ok()) {
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
  return ToGrpcStatus(ListVolumePage(*request, response));
}

Status ControllerService::ListVolumePage(const csi::v1::ListVolumesRequest& request,
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
  return ToGrpcStatus(Capacity(*request, response));
}

Status ControllerService::Capacity(const csi::v1::GetCapacityRequest& request, csi::v1::GetCapacityResponse* response) {
  // Same parameter rules as CreateVolume: a StorageClass that could never
  // provision should not be reported as having room.
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeParameters params,
                            ParseVolumeParameters({request.parameters().begin(), request.parameters().end()},
                                                  backend_->SupportedParameters()));
  for (const auto& given : request.volume_capabilities()) {
    // A part the CO left out constrains nothing: external-provisioner v3.x
    // (up to v4.0.1) asks with `mount {}` and access mode UNKNOWN, and a
    // zero answer to that strands every WaitForFirstConsumer pod. The
    // missing part is filled with the most permissive choice, so
    // only what the CO did say can make the answer zero.
    csi::v1::VolumeCapability capability = given;
    if (!capability.has_block() && !capability.has_mount()) capability.mutable_block();
    if (capability.access_mode().mode() == csi::v1::VolumeCapability::AccessMode::UNKNOWN) {
      capability.mutable_access_mode()->set_mode(csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    }
    // Capacity that can hold volumes of a kind we do not make is zero.
    if (!ValidateCapabilityAndFsType(capability, "GetCapacity").ok()) {
      response->set_available_capacity(0);
      return OkStatus();
    }
  }
  CapacityQuery query{
      {request.parameters().begin(), request.parameters().end()},
      {request.accessible_topology().segments().begin(), request.accessible_topology().segments().end()}};
  BLOCKCSI_ASSIGN_OR_RETURN(uint64_t available, backend_->AvailableBytes(query));
  uint64_t granularity = std::max<uint64_t>(backend_->AllocationGranularity(), 1);
  // Whole allocation units only: a volume cannot use a partial one.
  available = available / granularity * granularity;
  // The largest volume of an encrypted class gives its pod all but the
  // LUKS2 header the controller adds to the device.
  available = UsableBytes(available, HeaderBytes(params.encrypted));
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

// ---- ControllerGetVolume: read-only; NOT_FOUND for an unknown id. -------
grpc::Status ControllerService::ControllerGetVolume(grpc::ServerContext*,
                                                    const csi::v1::ControllerGetVolumeRequest* request,
                                                    csi::v1::ControllerGetVolumeResponse* response) {
  return ToGrpcStatus(DescribeVolume(*request, response));
}

Status ControllerService::DescribeVolume(const csi::v1::ControllerGetVolumeRequest& request,
                                         csi::v1::ControllerGetVolumeResponse* response) {
  const std::string& id = request.volume_id();
  if (id.empty()) return InvalidArgument("ControllerGetVolume: volume_id is required");
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeRecord record, GetVolumeRecord(*backend_, id));
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
