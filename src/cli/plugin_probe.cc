#include "cli/plugin_probe.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "common/endpoint.h"
#include "csi.grpc.pb.h"

namespace blockcsi::cli {

PluginState AskPlugin(const std::string& endpoint) {
  PluginState p;
  auto socket = ParseUnixEndpoint(endpoint);
  if (!socket.ok()) {
    p.error = socket.status().message();
    return p;
  }
  auto channel = grpc::CreateChannel("unix:" + *socket, grpc::InsecureChannelCredentials());
  auto identity = csi::v1::Identity::NewStub(channel);
  auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(2);
  grpc::ClientContext info_ctx;
  info_ctx.set_deadline(deadline);
  csi::v1::GetPluginInfoResponse info;
  grpc::Status st = identity->GetPluginInfo(&info_ctx, csi::v1::GetPluginInfoRequest(), &info);
  if (!st.ok()) {
    p.error = st.error_message();
    return p;
  }
  p.name = info.name();
  p.version = info.vendor_version();
  p.manifest = {info.manifest().begin(), info.manifest().end()};
  grpc::ClientContext probe_ctx;
  probe_ctx.set_deadline(deadline);
  csi::v1::ProbeResponse probe;
  st = identity->Probe(&probe_ctx, csi::v1::ProbeRequest(), &probe);
  if (!st.ok()) {
    p.error = "Probe: " + st.error_message();
    return p;
  }
  p.reachable = true;
  if (probe.has_ready()) p.ready = probe.ready().value() ? "true" : "false";
  return p;
}

}  // namespace blockcsi::cli
