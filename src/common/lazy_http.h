// HTTP for the programs that serve /metrics or ask the Kubernetes API, with
// cpp-httplib loaded on first use: libblockcsi_http.so (common/http_module.h)
// is opened with dlopen from the program's directory (or ../bin beside it,
// for the test and bench programs of a build tree) the first time one of
// these functions runs, so a plugin that does neither never maps httplib or
// initialises OpenSSL (issue #18). Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace blockcsi {

// A GET /metrics server; stops (and joins its threads) when destroyed.
class LazyHttpServer {
 public:
  virtual ~LazyHttpServer() = default;
  virtual int port() const = 0;
};

// Serves `render()`'s text at GET /metrics on host:port (0: any) on
// `threads` threads. FAILED_PRECONDITION when the module cannot be loaded,
// UNAVAILABLE when the address cannot be bound.
StatusOr<std::unique_ptr<LazyHttpServer>> ServeMetricsHttp(const std::string& host, int port, int threads,
                                                           std::function<std::string()> render);

struct HttpsAnswer {
  int status = 0;
  std::string body;
};
// One HTTPS GET; the certificate is checked against `ca_pem` (empty: the
// system's store); `bearer` (empty: none) is sent as the token and appears
// in no error. FAILED_PRECONDITION when the module cannot be loaded,
// UNAVAILABLE when no HTTP answer came.
StatusOr<HttpsAnswer> HttpsGet(const std::string& host, int port, const std::string& ca_pem, const std::string& bearer,
                               const std::string& path);

}  // namespace blockcsi
