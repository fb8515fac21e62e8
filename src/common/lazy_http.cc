#include "common/lazy_http.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "common/http_module.h"

namespace blockcsi {
namespace {

struct HttpModule {
  BlockcsiHttpsRequest request = nullptr;
  std::string error;  // why it could not be loaded
};

// The program's directory first (an installed plugin: /usr/bin), then ../bin
// (a build tree's tests and benches sit beside bin/). Opened once, never closed.
const HttpModule& Module() {
  static HttpModule module;
  static std::once_flag once;
  std::call_once(once, [] {
    std::error_code ec;
    std::filesystem::path dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
    std::string tried;
    for (const auto& candidate : {dir / BLOCKCSI_HTTP_MODULE, dir / ".." / "bin" / BLOCKCSI_HTTP_MODULE}) {
      void* handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        tried += std::string(tried.empty() ? "" : "; ") + ::dlerror();
        continue;
      }
      module.request = reinterpret_cast<BlockcsiHttpsRequest>(::dlsym(handle, "blockcsi_https_request"));
      if (module.request == nullptr) {
        tried += "; " + candidate.string() + " lacks blockcsi_https_request";
        continue;
      }
      return;
    }
    module.error = "cannot load " BLOCKCSI_HTTP_MODULE ": " + tried;
  });
  return module;
}

}  // namespace

StatusOr<HttpsAnswer> HttpsRequest(const std::string& method, const std::string& host, int port,
                                   const std::string& ca_pem, const std::string& bearer, const std::string& path,
                                   const std::string& content_type, const std::string& request_body) {
  const HttpModule& module = Module();
  if (module.request == nullptr) return FailedPrecondition(module.error);
  int status = 0;
  char* body = nullptr;
  size_t body_size = 0;
  char error[256] = "";
  if (module.request(method.c_str(), host.c_str(), port, ca_pem.c_str(), bearer.c_str(), path.c_str(),
                     content_type.c_str(), request_body.data(), request_body.size(), &status, &body, &body_size, error,
                     sizeof(error)) != 0) {
    return Unavailable(error);
  }
  HttpsAnswer answer{status, std::string(body, body_size)};
  std::free(body);
  return answer;
}

StatusOr<HttpsAnswer> HttpsGet(const std::string& host, int port, const std::string& ca_pem, const std::string& bearer,
                               const std::string& path) {
  return HttpsRequest("GET", host, port, ca_pem, bearer, path, "", "");
}

}  // namespace blockcsi
