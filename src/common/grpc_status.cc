#include "common/grpc_status.h"

#include <algorithm>
#include <string>

namespace blockcsi {

namespace {

// gRPC carries the message in a header (grpc-message); clients refuse
// headers past 8 KiB by default, so an error built from a huge request
// field could not even be received. Control bytes would also
// reach the client's logs raw. Bounded and escaped here, at the boundary.
constexpr size_t kMaxMessageBytes = 2048;

std::string ForTheWire(const std::string& message) {
  std::string out;
  out.reserve(std::min(message.size(), kMaxMessageBytes) + 32);
  for (char c : message) {
    if (out.size() >= kMaxMessageBytes) {
      out += "... (" + std::to_string(message.size()) + " bytes)";
      break;
    }
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // StatusCode mirrors grpc::StatusCode value for value (see status.h).
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), ForTheWire(status.message()));
}

Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return OkStatus();
  int code = static_cast<int>(status.error_code());
  if (code < 0 || code > static_cast<int>(StatusCode::kUnauthenticated)) code = static_cast<int>(StatusCode::kUnknown);
  return Status(static_cast<StatusCode>(code), status.error_message());
}

}  // namespace blockcsi
