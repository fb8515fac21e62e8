// CSI Identity: who we are, what we offer, and whether we are ready.
// Thread-safe: all state is fixed at construction.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "csi.grpc.pb.h"

namespace blockcsi {

// A readiness check names what it checks; Probe reports not-ready with the
// failing check's message.
struct ReadinessCheck {
  std::string name;
  std::function<Status()> check;
};

class IdentityService final : public csi::v1::Identity::Service {
 public:
  IdentityService(std::string driver_name, bool controller_enabled, std::vector<ReadinessCheck> checks);

  grpc::Status GetPluginInfo(grpc::ServerContext* context, const csi::v1::GetPluginInfoRequest* request,
                             csi::v1::GetPluginInfoResponse* response) override;
  grpc::Status GetPluginCapabilities(grpc::ServerContext* context, const csi::v1::GetPluginCapabilitiesRequest* request,
                                     csi::v1::GetPluginCapabilitiesResponse* response) override;
  grpc::Status Probe(grpc::ServerContext* context, const csi::v1::ProbeRequest* request,
                     csi::v1::ProbeResponse* response) override;

 private:
  const std::string driver_name_;
  const bool controller_enabled_;
  const std::vector<ReadinessCheck> checks_;
};

}  // namespace blockcsi
