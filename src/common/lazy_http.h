// HTTPS for the programs that ask the Kubernetes API, with cpp-httplib
// loaded on first use: libblockcsi_http.so (common/http_module.h) is opened
// with dlopen from the program's directory (or ../bin beside it, for the
// test and bench programs of a build tree) the first time HttpsGet runs, so
// a plugin that asks no Kubernetes API never maps httplib or initialises
// OpenSSL. /metrics is served without it
// (common/plain_http_server.h). Thread-safe.
#pragma once

#include <string>

#include "common/status.h"

namespace blockcsi {

struct HttpsAnswer {
  int status = 0;
  std::string body;
};
// One HTTPS GET; the certificate is checked against `ca_pem` (empty: the
// system's store); `bearer` (empty: none) is sent as the token and appears
// in no error. FAILED_PRECONDITION when the module cannot be loaded,
// UNAVAILABLE when no HTTP answer came.
// Any method (GET, POST, PUT, PATCH, DELETE) with a body of `content_type`.
StatusOr<HttpsAnswer> HttpsRequest(const std::string& method, const std::string& host, int port,
                                   const std::string& ca_pem, const std::string& bearer, const std::string& path,
                                   const std::string& content_type, const std::string& request_body);
StatusOr<HttpsAnswer> HttpsGet(const std::string& host, int port, const std::string& ca_pem, const std::string& bearer,
                               const std::string& path);

}  // namespace blockcsi
