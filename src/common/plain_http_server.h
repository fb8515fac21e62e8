// A small plain-HTTP/1.1 server for read-only text endpoints (/metrics):
// GET and HEAD of fixed paths, on one thread of its own that polls every
// connection, until destroyed. No TLS and no library behind it, so serving
// /metrics maps no OpenSSL and starts no thread pool (the
// cpp-httplib module cost a node plugin ~4 MiB of RSS for one scrape a
// minute). Bounded: a request head larger than `max_request_bytes` is
// refused, a request with a body is refused without reading it, at most
// `max_connections` are served at once (more wait in the listen backlog),
// and a connection silent for `idle_timeout` is closed. Nothing a client
// sends reaches anything but the routes' render functions.
// Thread-safety: Start and the destructor from one thread; the render
// functions run on the server's thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace blockcsi {

struct PlainHttpRoute {
  std::string path;  // matched exactly, query string ignored
  std::string content_type;
  std::function<std::string()> render;  // the body of one answer
};

struct PlainHttpLimits {
  size_t max_request_bytes = 8192;  // request line and headers
  int max_connections = 64;
  std::chrono::milliseconds idle_timeout{5000};
};

class PlainHttpServer {
 public:
  virtual ~PlainHttpServer() = default;
  // The TCP port bound (the one asked for, or the kernel's pick for 0).
  virtual int port() const = 0;
};

// Listens on host:port (host: a numeric address or a name; port 0: any).
// UNAVAILABLE when the address cannot be resolved or bound.
StatusOr<std::unique_ptr<PlainHttpServer>> StartPlainHttpServer(const std::string& host, int port,
                                                                std::vector<PlainHttpRoute> routes,
                                                                PlainHttpLimits limits = {});

}  // namespace blockcsi
