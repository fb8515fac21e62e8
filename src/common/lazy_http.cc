#include "common/lazy_http.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "common/http_module.h"

namespace blockcsi {
namespace {

struct HttpModule {
  BlockcsiHttpServe serve = nullptr;
  BlockcsiHttpStop stop = nullptr;
  BlockcsiHttpsGet get = nullptr;
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
      module.serve = reinterpret_cast<BlockcsiHttpServe>(::dlsym(handle, "blockcsi_http_serve"));
      module.stop = reinterpret_cast<BlockcsiHttpStop>(::dlsym(handle, "blockcsi_http_stop"));
      module.get = reinterpret_cast<BlockcsiHttpsGet>(::dlsym(handle, "blockcsi_https_get"));
      if (module.serve == nullptr || module.stop == nullptr || module.get == nullptr) {
        tried += "; " + candidate.string() + " lacks the blockcsi_http_* functions";
        continue;
      }
      return;
    }
    module.error = "cannot load " BLOCKCSI_HTTP_MODULE ": " + tried;
  });
  return module;
}

class ModuleHttpServer final : public LazyHttpServer {
 public:
  ModuleHttpServer(BlockcsiHttpStop stop, std::function<std::string()> render)
      : stop_(stop), render_(std::move(render)) {}
  ~ModuleHttpServer() override { stop_(server_); }

  // The module's threads call this with the server as context.
  static char* Render(void* context) {
    std::string text = static_cast<ModuleHttpServer*>(context)->render_();
    return ::strdup(text.c_str());
  }

  int port() const override { return port_; }

  BlockcsiHttpStop stop_;
  std::function<std::string()> render_;
  BlockcsiHttpServer* server_ = nullptr;
  int port_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<LazyHttpServer>> ServeMetricsHttp(const std::string& host, int port, int threads,
                                                           std::function<std::string()> render) {
  const HttpModule& module = Module();
  if (module.serve == nullptr) return FailedPrecondition(module.error);
  auto server = std::make_unique<ModuleHttpServer>(module.stop, std::move(render));
  char error[256] = "";
  server->server_ = module.serve(host.c_str(), port, threads, &ModuleHttpServer::Render, server.get(), &server->port_,
                                 error, sizeof(error));
  if (server->server_ == nullptr) return Unavailable(std::string("metrics: ") + error);
  return std::unique_ptr<LazyHttpServer>(std::move(server));
}

StatusOr<HttpsAnswer> HttpsGet(const std::string& host, int port, const std::string& ca_pem, const std::string& bearer,
                               const std::string& path) {
  const HttpModule& module = Module();
  if (module.get == nullptr) return FailedPrecondition(module.error);
  int status = 0;
  char* body = nullptr;
  size_t body_size = 0;
  char error[256] = "";
  if (module.get(host.c_str(), port, ca_pem.c_str(), bearer.c_str(), path.c_str(), &status, &body, &body_size, error,
                 sizeof(error)) != 0) {
    return Unavailable(error);
  }
  HttpsAnswer answer{status, std::string(body, body_size)};
  std::free(body);
  return answer;
}

}  // namespace blockcsi
