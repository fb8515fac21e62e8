// Serves a set of gRPC services on a unix socket until SIGTERM or SIGINT,
// then stops accepting and gives in-flight calls `grace` to finish.
#pragma once

#include <grpcpp/impl/codegen/service_type.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace blockcsi {

// Call first thing in main(), before any thread exists, so that every
// thread inherits the blocked set and only ServeUntilSignal sees them.
void BlockTerminationSignals();

Status ServeUntilSignal(const std::string& endpoint, const std::vector<grpc::Service*>& services,
                        std::chrono::milliseconds grace);

}  // namespace blockcsi
