// CallScopingController: a CSI Controller service in front of another (the
// ControllerService) that installs a CallScope (call_scope.h) with the
// request's secrets and parameters for the duration of each call, then
// hands the call on unchanged. This is how cephx credentials from the
// provisioner / controller-publish / controller-expand secrets reach the RBD
// backend without a change to ControllerService or VolumeBackend.
// Thread-safe (stateless besides the inner service, which is).
#pragma once

#include <memory>

#include "csi.grpc.pb.h"

namespace blockcsi {

class CallScopingController final : public csi::v1::Controller::Service {
 public:
  explicit CallScopingController(std::shared_ptr<csi::v1::Controller::Service> inner) : inner_(std::move(inner)) {}
  CallScopingController(const CallScopingController&) = delete;
  CallScopingController& operator=(const CallScopingController&) = delete;

  grpc::Status CreateVolume(grpc::ServerContext* context, const csi::v1::CreateVolumeRequest* request,
                            csi::v1::CreateVolumeResponse* response) override;
  grpc::Status DeleteVolume(grpc::ServerContext* context, const csi::v1::DeleteVolumeRequest* request,
                            csi::v1::DeleteVolumeResponse* response) override;
  grpc::Status ControllerPublishVolume(grpc::ServerContext* context,
                                       const csi::v1::ControllerPublishVolumeRequest* request,
                                       csi::v1::ControllerPublishVolumeResponse* response) override;
  grpc::Status ControllerUnpublishVolume(grpc::ServerContext* context,
                                         const csi::v1::ControllerUnpublishVolumeRequest* request,
                                         csi::v1::ControllerUnpublishVolumeResponse* response) override;
  grpc::Status ValidateVolumeCapabilities(grpc::ServerContext* context,
                                          const csi::v1::ValidateVolumeCapabilitiesRequest* request,
                                          csi::v1::ValidateVolumeCapabilitiesResponse* response) override;
  grpc::Status ListVolumes(grpc::ServerContext* context, const csi::v1::ListVolumesRequest* request,
                           csi::v1::ListVolumesResponse* response) override;
  grpc::Status GetCapacity(grpc::ServerContext* context, const csi::v1::GetCapacityRequest* request,
                           csi::v1::GetCapacityResponse* response) override;
  grpc::Status ControllerGetCapabilities(grpc::ServerContext* context,
                                         const csi::v1::ControllerGetCapabilitiesRequest* request,
                                         csi::v1::ControllerGetCapabilitiesResponse* response) override;
  grpc::Status CreateSnapshot(grpc::ServerContext* context, const csi::v1::CreateSnapshotRequest* request,
                              csi::v1::CreateSnapshotResponse* response) override;
  grpc::Status DeleteSnapshot(grpc::ServerContext* context, const csi::v1::DeleteSnapshotRequest* request,
                              csi::v1::DeleteSnapshotResponse* response) override;
  grpc::Status ListSnapshots(grpc::ServerContext* context, const csi::v1::ListSnapshotsRequest* request,
                             csi::v1::ListSnapshotsResponse* response) override;
  grpc::Status GetSnapshot(grpc::ServerContext* context, const csi::v1::GetSnapshotRequest* request,
                           csi::v1::GetSnapshotResponse* response) override;
  grpc::Status ControllerExpandVolume(grpc::ServerContext* context,
                                      const csi::v1::ControllerExpandVolumeRequest* request,
                                      csi::v1::ControllerExpandVolumeResponse* response) override;
  grpc::Status ControllerGetVolume(grpc::ServerContext* context, const csi::v1::ControllerGetVolumeRequest* request,
                                   csi::v1::ControllerGetVolumeResponse* response) override;

 private:
  const std::shared_ptr<csi::v1::Controller::Service> inner_;
};

}  // namespace blockcsi
