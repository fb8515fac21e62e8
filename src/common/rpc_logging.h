// The one logging boundary of every gRPC server: an interceptor that gives
// each call a request id, logs the method with its redacted request, and logs
// the resulting code and duration. Install with AddRpcLogging().
#pragma once

#include <grpcpp/server_builder.h>

namespace blockcsi {

void AddRpcLogging(grpc::ServerBuilder& builder);

}  // namespace blockcsi
