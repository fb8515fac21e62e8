// The single conversion from our Status to grpc::Status (and back, for the
// remote backend's client). Stateless; thread-safe.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace blockcsi {

grpc::Status ToGrpcStatus(const Status& status);
Status FromGrpcStatus(const grpc::Status& status);

}  // namespace blockcsi
