#include "controller/call_scoping_controller.h"

#include "backend/call_scope.h"

namespace blockcsi {
namespace {

using ProtoMap = google::protobuf::Map<std::string, std::string>;

std::map<std::string, std::string> ToMap(const ProtoMap& in) { return {in.begin(), in.end()}; }

CallScope Secrets(const ProtoMap& secrets) { return CallScope{ToMap(secrets), {}}; }

}  // namespace

// Each method: install the scope, call the inner service, drop the scope.
#define BLOCKCSI_SCOPED(Method, Request, Response, scope_expr)                                              \
  grpc::Status CallScopingController::Method(grpc::ServerContext* context, const csi::v1::Request* request, \
                                             csi::v1::Response* response) {                                 \
    ScopedCall scope(scope_expr);                                                                           \
    return inner_->Method(context, request, response);                                                      \
  }

BLOCKCSI_SCOPED(CreateVolume, CreateVolumeRequest, CreateVolumeResponse,
                (CallScope{ToMap(request->secrets()), ToMap(request->parameters())}))
BLOCKCSI_SCOPED(DeleteVolume, DeleteVolumeRequest, DeleteVolumeResponse, Secrets(request->secrets()))
BLOCKCSI_SCOPED(ControllerPublishVolume, ControllerPublishVolumeRequest, ControllerPublishVolumeResponse,
                Secrets(request->secrets()))
BLOCKCSI_SCOPED(ControllerUnpublishVolume, ControllerUnpublishVolumeRequest, ControllerUnpublishVolumeResponse,
                Secrets(request->secrets()))
BLOCKCSI_SCOPED(ValidateVolumeCapabilities, ValidateVolumeCapabilitiesRequest, ValidateVolumeCapabilitiesResponse,
                Secrets(request->secrets()))
BLOCKCSI_SCOPED(ListVolumes, ListVolumesRequest, ListVolumesResponse, CallScope{})
BLOCKCSI_SCOPED(GetCapacity, GetCapacityRequest, GetCapacityResponse,
                (CallScope{{}, ToMap(request->parameters()), ToMap(request->accessible_topology().segments())}))
BLOCKCSI_SCOPED(ControllerGetCapabilities, ControllerGetCapabilitiesRequest, ControllerGetCapabilitiesResponse,
                CallScope{})
BLOCKCSI_SCOPED(CreateSnapshot, CreateSnapshotRequest, CreateSnapshotResponse, Secrets(request->secrets()))
BLOCKCSI_SCOPED(DeleteSnapshot, DeleteSnapshotRequest, DeleteSnapshotResponse, Secrets(request->secrets()))
BLOCKCSI_SCOPED(ListSnapshots, ListSnapshotsRequest, ListSnapshotsResponse, Secrets(request->secrets()))
BLOCKCSI_SCOPED(GetSnapshot, GetSnapshotRequest, GetSnapshotResponse, Secrets(request->secrets()))
BLOCKCSI_SCOPED(ControllerExpandVolume, ControllerExpandVolumeRequest, ControllerExpandVolumeResponse,
                Secrets(request->secrets()))
BLOCKCSI_SCOPED(ControllerGetVolume, ControllerGetVolumeRequest, ControllerGetVolumeResponse, CallScope{})

#undef BLOCKCSI_SCOPED

}  // namespace blockcsi
