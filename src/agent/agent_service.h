// TargetAgentService: serves a VolumeBackend (the agent's LocalBackend) over
// proto/target.proto. No logic of its own: convert, call, convert back, so
// that local and remote behave the same. Thread-safe (the backend is).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "target.grpc.pb.h"

namespace blockcsi {

class TargetAgentService final : public ::blockcsi::target::v1::TargetAgent::Service {
 public:
  explicit TargetAgentService(std::shared_ptr<VolumeBackend> backend) : backend_(std::move(backend)) {}

  using Context = grpc::ServerContext;
  using GetInfoRequest = ::blockcsi::target::v1::GetInfoRequest;
  using GetInfoResponse = ::blockcsi::target::v1::GetInfoResponse;

  grpc::Status GetInfo(Context*, const GetInfoRequest*, GetInfoResponse*) override;
  grpc::Status Probe(Context*, const ::blockcsi::target::v1::ProbeRequest*,
                     ::blockcsi::target::v1::ProbeResponse*) override;
  grpc::Status CreateVolume(Context*, const ::blockcsi::target::v1::CreateVolumeRequest*,
                            ::blockcsi::target::v1::Volume*) override;
  grpc::Status DeleteVolume(Context*, const ::blockcsi::target::v1::DeleteVolumeRequest*,
                            ::blockcsi::target::v1::DeleteVolumeResponse*) override;
  grpc::Status ExpandVolume(Context*, const ::blockcsi::target::v1::ExpandVolumeRequest*,
                            ::blockcsi::target::v1::Volume*) override;
  grpc::Status GrantAccess(Context*, const ::blockcsi::target::v1::GrantAccessRequest*,
                           ::blockcsi::target::v1::Volume*) override;
  grpc::Status RevokeAccess(Context*, const ::blockcsi::target::v1::RevokeAccessRequest*,
                            ::blockcsi::target::v1::RevokeAccessResponse*) override;
  grpc::Status FenceNode(Context*, const ::blockcsi::target::v1::FenceNodeRequest*,
                         ::blockcsi::target::v1::Fence*) override;
  grpc::Status UnfenceNode(Context*, const ::blockcsi::target::v1::UnfenceNodeRequest*,
                           ::blockcsi::target::v1::UnfenceNodeResponse*) override;
  grpc::Status ListFences(Context*, const ::blockcsi::target::v1::ListFencesRequest*,
                          ::blockcsi::target::v1::ListFencesResponse*) override;
  grpc::Status GetVolume(Context*, const ::blockcsi::target::v1::GetVolumeRequest*,
                         ::blockcsi::target::v1::Volume*) override;
  grpc::Status CheckVolume(Context*, const ::blockcsi::target::v1::CheckVolumeRequest*,
                           ::blockcsi::target::v1::CheckVolumeResponse*) override;
  grpc::Status ListVolumes(Context*, const ::blockcsi::target::v1::ListVolumesRequest*,
                           ::blockcsi::target::v1::ListVolumesResponse*) override;
  grpc::Status GetCapacity(Context*, const ::blockcsi::target::v1::GetCapacityRequest*,
                           ::blockcsi::target::v1::GetCapacityResponse*) override;
  grpc::Status CreateSnapshot(Context*, const ::blockcsi::target::v1::CreateSnapshotRequest*,
                              ::blockcsi::target::v1::Snapshot*) override;
  grpc::Status DeleteSnapshot(Context*, const ::blockcsi::target::v1::DeleteSnapshotRequest*,
                              ::blockcsi::target::v1::DeleteSnapshotResponse*) override;
  grpc::Status SetWrappedDataKey(Context*, const ::blockcsi::target::v1::SetWrappedDataKeyRequest*,
                                 ::blockcsi::target::v1::SetWrappedDataKeyResponse*) override;
  grpc::Status GetSnapshot(Context*, const ::blockcsi::target::v1::GetSnapshotRequest*,
                           ::blockcsi::target::v1::Snapshot*) override;
  grpc::Status ListSnapshots(Context*, const ::blockcsi::target::v1::ListSnapshotsRequest*,
                             ::blockcsi::target::v1::ListSnapshotsResponse*) override;

 private:
  const std::shared_ptr<VolumeBackend> backend_;
};

}  // namespace blockcsi
