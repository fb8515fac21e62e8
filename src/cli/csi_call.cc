// `blockctl csi RPC`: ask the plugin directly over its socket, for when
// kubelet's view and the node's disagree. Prints the response as JSON.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <ostream>

#include "cli/verb.h"
#include "common/endpoint.h"
#include "common/status.h"
#include "csi.grpc.pb.h"

namespace blockcsi::cli {
namespace {

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

class CsiVerb final : public Verb {
 public:
  std::string Name() const override { return "csi"; }
  std::string Summary() const override { return "Call one CSI RPC on the plugin's socket and print the response"; }
  void Configure(CLI::App& c) override {
    c.add_option("rpc", rpc_,
                 "probe | plugin-info | plugin-capabilities | node-get-info | node-get-capabilities | "
                 "node-get-volume-stats | controller-get-capabilities")
        ->required()
        ->check(CLI::IsMember({"probe", "plugin-info", "plugin-capabilities", "node-get-info", "node-get-capabilities",
                               "node-get-volume-stats", "controller-get-capabilities"}));
    c.add_option("--volume-id", volume_id_, "Volume id (node-get-volume-stats)");
    c.add_option("--volume-path", volume_path_, "Staging or publish path (node-get-volume-stats)");
    c.add_option("--timeout", timeout_seconds_, "Seconds to wait for the answer")->capture_default_str();
  }

  int Run(const GlobalOptions& options, const Io& io) override {
    auto socket = ParseUnixEndpoint(options.endpoint);
    if (!socket.ok()) {
      io.Error(socket.status().message());
      return kExitUsage;
    }
    auto channel = grpc::CreateChannel("unix:" + *socket, grpc::InsecureChannelCredentials());
    auto identity = csi::v1::Identity::NewStub(channel);
    auto node = csi::v1::Node::NewStub(channel);
    auto controller = csi::v1::Controller::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_seconds_));

    grpc::Status status;
    std::string json;
    auto call = [&](auto& stub, auto method, const auto& request, auto response) {
      status = (stub.get()->*method)(&ctx, request, &response);
      if (status.ok()) json = ToJson(response);
    };
    if (rpc_ == "probe") {
      call(identity, &csi::v1::Identity::Stub::Probe, csi::v1::ProbeRequest(), csi::v1::ProbeResponse());
    } else if (rpc_ == "plugin-info") {
      call(identity, &csi::v1::Identity::Stub::GetPluginInfo, csi::v1::GetPluginInfoRequest(),
           csi::v1::GetPluginInfoResponse());
    } else if (rpc_ == "plugin-capabilities") {
      call(identity, &csi::v1::Identity::Stub::GetPluginCapabilities, csi::v1::GetPluginCapabilitiesRequest(),
           csi::v1::GetPluginCapabilitiesResponse());
    } else if (rpc_ == "node-get-info") {
      call(node, &csi::v1::Node::Stub::NodeGetInfo, csi::v1::NodeGetInfoRequest(), csi::v1::NodeGetInfoResponse());
    } else if (rpc_ == "node-get-capabilities") {
      call(node, &csi::v1::Node::Stub::NodeGetCapabilities, csi::v1::NodeGetCapabilitiesRequest(),
           csi::v1::NodeGetCapabilitiesResponse());
    } else if (rpc_ == "node-get-volume-stats") {
      if (volume_id_.empty() || volume_path_.empty()) {
        io.Error("node-get-volume-stats needs --volume-id and --volume-path");
        return kExitUsage;
      }
      csi::v1::NodeGetVolumeStatsRequest request;
      request.set_volume_id(volume_id_);
      request.set_volume_path(volume_path_);
      call(node, &csi::v1::Node::Stub::NodeGetVolumeStats, request, csi::v1::NodeGetVolumeStatsResponse());
    } else if (rpc_ == "controller-get-capabilities") {
      call(controller, &csi::v1::Controller::Stub::ControllerGetCapabilities,
           csi::v1::ControllerGetCapabilitiesRequest(), csi::v1::ControllerGetCapabilitiesResponse());
    }
    if (!status.ok()) {
      std::string code(StatusCodeName(static_cast<StatusCode>(status.error_code())));
      io.Error(rpc_ + " on " + options.endpoint + " failed: " + code + ": " + status.error_message());
      return kExitProblems;
    }
    io.out << json << (json.empty() || json.back() != '\n' ? "\n" : "");
    return kExitOk;
  }

 private:
  std::string rpc_;
  std::string volume_id_;
  std::string volume_path_;
  int timeout_seconds_ = 10;
};

BLOCKCTL_REGISTER_VERB(CsiVerb);

}  // namespace
}  // namespace blockcsi::cli
