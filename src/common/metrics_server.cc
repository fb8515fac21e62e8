#include "common/metrics_server.h"

#include <httplib.h>

#include <cstdlib>
#include <thread>

#include "common/logging.h"
#include "common/version.h"

namespace blockcsi {
namespace {

// A scrape is small and cheap; a few threads are plenty, and a flood of
// connections queues instead of taking the node's CPU from the driver.
constexpr size_t kThreads = 2;

class HttpMetricsServer final : public MetricsServer {
 public:
  explicit HttpMetricsServer(MetricsRegistry& registry) : registry_(registry) {
    server_.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
    server_.set_read_timeout(5, 0);
    server_.set_write_timeout(5, 0);
    server_.set_keep_alive_max_count(10);
    server_.set_payload_max_length(4096);  // GET carries no body; anything bigger is refused
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(registry_.Render(), "text/plain; version=0.0.4; charset=utf-8");
    });
  }
  ~HttpMetricsServer() override {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  Status Start(const std::string& host, int port) {
    if (port == 0) {
      port_ = server_.bind_to_any_port(host);
      if (port_ <= 0) return Unavailable("metrics: cannot listen on " + host + ":0");
    } else {
      if (!server_.bind_to_port(host, port)) {
        return Unavailable("metrics: cannot listen on " + host + ":" + std::to_string(port));
      }
      port_ = port;
    }
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    return OkStatus();
  }

  int port() const override { return port_; }

 private:
  MetricsRegistry& registry_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
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
  auto server = std::make_unique<HttpMetricsServer>(registry);
  BLOCKCSI_RETURN_IF_ERROR(server->Start(host, static_cast<int>(port)));
  LogInfo("serving metrics", {{"address", host}, {"port", std::to_string(server->port())}});
  return std::unique_ptr<MetricsServer>(std::move(server));
}

void RecordBuildInfo(const std::string& program) {
  Metrics()
      .Gauge("blockcsi_build_info", "Always 1; the labels say which build runs", {"program", "version", "commit"})
      .Set({program, std::string(BuildVersion()), std::string(BuildCommit())}, 1);
}

}  // namespace blockcsi
