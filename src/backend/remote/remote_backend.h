// RemoteBackend: the VolumeBackend reached through a blockcsi-target agent
// (proto/target.proto) — a thin gRPC client, so the logic lives only in the
// agent's LocalBackend. mTLS by default: the client presents --tls-cert/key
// and trusts only --tls-ca; plain TCP only with insecure = true. Thread-safe
// (a gRPC channel and stub are).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "common/status.h"

namespace blockcsi {

struct RemoteBackendOptions {
  std::string target;                     // HOST:PORT, or unix:///path for an agent on this host
  std::string tls_cert, tls_key, tls_ca;  // file paths
  bool insecure = false;
  // Deadline of each call; creates and snapshots copy data, so be generous.
  std::chrono::milliseconds call_timeout{std::chrono::minutes(5)};
  // How long MakeRemoteBackend waits for the agent's GetInfo at start; when it
  // does not answer in time, defaults are used and calls fail UNAVAILABLE
  // until it does.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(5)};
};

StatusOr<std::shared_ptr<VolumeBackend>> MakeRemoteBackend(const RemoteBackendOptions& options);

}  // namespace blockcsi
