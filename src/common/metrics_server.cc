#include "common/metrics_server.h"

#include <cstdlib>

#include "common/lazy_http.h"
#include "common/logging.h"
#include "common/version.h"

namespace blockcsi {
namespace {

// A scrape is small and cheap; a few threads are plenty, and a flood of
// connections queues instead of taking the node's CPU from the driver.
constexpr int kThreads = 2;

// The HTTP server of common/lazy_http.h behind the MetricsServer interface.
class HttpMetricsServer final : public MetricsServer {
 public:
  explicit HttpMetricsServer(std::unique_ptr<LazyHttpServer> server) : server_(std::move(server)) {}
  int port() const override { return server_->port(); }

 private:
  std::unique_ptr<LazyHttpServer> server_;
};

}  // namespace

StatusOr<std::unique_ptr<MetricsServer>> StartMetricsServer(const std::string& address, MetricsRegistry& registry) {
  std::string host;
  std::string port_text;
  if (!address.empty() && address.front() == '[') {
    auto close = address.find("]:");
    if (close == std::string::npos) return InvalidArgument("--metrics-address must be HOST:PORT, got " + address);
    host = address.substr(1, close - 1);
    port_text = address.substr(close + 2);
  } else {
    auto colon = address.rfind(':');
    if (colon == std::string::npos || address.find(':') != colon) {
      return InvalidArgument("--metrics-address must be HOST:PORT, got " + address);
    }
    host = address.substr(0, colon);
    port_text = address.substr(colon + 1);
  }
  char* end = nullptr;
  long port = std::strtol(port_text.c_str(), &end, 10);
  if (host.empty() || port_text.empty() || *end != '\0' || port < 0 || port > 65535) {
    return InvalidArgument("--metrics-address must be HOST:PORT, got " + address);
  }
  auto http = ServeMetricsHttp(host, static_cast<int>(port), kThreads, [&registry] { return registry.Render(); });
  if (!http.ok()) return http.status();
  auto server = std::make_unique<HttpMetricsServer>(std::move(*http));
  LogInfo("serving metrics", {{"address", host}, {"port", std::to_string(server->port())}});
  return std::unique_ptr<MetricsServer>(std::move(server));
}

void RecordBuildInfo(const std::string& program) {
  Metrics()
      .Gauge("blockcsi_build_info", "Always 1; the labels say which build runs", {"program", "version", "commit"})
      .Set({program, std::string(BuildVersion()), std::string(BuildCommit())}, 1);
}

}  // namespace blockcsi
