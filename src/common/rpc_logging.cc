#include "common/rpc_logging.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>

#include "common/logging.h"
#include "common/metrics.h"
#include "common/random.h"
#include "common/redaction.h"
#include "common/status.h"

namespace blockcsi {
namespace {

using grpc::experimental::InterceptionHookPoints;

std::string NextRequestId() {
  // A per-process random prefix keeps ids unique across plugin restarts.
  static const std::string prefix = [] {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%06x", static_cast<unsigned>(RandomU64() & 0xffffffu));
    return std::string(buf);
  }();
  static std::atomic<uint64_t> counter{0};
  return prefix + "-" + std::to_string(++counter);
}

// The object a request is about, so that each line names it.
std::string SubjectOf(const google::protobuf::Message& request) {
  const auto* descriptor = request.GetDescriptor();
  for (const char* name : {"volume_id", "snapshot_id", "name", "source_volume_id"}) {
    const auto* field = descriptor->FindFieldByName(name);
    if (field != nullptr && field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_STRING &&
        !field->is_repeated()) {
      std::string value = request.GetReflection()->GetString(request, field);
      if (!value.empty()) return value;
    }
  }
  return "";
}

// The call figures are counted here, at the one boundary every call passes.
// `method` is the full gRPC method name: a bounded set (the services' own
// methods; an unknown one never reaches an interceptor).
struct RpcMetrics {
  MetricFamily& calls = Metrics().Counter("blockcsi_grpc_calls_total", "gRPC calls served, by method and result code",
                                          {"method", "code"});
  MetricFamily& duration =
      Metrics().Histogram("blockcsi_grpc_call_duration_seconds", "Time from a call's request to its status, by method",
                          {"method"}, CallDurationBuckets());
  MetricFamily& in_flight =
      Metrics().Gauge("blockcsi_grpc_calls_in_flight", "gRPC calls being served, by method", {"method"});
};

RpcMetrics& Rpc() {
  static RpcMetrics metrics;
  return metrics;
}

class RpcLoggingInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit RpcLoggingInterceptor(grpc::experimental::ServerRpcInfo* info)
      : method_(info->method() != nullptr ? info->method() : "?"),
        request_id_(NextRequestId()),
        start_(std::chrono::steady_clock::now()) {
    Rpc().in_flight.Add({method_}, 1);
  }
  ~RpcLoggingInterceptor() override {
    if (!ended_) Rpc().in_flight.Add({method_}, -1);  // cancelled before a status was sent
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      // The sync server runs the handler on this thread next: tag it.
      scope_.emplace(request_id_);
      auto* request = static_cast<google::protobuf::Message*>(methods->GetRecvMessage());
      if (request != nullptr) {
        subject_ = SubjectOf(*request);
        // Rendering JSON is the costly part: skip it when the line is dropped.
        std::string body = LogEnabled(LogLevel::kInfo) ? RedactedJson(*request) : "";
        LogInfo("rpc start", {{"method", method_}, {"subject", subject_}, {"request", body}});
      } else {
        // The bytes did not parse as the method's request (gRPC hands no
        // message over then, and the handler does not run).
        unparsed_ = true;
        LogInfo("rpc start", {{"method", method_}, {"request", "(does not parse)"}});
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE) && LogEnabled(LogLevel::kDebug)) {
      const auto* response = static_cast<const google::protobuf::Message*>(methods->GetSendMessage());
      if (response != nullptr) {
        ScopedRequestId id(request_id_);
        LogDebug("rpc response", {{"method", method_}, {"response", RedactedJson(*response)}});
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      grpc::Status status = methods->GetSendStatus();
      if (unparsed_ && status.error_code() == grpc::StatusCode::INTERNAL) {
        // gRPC answers a request that fails to parse with INTERNAL and an
        // empty message, which reads as our bug; it is the caller's bad
        // input, said here once for every service and method.
        status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "the request to " + method_ + " does not parse as that method's request message");
        methods->ModifySendStatus(status);
      }
      auto micros =
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_).count();
      std::string duration = std::to_string(micros / 1000) + "." + std::to_string((micros % 1000) / 100) + "ms";
      std::string code(StatusCodeName(static_cast<StatusCode>(status.error_code())));
      Rpc().calls.Add({method_, code});
      Rpc().duration.Observe({method_}, static_cast<double>(micros) / 1e6);
      Rpc().in_flight.Add({method_}, -1);
      ended_ = true;
      ScopedRequestId id(request_id_);
      LogLevel level = status.ok() ? LogLevel::kInfo : LogLevel::kWarn;
      Log(level, "rpc end",
          {{"method", method_},
           {"subject", subject_},
           {"code", code},
           {"duration", duration},
           {"error", status.error_message()}});
      scope_.reset();
    }
    methods->Proceed();
  }

 private:
  std::string method_;
  std::string request_id_;
  std::string subject_;
  std::chrono::steady_clock::time_point start_;
  std::optional<ScopedRequestId> scope_;
  bool unparsed_ = false;
  bool ended_ = false;
};

class RpcLoggingFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new RpcLoggingInterceptor(info);
  }
};

}  // namespace

void AddRpcLogging(grpc::ServerBuilder& builder) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<RpcLoggingFactory>());
  builder.experimental().SetInterceptorCreators(std::move(factories));
}

}  // namespace blockcsi
