#include "controller/fencing_service.h"

#include "common/grpc_status.h"

namespace blockcsi {

namespace fpb = ::blockcsi::fencing::v1;

void ToProto(const NodeFence& in, fpb::NodeFence* out) {
  out->set_node_id(in.node_id);
  out->set_since_unix_seconds(in.since_unix_seconds);
  out->set_fence_id(in.id());
  out->set_cleaned_up(in.cleaned_up);
  for (const auto& held : in.held) {
    auto* h = out->add_held();
    h->set_volume_id(held.grant.volume_id);
    h->set_host(held.host);
    h->set_read_only(held.grant.grant.read_only);
    h->set_capability(held.grant.grant.capability);
  }
  for (const auto& [host, reason] : in.pending) {
    auto* p = out->add_pending();
    p->set_host(host);
    p->set_reason(reason);
  }
}

grpc::Status FencingService::ListFences(grpc::ServerContext*, const fpb::ListFencesRequest*,
                                        fpb::ListFencesResponse* response) {
  // "Cleaned up" as the nodes reported it, not as the last unfence saw it.
  fencer_->RefreshReports();
  for (const auto& fence : fencer_->List()) ToProto(fence, response->add_fences());
  return grpc::Status::OK;
}

grpc::Status FencingService::FenceNode(grpc::ServerContext*, const fpb::FenceNodeRequest* request,
                                       fpb::NodeFence* response) {
  if (request->node_id().empty()) return ToGrpcStatus(InvalidArgument("FenceNode: node_id is required"));
  auto fence = fencer_->Fence(request->node_id());
  if (!fence.ok()) return ToGrpcStatus(fence.status());
  ToProto(*fence, response);
  return grpc::Status::OK;
}

grpc::Status FencingService::UnfenceNode(grpc::ServerContext*, const fpb::UnfenceNodeRequest* request,
                                         fpb::UnfenceNodeResponse*) {
  if (request->node_id().empty()) return ToGrpcStatus(InvalidArgument("UnfenceNode: node_id is required"));
  return ToGrpcStatus(fencer_->Unfence(request->node_id(), request->force()));
}

}  // namespace blockcsi
