// The one logging boundary of every gRPC server: an interceptor that gives
// each call a request id, logs the method with its redacted request, and logs
// the resulting code and duration. A request whose bytes do not parse as the
// method's message is answered here, for every service alike, with
// INVALID_ARGUMENT naming the method (gRPC's own answer is INTERNAL with no
// message). Install with AddRpcLogging().
#pragma once

#include <grpcpp/server_builder.h>

namespace blockcsi {

void AddRpcLogging(grpc::ServerBuilder& builder);

}  // namespace blockcsi
