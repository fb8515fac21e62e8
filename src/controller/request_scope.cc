#include "controller/request_scope.h"

namespace blockcsi {
namespace {

std::map<std::string, std::string> ToMap(const google::protobuf::Map<std::string, std::string>& in) {
  return {in.begin(), in.end()};
}

}  // namespace

CallScope SecretsScope(const google::protobuf::Map<std::string, std::string>& secrets) {
  return CallScope{ToMap(secrets), {}};
}

CallScope RequestScope(const csi::v1::CreateVolumeRequest& request) {
  return CallScope{ToMap(request.secrets()), ToMap(request.parameters())};
}

CallScope RequestScope(const csi::v1::GetCapacityRequest& request) {
  return CallScope{{}, ToMap(request.parameters()), ToMap(request.accessible_topology().segments())};
}

}  // namespace blockcsi
