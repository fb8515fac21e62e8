// Serves a MetricsRegistry at GET (and HEAD) /metrics (Prometheus text
// format) over plain HTTP on one address, on a thread of its own, until
// destroyed (common/plain_http_server.h: no TLS library, no thread pool).
// Anything but GET/HEAD /metrics gets a 4xx and nothing else: a bad request
// to this port never reaches the driver's state.
#pragma once

#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/status.h"

namespace blockcsi {

class MetricsServer {
 public:
  virtual ~MetricsServer() = default;
  // The TCP port bound (the one asked for, or the kernel's pick for 0).
  virtual int port() const = 0;
};

// `address` is HOST:PORT or [V6]:PORT; INVALID_ARGUMENT when malformed,
// UNAVAILABLE when it cannot be bound.
StatusOr<std::unique_ptr<MetricsServer>> StartMetricsServer(const std::string& address, MetricsRegistry& registry);

// Sets blockcsi_build_info{program,version,commit} 1.
void RecordBuildInfo(const std::string& program);

}  // namespace blockcsi
