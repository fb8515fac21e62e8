// csi-call: a tiny CSI client for scripts (hack/demo.sh) and debugging.
//   csi-call --endpoint unix:///run/csi.sock [--timeout 60] [--secret-env KEY=VAR]... <Method> ['<json request>']
// --secret-env sets the request's secrets[KEY] to the value of the
// environment variable VAR, so that a secret (a cephx key, a CHAP password)
// stays out of argv, where every user of the machine could read it.
// Flags by CLI11. Prints the response as JSON on stdout; on error prints "csi-call: <Method>:
// <CODE>: <message>" on stderr and exits 1 (2 for usage errors).
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "csi.grpc.pb.h"

namespace {

using google::protobuf::util::JsonParseOptions;
using google::protobuf::util::JsonPrintOptions;

struct CallOptions {
  std::shared_ptr<grpc::Channel> channel;
  std::chrono::seconds timeout{60};
  std::map<std::string, std::string> secrets;  // from --secret-env; never printed
};

// Adds `secrets` to the request's `secrets` map (every CSI request that
// takes secrets names the field so); false when the request has none.
bool AddSecrets(const std::map<std::string, std::string>& secrets, google::protobuf::Message* request) {
  if (secrets.empty()) return true;
  const auto* field = request->GetDescriptor()->FindFieldByName("secrets");
  if (field == nullptr || !field->is_map()) return false;
  const auto* reflection = request->GetReflection();
  for (const auto& [key, value] : secrets) {
    google::protobuf::Message* entry = reflection->AddMessage(request, field);
    const auto* entry_desc = entry->GetDescriptor();
    entry->GetReflection()->SetString(entry, entry_desc->FindFieldByName("key"), key);
    entry->GetReflection()->SetString(entry, entry_desc->FindFieldByName("value"), value);
  }
  return true;
}

using Handler = std::function<int(const CallOptions&, const std::string& method, const std::string& json)>;

// One CSI method: parse the request from JSON, call, print the response.
template <typename Service, typename Request, typename Response>
Handler Method(grpc::Status (Service::Stub::*call)(grpc::ClientContext*, const Request&, Response*)) {
  return [call](const CallOptions& options, const std::string& method, const std::string& json) {
    Request request;
    JsonParseOptions parse;
    parse.ignore_unknown_fields = false;
    if (auto st = google::protobuf::util::JsonStringToMessage(json.empty() ? "{}" : json, &request, parse); !st.ok()) {
      std::cerr << "csi-call: " << method << ": bad request JSON: " << st.ToString() << "\n";
      return 2;
    }
    if (!AddSecrets(options.secrets, &request)) {
      std::cerr << "csi-call: " << method << ": this request takes no secrets (--secret-env)\n";
      return 2;
    }
    auto stub = Service::NewStub(options.channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + options.timeout);
    Response response;
    grpc::Status status = ((*stub).*call)(&context, request, &response);
    if (!status.ok()) {
      static const char* kCodes[] = {
          "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
          "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
          "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
          "DATA_LOSS", "UNAUTHENTICATED"};
      int code = static_cast<int>(status.error_code());
      std::cerr << "csi-call: " << method << ": " << (code >= 0 && code <= 16 ? kCodes[code] : "?") << ": "
                << status.error_message() << "\n";
      return 1;
    }
    std::string out;
    JsonPrintOptions print;
    print.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(response, &out, print);
    std::cout << out << "\n";
    return 0;
  };
}

std::map<std::string, Handler> Methods() {
  using csi::v1::Controller;
  using csi::v1::Identity;
  using csi::v1::Node;
  return {
      {"GetPluginInfo", Method<Identity>(&Identity::Stub::GetPluginInfo)},
      {"GetPluginCapabilities", Method<Identity>(&Identity::Stub::GetPluginCapabilities)},
      {"Probe", Method<Identity>(&Identity::Stub::Probe)},
      {"CreateVolume", Method<Controller>(&Controller::Stub::CreateVolume)},
      {"DeleteVolume", Method<Controller>(&Controller::Stub::DeleteVolume)},
      {"ControllerPublishVolume", Method<Controller>(&Controller::Stub::ControllerPublishVolume)},
      {"ControllerUnpublishVolume", Method<Controller>(&Controller::Stub::ControllerUnpublishVolume)},
      {"ValidateVolumeCapabilities", Method<Controller>(&Controller::Stub::ValidateVolumeCapabilities)},
      {"ListVolumes", Method<Controller>(&Controller::Stub::ListVolumes)},
      {"GetCapacity", Method<Controller>(&Controller::Stub::GetCapacity)},
      {"ControllerGetCapabilities", Method<Controller>(&Controller::Stub::ControllerGetCapabilities)},
      {"CreateSnapshot", Method<Controller>(&Controller::Stub::CreateSnapshot)},
      {"DeleteSnapshot", Method<Controller>(&Controller::Stub::DeleteSnapshot)},
      {"ListSnapshots", Method<Controller>(&Controller::Stub::ListSnapshots)},
      {"ControllerExpandVolume", Method<Controller>(&Controller::Stub::ControllerExpandVolume)},
      {"ControllerGetVolume", Method<Controller>(&Controller::Stub::ControllerGetVolume)},
      {"NodeStageVolume", Method<Node>(&Node::Stub::NodeStageVolume)},
      {"NodeUnstageVolume", Method<Node>(&Node::Stub::NodeUnstageVolume)},
      {"NodePublishVolume", Method<Node>(&Node::Stub::NodePublishVolume)},
      {"NodeUnpublishVolume", Method<Node>(&Node::Stub::NodeUnpublishVolume)},
      {"NodeGetVolumeStats", Method<Node>(&Node::Stub::NodeGetVolumeStats)},
      {"NodeExpandVolume", Method<Node>(&Node::Stub::NodeExpandVolume)},
      {"NodeGetCapabilities", Method<Node>(&Node::Stub::NodeGetCapabilities)},
      {"NodeGetInfo", Method<Node>(&Node::Stub::NodeGetInfo)},
  };
}

// "KEY=VAR" of --secret-env into secrets[KEY] = $VAR; false (after saying
// why) when VAR is not set.
bool ReadSecretEnv(const std::vector<std::string>& specs, std::map<std::string, std::string>& secrets) {
  for (const auto& spec : specs) {
    size_t eq = spec.find('=');
    const char* value = eq == std::string::npos ? nullptr : std::getenv(spec.substr(eq + 1).c_str());
    if (eq == 0 || value == nullptr) {
      std::cerr << "csi-call: --secret-env " << spec << ": want KEY=VAR with VAR set in the environment\n";
      return false;
    }
    secrets[spec.substr(0, eq)] = value;
  }
  return true;
}

std::string MethodNames(const std::map<std::string, Handler>& methods) {
  std::string names;
  for (const auto& [name, handler] : methods) names += " " + name;
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  auto methods = Methods();
  CLI::App app{"A tiny CSI client for scripts and debugging. Methods:" + MethodNames(methods), "csi-call"};
  std::string endpoint;
  int timeout_seconds = 60;
  std::vector<std::string> secret_env;
  std::string method;
  std::string json;
  app.add_option("--endpoint", endpoint, "The plugin's socket, unix:///path/csi.sock")->required();
  app.add_option("--timeout", timeout_seconds, "Seconds to wait for the answer")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  // One KEY=VAR per flag, repeatable: the value stays out of argv.
  app.add_option("--secret-env", secret_env, "Set the request's secrets[KEY] to $VAR (KEY=VAR, repeatable)")
      ->allow_extra_args(false);
  app.add_option("method", method, "The CSI method, e.g. CreateVolume")->required();
  app.add_option("request", json, "The request as JSON (default {})");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2 (scripts tell them from a failed call, 1).
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto handler = methods.find(method);
  if (handler == methods.end()) {
    std::cerr << "csi-call: unknown method " << method << "; methods:" << MethodNames(methods) << "\n";
    return 2;
  }
  CallOptions options;
  options.timeout = std::chrono::seconds(timeout_seconds);
  if (!ReadSecretEnv(secret_env, options.secrets)) return 2;
  // gRPC spells unix sockets "unix:/path" or "unix:///path"; accept both.
  options.channel = grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials());
  return handler->second(options, method, json);
}
