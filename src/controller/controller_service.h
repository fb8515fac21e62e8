// CSI Controller: turns the sidecars' calls (external-provisioner, -attacher,
// -resizer, -snapshotter) into VolumeBackend operations, with the argument
// checks and the error codes the CSI spec names. Thread-safe: the backend is
// thread-safe, and concurrent operations on one volume id, one volume name or
// one snapshot are refused with ABORTED (the sidecars retry) instead of
// racing. Arguments are validated before any lock is taken. A request's
// secrets reach the backend as the view WithSecrets binds to them
// (backend.h), GetCapacity's parameters and segment as its CapacityQuery.
//
// Node limits: the controller never sees NodeGetInfo. It enforces the same
// --max-volumes-per-node the node advertises (pass the flag to both) by
// counting that node's grants across the backend before a new grant; the
// scheduler and the external-attacher enforce the CSINode limit first, so
// this is the backstop for a stale scheduler view or volumes attached
// outside Kubernetes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "common/inflight.h"
#include "common/keyed_lock.h"
#include "common/status.h"
#include "controller/fencing.h"
#include "csi.grpc.pb.h"

namespace blockcsi {

struct ControllerOptions {
  // 0: no limit (the node advertises none either).
  int64_t max_volumes_per_node = 0;
  // Size of a volume made with no capacity_range (and no content source).
  uint64_t default_volume_bytes = uint64_t{1} << 30;
  // Tells whether a node exists (e.g. a Kubernetes Node lookup). Empty: the
  // controller cannot tell, and any well-formed node id is taken at its word.
  std::function<StatusOr<bool>(const std::string& node_id)> node_exists;
  // The smallest device `fs_type`'s mkfs formats (FilesystemMinimums; 0:
  // none). A volume with a mount capability is made at least that large
  // (OUT_OF_RANGE when limit_bytes forbids). Empty: no floor.
  std::function<uint64_t(const std::string& fs_type)> fs_minimum_bytes;
  // Fenced nodes (controller/fencing.h): ControllerPublish to one is
  // FAILED_PRECONDITION naming the fence, ControllerUnpublish from one is OK
  // at once. Null: no fencing.
  std::shared_ptr<NodeFencer> fencer;
};

class ControllerService final : public csi::v1::Controller::Service {
 public:
  ControllerService(std::shared_ptr<VolumeBackend> backend, ControllerOptions options);
  ControllerService(const ControllerService&) = delete;
  ControllerService& operator=(const ControllerService&) = delete;

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
  // Each RPC's body behind its handler, named for the step it takes (as the
  // node's Stage and Publish are): the handlers above only map its status.
  Status Provision(const csi::v1::CreateVolumeRequest& request, csi::v1::CreateVolumeResponse* response);
  Status Deprovision(const csi::v1::DeleteVolumeRequest& request);
  Status Publish(const csi::v1::ControllerPublishVolumeRequest& request,
                 csi::v1::ControllerPublishVolumeResponse* response);
  Status PublishStatic(const csi::v1::ControllerPublishVolumeRequest& request,
                       const std::map<std::string, std::string>& volume_context, bool read_only,
                       csi::v1::ControllerPublishVolumeResponse* response);
  Status Unpublish(const csi::v1::ControllerUnpublishVolumeRequest& request);
  Status Validate(const csi::v1::ValidateVolumeCapabilitiesRequest& request,
                  csi::v1::ValidateVolumeCapabilitiesResponse* response);
  Status ListVolumePage(const csi::v1::ListVolumesRequest& request, csi::v1::ListVolumesResponse* response);
  Status Capacity(const csi::v1::GetCapacityRequest& request, csi::v1::GetCapacityResponse* response);
  Status TakeSnapshot(const csi::v1::CreateSnapshotRequest& request, csi::v1::CreateSnapshotResponse* response);
  Status RemoveSnapshot(const csi::v1::DeleteSnapshotRequest& request);
  Status ListSnapshotPage(const csi::v1::ListSnapshotsRequest& request, csi::v1::ListSnapshotsResponse* response);
  Status FindSnapshot(const csi::v1::GetSnapshotRequest& request, csi::v1::GetSnapshotResponse* response);
  Status Expand(const csi::v1::ControllerExpandVolumeRequest& request,
                csi::v1::ControllerExpandVolumeResponse* response);
  Status DescribeVolume(const csi::v1::ControllerGetVolumeRequest& request,
                        csi::v1::ControllerGetVolumeResponse* response);

  // The backend that serves a request carrying `secrets`: backend_'s view
  // bound to them, or backend_ itself when there are none or it takes none.
  std::shared_ptr<VolumeBackend> BackendFor(const google::protobuf::Map<std::string, std::string>& secrets) const;
  // The backend's record, NOT_FOUND naming the volume when it is missing.
  StatusOr<VolumeRecord> GetVolumeRecord(VolumeBackend& backend, const std::string& volume_id);
  // Grants held by `node_id` across every volume but `except_volume_id`.
  StatusOr<int64_t> CountGrantsOnNode(VolumeBackend& backend, const std::string& node_id,
                                      const std::string& except_volume_id);

  const std::shared_ptr<VolumeBackend> backend_;
  const ControllerOptions options_;
  InFlightGuard volume_ops_;    // keyed by volume id
  InFlightGuard name_ops_;      // keyed by CreateVolume name
  InFlightGuard snapshot_ops_;  // keyed by snapshot name and id

  // Per node: serializes the count-then-grant so that two publishes of
  // different volumes to a full node cannot both pass the limit.
  KeyedLock node_limit_locks_;
};

}  // namespace blockcsi
