// FencingService: proto/fencing.proto over a NodeFencer, served on the
// controller's socket for `blockctl fences|fence|unfence`. Thread-safe (the
// fencer is).
#pragma once

#include <memory>

#include "controller/fencing.h"
#include "fencing.grpc.pb.h"

namespace blockcsi {

class FencingService final : public ::blockcsi::fencing::v1::Fencing::Service {
 public:
  explicit FencingService(std::shared_ptr<NodeFencer> fencer) : fencer_(std::move(fencer)) {}

  grpc::Status ListFences(grpc::ServerContext* context, const ::blockcsi::fencing::v1::ListFencesRequest* request,
                          ::blockcsi::fencing::v1::ListFencesResponse* response) override;
  grpc::Status FenceNode(grpc::ServerContext* context, const ::blockcsi::fencing::v1::FenceNodeRequest* request,
                         ::blockcsi::fencing::v1::NodeFence* response) override;
  grpc::Status UnfenceNode(grpc::ServerContext* context, const ::blockcsi::fencing::v1::UnfenceNodeRequest* request,
                           ::blockcsi::fencing::v1::UnfenceNodeResponse* response) override;

 private:
  const std::shared_ptr<NodeFencer> fencer_;
};

// The wire form of a fence, for the service and its tests.
void ToProto(const NodeFence& in, ::blockcsi::fencing::v1::NodeFence* out);

}  // namespace blockcsi
