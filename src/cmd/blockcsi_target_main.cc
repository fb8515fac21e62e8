// blockcsi-target: the storage-host agent. Owns a pool of volumes, exports
// them through tgtd (or LIO), reconciles the daemon with the pool, and
// serves the VolumeBackend over proto/target.proto to the controller —
// over mTLS on TCP, or on a unix socket. Plain TCP only with --insecure.
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <set>

#include "agent/agent_service.h"
#include "agent/agent_tls.h"
#include "backend/backend_factory.h"
#include "cmd/grpc_server.h"
#include "common/atomic_file.h"
#include "common/duration.h"
#include "common/endpoint.h"
#include "common/host.h"
#include "common/logging.h"
#include "common/metrics_server.h"
#include "common/rpc_logging.h"
#include "common/version.h"

namespace blockcsi {
namespace {

struct AgentConfig {
  std::vector<std::string> listen;  // HOST:PORT
  std::string socket;               // unix socket path
  // The local pool and its exports, as the plugin's --backend local takes
  // them (reconcile_interval set from the text below once parsed).
  BackendOptions pool;
  std::string reconcile_interval = "30s";
  std::string shutdown_grace = "10s";
  std::string tls_cert, tls_key, tls_ca;
  std::vector<std::string> allowed_clients;  // client certificate names; empty: any the CA signed
  std::string socket_mode = "0660";
  std::string handshake_timeout = "10s";
  bool insecure = false;
  std::string log_format = "text";
  std::string log_level = "info";
  std::string metrics_address;
};

int Fail(const std::string& message, int code = 2) {
  std::cerr << "blockcsi-target: " << message << "\n";
  return code;
}

void AddFlags(CLI::App& app, AgentConfig& c) {
  app.add_option("--listen", c.listen, "TCP address HOST:PORT to serve on (mTLS unless --insecure); repeatable");
  app.add_option("--socket", c.socket, "Unix socket path to serve on (local clients; no TLS)");
  app.add_option("--pool", c.pool.pool_dir, "Pool directory (images and metadata)")->required();
  app.add_option("--target", c.pool.target, "Target daemon: tgt or lio")
      ->check(CLI::IsMember({"tgt", "lio"}))
      ->capture_default_str();
  app.add_option("--configfs-root", c.pool.configfs_root, "configfs mount for --target lio")->capture_default_str();
  app.add_option("--tgt-control-port", c.pool.tgt_control_port, "tgtd control port (tgtadm -C)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--tgtadm", c.pool.tgtadm, "tgtadm program, by absolute path (PATH is never searched)")
      ->capture_default_str();
  app.add_option("--tgt-control", c.pool.tgt_control,
                 "How tgtd is driven: socket (its management socket; no CHAP secret in any argv) or tgtadm")
      ->check(CLI::IsMember({"socket", "tgtadm"}))
      ->capture_default_str();
  app.add_option(
         "--overcommit-ratio", c.pool.overcommit_ratio,
         "Thin provisioning: all volumes and snapshots together may be provisioned up to the pool file system's "
         "size times this, and one new volume (or a grow) up to its free space times this; more is "
         "RESOURCE_EXHAUSTED (more than the whole pool file system times this: OUT_OF_RANGE)")
      ->check(CLI::Range(0.001, 1000.0))
      ->capture_default_str();
  app.add_option("--max-volumes", c.pool.max_volumes,
                 "The most volumes the pool holds (0: no limit); CreateVolume past it is RESOURCE_EXHAUSTED. Each "
                 "volume is a tgtd LUN whose I/O threads each take a pid")
      ->capture_default_str();
  app.add_option("--portal", c.pool.portals, "iSCSI portal HOST:PORT advertised to nodes (repeatable)")->required();
  app.add_option("--iqn-prefix", c.pool.iqn_prefix, "IQN prefix of our targets")->capture_default_str();
  app.add_option("--reconcile-interval", c.reconcile_interval, "How often the daemon is reconciled (e.g. 30s)")
      ->capture_default_str();
  app.add_option("--shutdown-grace", c.shutdown_grace, "How long in-flight calls may run after SIGTERM")
      ->capture_default_str();
  app.add_option("--tls-cert", c.tls_cert, "Server certificate (PEM)");
  app.add_option("--tls-key", c.tls_key, "Server key (PEM)");
  app.add_option("--tls-ca", c.tls_ca, "CA that must have signed the client's certificate (PEM)");
  app.add_option("--allowed-client", c.allowed_clients,
                 "Client certificate name (CN or subject alternative name) allowed to call over mTLS; repeatable. "
                 "Without it, any certificate the --tls-ca signed has full control (docs/deploy.md, \"Trust model\")");
  app.add_option("--socket-mode", c.socket_mode, "File mode of the --socket (octal); its group may call the agent")
      ->capture_default_str();
  app.add_option("--handshake-timeout", c.handshake_timeout,
                 "A connection that has not finished its TLS handshake by then is closed")
      ->capture_default_str();
  app.add_flag("--insecure", c.insecure, "Serve TCP without TLS (tests only)");
  app.add_option("--log-format", c.log_format, "text or json")->check(CLI::IsMember({"text", "json"}));
  app.add_option("--log-level", c.log_level, "debug, info, warn, error");
  app.add_option("--metrics-address", c.metrics_address,
                 "HOST:PORT to serve Prometheus metrics on at /metrics (plain HTTP); off when not given");
}

// The flags turned into what the agent runs with, or why they do not fit
// together.
struct AgentSettings {
  std::chrono::milliseconds reconcile_interval{0}, shutdown_grace{0};
  ServerLimits limits;
  unsigned socket_mode = 0;
  bool tls = false;
};

StatusOr<AgentSettings> CheckFlags(const AgentConfig& c) {
  AgentSettings out;
  auto interval = ParseDuration(c.reconcile_interval);
  if (!interval.ok()) return InvalidArgument("--reconcile-interval: " + interval.status().message());
  out.reconcile_interval = *interval;
  auto grace = ParseDuration(c.shutdown_grace);
  if (!grace.ok()) return InvalidArgument("--shutdown-grace: " + grace.status().message());
  out.shutdown_grace = *grace;
  auto handshake = ParseDuration(c.handshake_timeout);
  if (!handshake.ok() || handshake->count() <= 0) {
    return InvalidArgument("--handshake-timeout must be a positive duration");
  }
  out.limits.handshake_timeout = *handshake;
  char* end = nullptr;
  unsigned long m = std::strtoul(c.socket_mode.c_str(), &end, 8);
  if (c.socket_mode.empty() || *end != '\0' || m > 0777) {
    return InvalidArgument("--socket-mode must be an octal mode like 0660");
  }
  out.socket_mode = static_cast<unsigned>(m);
  if (c.listen.empty() && c.socket.empty()) return InvalidArgument("give --listen HOST:PORT and/or --socket PATH");
  out.tls = !c.tls_cert.empty() || !c.tls_key.empty() || !c.tls_ca.empty();
  if (out.tls && (c.tls_cert.empty() || c.tls_key.empty() || c.tls_ca.empty())) {
    return InvalidArgument("mTLS needs all of --tls-cert, --tls-key and --tls-ca");
  }
  if (!c.allowed_clients.empty() && !out.tls) {
    return InvalidArgument("--allowed-client needs mTLS (--tls-cert, --tls-key, --tls-ca)");
  }
  if (!c.listen.empty() && !out.tls && !c.insecure) {
    return InvalidArgument("refusing to serve plain TCP on " + c.listen.front() +
                           ": give --tls-cert, --tls-key and --tls-ca (clients must present a certificate signed by "
                           "that CA), or --insecure to accept unauthenticated clients");
  }
  return out;
}

// Every connection is a file descriptor until its handshake times out: take
// the hard limit the host grants (often 1024 soft of 524288 hard), so a
// burst of idle sockets does not run the agent out of descriptors for its
// pool and tgtd's socket.
void RaiseFileLimit() {
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
}

// The credentials of the TCP listeners: mTLS with the optional client
// allow-list, or none (--insecure, or no TCP listener at all).
StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpCredentials(const AgentConfig& c, bool tls) {
  if (!tls) return grpc::InsecureServerCredentials();
  // Before anything else starts: a broken or exposed key fails here, by name.
  BLOCKCSI_RETURN_IF_ERROR(CheckTlsFiles(*MachineHost(), c.tls_cert, c.tls_key, c.tls_ca));
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  BLOCKCSI_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFileToString(c.tls_ca));
  BLOCKCSI_ASSIGN_OR_RETURN(std::string cert, ReadFileToString(c.tls_cert));
  BLOCKCSI_ASSIGN_OR_RETURN(std::string key, ReadFileToString(c.tls_key));
  ssl.pem_key_cert_pairs.push_back({key, cert});
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::SslServerCredentials(ssl);
  if (!c.allowed_clients.empty()) {
    credentials->SetAuthMetadataProcessor(
        MakeClientAllowList(std::set<std::string>(c.allowed_clients.begin(), c.allowed_clients.end())));
  }
  return credentials;
}

// Serves `service` on every --listen address and the --socket until SIGTERM
// or SIGINT, then lets in-flight calls finish for the grace period.
int ServeUntilSignalled(const AgentConfig& c, const AgentSettings& settings,
                        const std::shared_ptr<grpc::ServerCredentials>& tcp_credentials, grpc::Service* service) {
  grpc::ServerBuilder builder;
  std::vector<int> ports(c.listen.size(), 0);
  for (size_t i = 0; i < c.listen.size(); ++i) builder.AddListeningPort(c.listen[i], tcp_credentials, &ports[i]);
  if (!c.socket.empty()) {
    if (Status st = PrepareUnixSocket(*MachineHost(), c.socket); !st.ok()) return Fail(st.message(), 1);
    builder.AddListeningPort("unix:" + c.socket, grpc::InsecureServerCredentials());
  }
  builder.RegisterService(service);
  AddRpcLogging(builder);
  ApplyServerLimits(builder, settings.limits);
  // The socket is born without any access for others (no window in which a
  // local user could connect), then gets --socket-mode.
  mode_t old_umask = ::umask(0177);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ::umask(old_umask);
  if (!server) return Fail("cannot listen on the given addresses", 1);
  if (!c.socket.empty()) {
    if (Status st = MachineHost()->SetPermissions(c.socket, settings.socket_mode); !st.ok()) {
      return Fail("cannot set mode of " + c.socket + ": " + st.message(), 1);
    }
  }
  for (size_t i = 0; i < c.listen.size(); ++i) {
    if (ports[i] == 0) return Fail("cannot listen on " + c.listen[i], 1);
    LogInfo("serving", {{"address", c.listen[i]}, {"port", std::to_string(ports[i])}});
  }
  if (!c.socket.empty()) LogInfo("serving", {{"socket", c.socket}});

  LogInfo("shutting down", {{"signal", WaitForTerminationSignal()}});
  server->Shutdown(std::chrono::system_clock::now() + settings.shutdown_grace);
  server->Wait();
  if (!c.socket.empty()) {
    if (Status st = MachineHost()->RemovePath(c.socket); !st.ok()) {
      LogWarn("cannot remove the socket", {{"error", st.ToString()}});
    }
  }
  LogInfo("stopped");
  return 0;
}

int Main(int argc, char** argv) {
  BlockTerminationSignals();
  AgentConfig c;
  CLI::App app{"blockcsi-target: the storage-host agent of blockcsi (pool + tgt/LIO export)", "blockcsi-target"};
  AddFlags(app, c);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print the version and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (show_version) {
    std::cout << "blockcsi-target " << BuildVersion() << " (" << BuildCommit() << ")\n";
    return 0;
  }
  auto format = ParseLogFormat(c.log_format);
  auto level = ParseLogLevel(c.log_level);
  if (!format.ok()) return Fail(format.status().message());
  if (!level.ok()) return Fail(level.status().message());
  InitLogging("blockcsi-target", *format, *level);

  auto settings = CheckFlags(c);
  if (!settings.ok()) return Fail(settings.status().message());
  RaiseFileLimit();
  auto tcp_credentials = TcpCredentials(c, settings->tls);
  if (!tcp_credentials.ok()) return Fail(tcp_credentials.status().message());

  RecordBuildInfo("blockcsi-target");
  std::unique_ptr<MetricsServer> metrics_server;
  if (!c.metrics_address.empty()) {
    auto started = StartMetricsServer(c.metrics_address, Metrics());
    if (!started.ok())
      return Fail(started.status().message(), started.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
    metrics_server = std::move(*started);
  }

  LogInfo("starting", {{"version", BuildVersion()},
                       {"pool", c.pool.pool_dir},
                       {"target", c.pool.target},
                       {"reconcile_interval", FormatDuration(settings->reconcile_interval)},
                       {"tls", settings->tls ? "mtls" : "off"}});
  BackendOptions pool = c.pool;
  pool.reconcile_interval = settings->reconcile_interval;
  auto backend = MakeBackend(pool, MachineHost());
  if (!backend.ok()) {
    LogError("cannot open the backend", {{"error", backend.status().ToString()}});
    return Fail(backend.status().message(), 1);
  }
  TargetAgentService service(*backend);
  return ServeUntilSignalled(c, *settings, *tcp_credentials, &service);
}

}  // namespace
}  // namespace blockcsi

int main(int argc, char** argv) { return blockcsi::Main(argc, argv); }
