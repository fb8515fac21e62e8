// VolumeKeysService: proto/volume_keys.proto over RewrapDataKeys
// (key_rotation.h), served on the controller's socket for
// `blockctl rewrap-keys`. Thread-safe (the backend is). The keys arrive in
// csi_secret fields, so the logging boundary blanks them.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "volume_keys.grpc.pb.h"

namespace blockcsi {

class VolumeKeysService final : public ::blockcsi::keys::v1::VolumeKeys::Service {
 public:
  explicit VolumeKeysService(std::shared_ptr<VolumeBackend> backend) : backend_(std::move(backend)) {}

  grpc::Status RewrapDataKeys(grpc::ServerContext* context, const ::blockcsi::keys::v1::RewrapDataKeysRequest* request,
                              ::blockcsi::keys::v1::RewrapDataKeysResponse* response) override;

 private:
  const std::shared_ptr<VolumeBackend> backend_;
};

}  // namespace blockcsi
