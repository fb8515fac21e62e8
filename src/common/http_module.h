// The C interface of libblockcsi_http.so, the one place that links
// cpp-httplib (and through it OpenSSL's shared libraries). The programs load
// it with dlopen on first use (common/lazy_http.h): Debian's libcpp-httplib
// initialises OpenSSL from a static constructor, which cost every plugin
// ~2 MiB of RSS at start even when it serves no /metrics and asks no
// Kubernetes API. /metrics does not use it: it is served by
// common/plain_http_server.h, with no OpenSSL behind it. Plain C types only, so that no C++ object or
// exception crosses between the program and the module.
#pragma once

#include <stddef.h>

extern "C" {

// One HTTPS request (`method`: GET, POST, PUT, PATCH or DELETE) of `path` on
// host:port, the server's certificate verified against `ca_pem` (empty: the
// system's store), with `bearer` (empty: none) as the Authorization token and
// `request_body` of `content_type` (both ignored for GET and DELETE). 0 with
// *status and *body (malloc'd, the caller frees it) when an HTTP answer
// came; -1 with the reason in `error`.
typedef int (*BlockcsiHttpsRequest)(const char* method, const char* host, int port, const char* ca_pem,
                                    const char* bearer, const char* path, const char* content_type,
                                    const char* request_body, size_t request_body_size, int* status, char** body,
                                    size_t* body_size, char* error, size_t error_size);

}  // extern "C"

#define BLOCKCSI_HTTP_MODULE "libblockcsi_http.so"
