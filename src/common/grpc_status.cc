#include "common/grpc_status.h"

namespace blockcsi {

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // StatusCode mirrors grpc::StatusCode value for value (see status.h).
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return OkStatus();
  int code = static_cast<int>(status.error_code());
  if (code < 0 || code > static_cast<int>(StatusCode::kUnauthenticated)) code = static_cast<int>(StatusCode::kUnknown);
  return Status(static_cast<StatusCode>(code), status.error_message());
}

}  // namespace blockcsi
