#include "cmd/grpc_server.h"

#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <signal.h>

#include "common/endpoint.h"
#include "common/host.h"
#include "common/logging.h"
#include "common/rpc_logging.h"

namespace blockcsi {

void ApplyServerLimits(grpc::ServerBuilder& builder, const ServerLimits& limits) {
  builder.SetMaxReceiveMessageSize(limits.max_receive_message_bytes);
  builder.SetMaxSendMessageSize(limits.max_send_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, static_cast<int>(limits.handshake_timeout.count()));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(limits.keepalive_time.count()));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(limits.keepalive_timeout.count()));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, static_cast<int>(limits.max_connection_idle.count()));
  grpc::ResourceQuota quota("blockcsi-server");
  quota.SetMaxThreads(limits.max_threads);
  quota.Resize(static_cast<size_t>(limits.max_memory_bytes));
  builder.SetResourceQuota(quota);
}

namespace {

// SIGTERM and SIGINT: blocked in every thread, taken by sigwait in one.
sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

void BlockTerminationSignals() {
  const sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

const char* WaitForTerminationSignal() {
  const sigset_t set = TerminationSignals();
  int signal_number = 0;
  sigwait(&set, &signal_number);
  return strsignal(signal_number);
}

Status ServeUntilSignal(const std::string& endpoint, const std::vector<grpc::Service*>& services,
                        std::chrono::milliseconds grace) {
  BLOCKCSI_ASSIGN_OR_RETURN(std::string socket_path, ParseUnixEndpoint(endpoint));
  BLOCKCSI_RETURN_IF_ERROR(PrepareUnixSocket(*MachineHost(), socket_path));

  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
  for (grpc::Service* service : services) builder.RegisterService(service);
  AddRpcLogging(builder);
  ApplyServerLimits(builder, ServerLimits{});
  // Pollers wake this often to notice a shutdown; gRPC's default (1 s and
  // more) would make every SIGTERM and every test teardown that much slower.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::CQ_TIMEOUT_MSEC, 100);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) return Unavailable("cannot listen on " + endpoint);
  LogInfo("serving", {{"endpoint", endpoint}});

  const char* signal_name = WaitForTerminationSignal();
  LogInfo("shutting down", {{"signal", signal_name}, {"grace", std::to_string(grace.count()) + "ms"}});

  // Shutdown stops new calls at once and cancels what still runs at the deadline.
  server->Shutdown(std::chrono::system_clock::now() + grace);
  server->Wait();
  if (Status st = MachineHost()->RemovePath(socket_path); !st.ok()) {
    LogWarn("cannot remove the socket", {{"error", st.ToString()}});
  }
  LogInfo("stopped");
  return OkStatus();
}

}  // namespace blockcsi
