#include "common/metrics_server.h"

#include <cstdlib>

#include "common/logging.h"
#include "common/plain_http_server.h"
#include "common/version.h"

namespace blockcsi {
namespace {

// The Prometheus text exposition format, version 0.0.4.
constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

class PlainMetricsServer final : public MetricsServer {
 public:
  explicit PlainMetricsServer(std::unique_ptr<PlainHttpServer> server) : server_(std::move(server)) {}
  int port() const override { return server_->port(); }

 private:
  std::unique_ptr<PlainHttpServer> server_;
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
  auto http = StartPlainHttpServer(host, static_cast<int>(port),
                                   {{"/metrics", kContentType, [&registry] { return registry.Render(); }}});
  if (!http.ok()) return Unavailable("metrics: " + http.status().message());
  auto server = std::make_unique<PlainMetricsServer>(std::move(*http));
  LogInfo("serving metrics", {{"address", host}, {"port", std::to_string(server->port())}});
  return std::unique_ptr<MetricsServer>(std::move(server));
}

void RecordBuildInfo(const std::string& program) {
  Metrics()
      .Gauge("blockcsi_build_info", "Always 1; the labels say which build runs", {"program", "version", "commit"})
      .Set({program, std::string(BuildVersion()), std::string(BuildCommit())}, 1);
}

}  // namespace blockcsi
