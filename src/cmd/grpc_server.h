// Serves a set of gRPC services on a unix socket until SIGTERM or SIGINT,
// then stops accepting and gives in-flight calls `grace` to finish.
#pragma once

#include <grpcpp/impl/codegen/service_type.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace blockcsi {

// The limits each of our gRPC servers sets on purpose instead of taking
// gRPC's defaults (documented in docs/deploy.md, "Server
// limits"). Our messages are small (the largest, a ListVolumes page of
// 1,000 volumes, is under 1 MiB), calls are short, clients are few.
struct ServerLimits {
  // A request larger than this is refused with RESOURCE_EXHAUSTED unread.
  int max_receive_message_bytes = 4 << 20;
  int max_send_message_bytes = 32 << 20;
  // A connection that has not finished its TLS (or HTTP/2) handshake by
  // then is closed: idle unauthenticated sockets cannot pile up for long
  // (gRPC's default is 120 s).
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  // Calls in flight on one connection.
  int max_concurrent_streams = 32;
  // Server pings after this much silence and drops a peer that does not
  // answer within the timeout; clients may ping no more often than every
  // 10 s (more is a ping flood, answered with GOAWAY).
  std::chrono::milliseconds keepalive_time{std::chrono::minutes(1)};
  std::chrono::milliseconds keepalive_timeout{std::chrono::seconds(20)};
  // A connection without a call for this long is closed (its memory too).
  std::chrono::milliseconds max_connection_idle{std::chrono::minutes(5)};
  // Threads serving calls, and memory all connections may take; past
  // either, new calls get RESOURCE_EXHAUSTED instead of the host's memory.
  int max_threads = 64;
  long long max_memory_bytes = 256ll << 20;
};

// Applies `limits` to a builder (before BuildAndStart).
void ApplyServerLimits(grpc::ServerBuilder& builder, const ServerLimits& limits);

// Call first thing in main(), before any thread exists, so that every
// thread inherits the blocked set and only ServeUntilSignal sees them.
void BlockTerminationSignals();

// Blocks until SIGTERM or SIGINT arrives (BlockTerminationSignals first) and
// returns the signal's name for the log.
const char* WaitForTerminationSignal();

// Serves `services` on the unix socket `endpoint` until SIGTERM/SIGINT, then
// shuts down within `grace`.
Status ServeUntilSignal(const std::string& endpoint, const std::vector<grpc::Service*>& services,
                        std::chrono::milliseconds grace);

}  // namespace blockcsi
