#include "cli/admin_rpc.h"

#include "common/endpoint.h"

namespace blockcsi::cli {

std::shared_ptr<grpc::Channel> AdminChannel(const GlobalOptions& options, const Io& io) {
  auto socket = ParseUnixEndpoint(options.endpoint);
  if (!socket.ok()) {
    io.Error(socket.status().message());
    return nullptr;
  }
  return grpc::CreateChannel("unix:" + *socket, grpc::InsecureChannelCredentials());
}

int AdminCallFailed(const Io& io, const std::string& what, const grpc::Status& status, const std::string& whose) {
  std::string hint;
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) hint = " (is --endpoint " + whose + "?)";
  io.Error(what + ": " + status.error_message() + hint);
  return kExitProblems;
}

}  // namespace blockcsi::cli
