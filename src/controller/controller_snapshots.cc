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

// CreateSnapshot, DeleteSnapshot, ListSnapshots and GetSnapshot.
namespace blockcsi {

using namespace controller_internal;  // NOLINT(google-build-using-namespace): the controller_*.cc files share these
                                      // helpers

// ---- CreateSnapshot -----------------------------------------------------
// Idempotent by name: same name and source → the existing snapshot; same
// name, other source → ALREADY_EXISTS; missing source volume → NOT_FOUND.
grpc::Status ControllerService::CreateSnapshot(grpc::ServerContext*, const csi::v1::CreateSnapshotRequest* request,
                                               csi::v1::CreateSnapshotResponse* response) {
  return ToGrpcStatus(TakeSnapshot(*request, response));
}

Status ControllerService::TakeSnapshot(const csi::v1::CreateSnapshotRequest& request,
                                       csi::v1::CreateSnapshotResponse* response) {
  const std::shared_ptr<VolumeBackend> backend = BackendFor(request.secrets());
  const std::string& name = request.name();
  const std::string& source = request.source_volume_id();
  if (name.empty()) return InvalidArgument("CreateSnapshot: name is required");
  if (source.empty())
    return InvalidArgument("CreateSnapshot: snapshot name " + Quoted(name) + ": source_volume_id is required");
  BLOCKCSI_RETURN_IF_ERROR(ValidateSnapshotParameters({request.parameters().begin(), request.parameters().end()})
                               .WithContext("snapshot name " + Quoted(name)));
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, snapshot_ops_.Acquire("name:" + name, "CreateSnapshot"));
  auto record = backend->CreateSnapshot(source, name);
  if (!record.ok()) {
    if (IsMissing(record.status())) {
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
  return ToGrpcStatus(RemoveSnapshot(*request));
}

Status ControllerService::RemoveSnapshot(const csi::v1::DeleteSnapshotRequest& request) {
  const std::shared_ptr<VolumeBackend> backend = BackendFor(request.secrets());
  const std::string& id = request.snapshot_id();
  if (id.empty()) return InvalidArgument("DeleteSnapshot: snapshot_id is required");
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, snapshot_ops_.Acquire("id:" + id, "DeleteSnapshot"));
  Status st = backend->DeleteSnapshot(id);
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
  return ToGrpcStatus(ListSnapshotPage(*request, response));
}

Status ControllerService::ListSnapshotPage(const csi::v1::ListSnapshotsRequest& request,
                                           csi::v1::ListSnapshotsResponse* response) {
  const std::shared_ptr<VolumeBackend> backend = BackendFor(request.secrets());
  if (request.max_entries() < 0) return InvalidArgument("ListSnapshots: max_entries must not be negative");
  if (!request.snapshot_id().empty()) {
    auto record = backend->GetSnapshot(request.snapshot_id());
    if (!record.ok()) {
      if (IsMissing(record.status())) return OkStatus();
      return Named(record.status(), "snapshot", request.snapshot_id());
    }
    if (request.source_volume_id().empty() || record->source_volume_id == request.source_volume_id()) {
      FillSnapshot(*record, response->add_entries()->mutable_snapshot());
    }
    return OkStatus();
  }
  auto page = backend->ListSnapshots(request.source_volume_id(), request.starting_token(), request.max_entries());
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
  return ToGrpcStatus(FindSnapshot(*request, response));
}

Status ControllerService::FindSnapshot(const csi::v1::GetSnapshotRequest& request,
                                       csi::v1::GetSnapshotResponse* response) {
  const std::shared_ptr<VolumeBackend> backend = BackendFor(request.secrets());
  const std::string& id = request.snapshot_id();
  if (id.empty()) return InvalidArgument("GetSnapshot: snapshot_id is required");
  auto record = backend->GetSnapshot(id);
  if (!record.ok()) {
    if (IsMissing(record.status())) return NotFound("snapshot " + Quoted(id) + " does not exist");
    return Named(record.status(), "snapshot", id);
  }
  FillSnapshot(*record, response->mutable_snapshot());
  return OkStatus();
}

}  // namespace blockcsi
