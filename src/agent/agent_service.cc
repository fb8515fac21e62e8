#include "agent/agent_service.h"

#include "backend/remote/target_proto.h"
#include "backend/volume_id.h"
#include "common/fault_points.h"
#include "common/grpc_status.h"
#include "common/metrics.h"

namespace blockcsi {

using namespace ::blockcsi::target::v1;  // NOLINT(google-build-using-namespace): the service's own messages

namespace {
// The backend's crash points are named "controller.<op>.<step>" (that is
// where it runs with --backend local); in this process they answer to
// "agent.<op>.<step>", so a fault test can kill the agent and not the plugin.
constexpr std::string_view kFaultRole = "agent";
}  // namespace

grpc::Status TargetAgentService::GetInfo(Context*, const GetInfoRequest*, GetInfoResponse* out) {
  out->set_name(backend_->Name());
  out->set_allocation_granularity(backend_->AllocationGranularity());
  for (const auto& p : backend_->SupportedParameters()) out->add_supported_parameters(p);
  return grpc::Status::OK;
}

grpc::Status TargetAgentService::Probe(Context*, const ProbeRequest*, ProbeResponse*) {
  return ToGrpcStatus(backend_->Healthy());
}

grpc::Status TargetAgentService::CreateVolume(Context*, const CreateVolumeRequest* in, Volume* out) {
  FaultPointScope fault_scope(kFaultRole);
  CreateVolumeSpec spec;
  spec.name = in->name();
  spec.size_bytes = in->size_bytes();
  auto source = FromProto(in->source());
  if (!source.ok()) return ToGrpcStatus(source.status().WithContext("volume " + QuoteId(in->name())));
  spec.source = *source;
  spec.parameters.insert(in->parameters().begin(), in->parameters().end());
  auto r = backend_->CreateVolume(spec);
  if (!r.ok()) return ToGrpcStatus(r.status());
  ToProto(*r, out);
  return grpc::Status::OK;
}

grpc::Status TargetAgentService::DeleteVolume(Context*, const DeleteVolumeRequest* in, DeleteVolumeResponse*) {
  FaultPointScope fault_scope(kFaultRole);
  return ToGrpcStatus(backend_->DeleteVolume(in->volume_id()));
}

grpc::Status TargetAgentService::ExpandVolume(Context*, const ExpandVolumeRequest* in, Volume* out) {
  FaultPointScope fault_scope(kFaultRole);
  auto r = backend_->ExpandVolume(in->volume_id(), in->new_size_bytes());
  if (!r.ok()) return ToGrpcStatus(r.status());
  ToProto(*r, out);
  return grpc::Status::OK;
}

grpc::Status TargetAgentService::GrantAccess(Context*, const GrantAccessRequest* in, Volume* out) {
  FaultPointScope fault_scope(kFaultRole);
  AccessGrant grant;
  grant.initiator_iqn = in->initiator_iqn();
  grant.node_id = in->node_id();
  grant.read_only = in->read_only();
  grant.capability = in->capability();
  grant.chap = FromProto(in->chap());
  auto r = backend_->GrantAccess(in->volume_id(), grant);
  RecordTargetOperation("grant", r.status());
  if (!r.ok()) return ToGrpcStatus(r.status());
  ToProto(*r, out);
  return grpc::Status::OK;
}

grpc::Status TargetAgentService::RevokeAccess(Context*, const RevokeAccessRequest* in, RevokeAccessResponse*) {
  FaultPointScope fault_scope(kFaultRole);
  Status revoked = backend_->RevokeAccess(in->volume_id(), in->initiator_iqn());
  RecordTargetOperation("revoke", revoked);
  return ToGrpcStatus(revoked);
}

// The agent serves one host: its backend answers once.
grpc::Status TargetAgentService::FenceNode(Context*, const FenceNodeRequest* in, Fence* out) {
  FaultPointScope fault_scope(kFaultRole);
  std::vector<HostFences> answers = backend_->FenceNode(in->node_id(), in->initiator_iqn());
  for (const auto& answer : answers) {
    RecordTargetOperation("fence", answer.status);
    if (!answer.status.ok()) return ToGrpcStatus(answer.status);
    for (const auto& fence : answer.fences) ToProto(fence, out);
  }
  return grpc::Status::OK;
}

grpc::Status TargetAgentService::UnfenceNode(Context*, const UnfenceNodeRequest* in, UnfenceNodeResponse*) {
  FaultPointScope fault_scope(kFaultRole);
  for (const auto& answer : backend_->UnfenceNode(in->node_id())) {
    RecordTargetOperation("unfence", answer.status);
    if (!answer.status.ok()) return ToGrpcStatus(answer.status);
  }
  return grpc::Status::OK;
}

grpc::Status TargetAgentService::ListFences(Context*, const ListFencesRequest*, ListFencesResponse* out) {
  for (const auto& answer : backend_->ListFences()) {
    if (!answer.status.ok()) return ToGrpcStatus(answer.status);
    for (const auto& fence : answer.fences) ToProto(fence, out->add_fences());
  }
  return grpc::Status::OK;
}

grpc::Status TargetAgentService::GetVolume(Context*, const GetVolumeRequest* in, Volume* out) {
  auto r = backend_->GetVolume(in->volume_id());
  if (!r.ok()) return ToGrpcStatus(r.status());
  ToProto(*r, out);
  return grpc::Status::OK;
}

grpc::Status TargetAgentService::CheckVolume(Context*, const CheckVolumeRequest* in, CheckVolumeResponse* out) {
  FaultPointScope fault_scope(kFaultRole);
  auto r = backend_->CheckVolume(in->volume_id());
  if (!r.ok()) return ToGrpcStatus(r.status());
  out->set_abnormal(r->abnormal);
  out->set_message(r->message);
  return grpc::Status::OK;
}

grpc::Status TargetAgentService::ListVolumes(Context*, const ListVolumesRequest* in, ListVolumesResponse* out) {
  auto r = backend_->ListVolumes(in->start_token(), in->max_entries());
  if (!r.ok()) return ToGrpcStatus(r.status());
  for (const auto& v : r->items) ToProto(v, out->add_volumes());
  out->set_next_token(r->next_token);
  return grpc::Status::OK;
}

grpc::Status TargetAgentService::GetCapacity(Context*, const GetCapacityRequest*, GetCapacityResponse* out) {
  // The agent's pool is one host: no parameter or segment narrows it.
  auto r = backend_->AvailableBytes(CapacityQuery{});
  if (!r.ok()) return ToGrpcStatus(r.status());
  out->set_available_bytes(*r);
  return grpc::Status::OK;
}

grpc::Status TargetAgentService::CreateSnapshot(Context*, const CreateSnapshotRequest* in, Snapshot* out) {
  FaultPointScope fault_scope(kFaultRole);
  auto r = backend_->CreateSnapshot(in->source_volume_id(), in->name());
  if (!r.ok()) return ToGrpcStatus(r.status());
  ToProto(*r, out);
  return grpc::Status::OK;
}

grpc::Status TargetAgentService::DeleteSnapshot(Context*, const DeleteSnapshotRequest* in, DeleteSnapshotResponse*) {
  FaultPointScope fault_scope(kFaultRole);
  return ToGrpcStatus(backend_->DeleteSnapshot(in->snapshot_id()));
}

grpc::Status TargetAgentService::SetWrappedDataKey(Context*, const SetWrappedDataKeyRequest* in,
                                                   SetWrappedDataKeyResponse*) {
  FaultPointScope fault_scope(kFaultRole);
  return ToGrpcStatus(backend_->SetWrappedDataKey(in->id(), in->expected(), in->wrapped()));
}

grpc::Status TargetAgentService::GetSnapshot(Context*, const GetSnapshotRequest* in, Snapshot* out) {
  auto r = backend_->GetSnapshot(in->snapshot_id());
  if (!r.ok()) return ToGrpcStatus(r.status());
  ToProto(*r, out);
  return grpc::Status::OK;
}

grpc::Status TargetAgentService::ListSnapshots(Context*, const ListSnapshotsRequest* in, ListSnapshotsResponse* out) {
  auto r = backend_->ListSnapshots(in->source_volume_id(), in->start_token(), in->max_entries());
  if (!r.ok()) return ToGrpcStatus(r.status());
  for (const auto& s : r->items) ToProto(s, out->add_snapshots());
  out->set_next_token(r->next_token);
  return grpc::Status::OK;
}

}  // namespace blockcsi
