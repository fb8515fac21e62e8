// CSI endpoints: "unix:///abs/path.sock" parsing and safe socket takeover.
#pragma once

#include <string>
#include <string_view>

#include "common/host.h"
#include "common/status.h"

namespace blockcsi {

// "unix:///run/csi/csi.sock" or "unix:/run/csi/csi.sock" -> "/run/csi/csi.sock".
StatusOr<std::string> ParseUnixEndpoint(std::string_view endpoint);

// Makes `socket_path` ready to listen on: creates its directory; removes a
// stale socket file left by a dead server; refuses (FAILED_PRECONDITION)
// when a live server still answers on it, or when the path is not a socket.
// The file operations go through `host`.
Status PrepareUnixSocket(const Host& host, const std::string& socket_path);

}  // namespace blockcsi
