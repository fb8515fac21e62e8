#include "cmd/identity_service.h"

#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/version.h"

namespace blockcsi {

IdentityService::IdentityService(std::string driver_name, bool controller_enabled, std::vector<ReadinessCheck> checks)
    : driver_name_(std::move(driver_name)), controller_enabled_(controller_enabled), checks_(std::move(checks)) {}

grpc::Status IdentityService::GetPluginInfo(grpc::ServerContext*, const csi::v1::GetPluginInfoRequest*,
                                            csi::v1::GetPluginInfoResponse* response) {
  response->set_name(driver_name_);
  response->set_vendor_version(std::string(BuildVersion()));
  (*response->mutable_manifest())["commit"] = std::string(BuildCommit());
  return grpc::Status::OK;
}

grpc::Status IdentityService::GetPluginCapabilities(grpc::ServerContext*, const csi::v1::GetPluginCapabilitiesRequest*,
                                                    csi::v1::GetPluginCapabilitiesResponse* response) {
  using Service = csi::v1::PluginCapability::Service;
  using Expansion = csi::v1::PluginCapability::VolumeExpansion;
  if (controller_enabled_) {
    response->add_capabilities()->mutable_service()->set_type(Service::CONTROLLER_SERVICE);
  }
  response->add_capabilities()->mutable_service()->set_type(Service::VOLUME_ACCESSIBILITY_CONSTRAINTS);
  response->add_capabilities()->mutable_volume_expansion()->set_type(Expansion::ONLINE);
  return grpc::Status::OK;
}

grpc::Status IdentityService::Probe(grpc::ServerContext*, const csi::v1::ProbeRequest*,
                                    csi::v1::ProbeResponse* response) {
  for (const auto& check : checks_) {
    Status st = check.check();
    if (!st.ok()) {
      // Not ready is an answer, not an error: the CO keeps probing.
      LogWarn("probe: not ready", {{"check", check.name}, {"reason", st.message()}});
      response->mutable_ready()->set_value(false);
      return grpc::Status::OK;
    }
  }
  response->mutable_ready()->set_value(true);
  return grpc::Status::OK;
}

}  // namespace blockcsi
