// Secrets never reach a log line: the redaction walk, and the whole RPC
// logging boundary with a real in-process gRPC server.
#include "common/redaction.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <future>
#include <memory>

#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/rpc_logging.h"
#include "csi.grpc.pb.h"
#include "support/test_util.h"
#include "target.pb.h"
#include "volume_keys.pb.h"

namespace blockcsi {
namespace {

constexpr char kChapSecret[] = "s3cr3t-chap-password";

csi::v1::NodeStageVolumeRequest StageRequestWithSecrets() {
  csi::v1::NodeStageVolumeRequest req;
  req.set_volume_id("vol-42");
  req.set_staging_target_path("/var/lib/kubelet/plugins/blockcsi.io/global/vol-42");
  (*req.mutable_publish_context())["targetIqn"] = "iqn.2026-11.io.blockcsi:vol-42";
  (*req.mutable_secrets())["chap-username"] = "node-user";
  (*req.mutable_secrets())["chap-password"] = kChapSecret;
  return req;
}

TEST(RedactionTest, SecretMapValuesAreBlankedKeysKept) {
  std::string json = RedactedJson(StageRequestWithSecrets());
  EXPECT_EQ(json.find(kChapSecret), std::string::npos) << json;
  EXPECT_EQ(json.find("node-user"), std::string::npos) << json;
  EXPECT_NE(json.find("chap-password"), std::string::npos) << json;
  EXPECT_NE(json.find("vol-42"), std::string::npos);
  EXPECT_NE(json.find("targetIqn"), std::string::npos) << "non-secret fields must stay";
}

TEST(RedactionTest, NestedAndOtherRequestsAreWalked) {
  csi::v1::CreateVolumeRequest create;
  create.set_name("pvc-1");
  (*create.mutable_secrets())["token"] = kChapSecret;
  (*create.mutable_parameters())["fsType"] = "ext4";
  std::string json = RedactedJson(create);
  EXPECT_EQ(json.find(kChapSecret), std::string::npos);
  EXPECT_NE(json.find("ext4"), std::string::npos);

  csi::v1::NodeExpandVolumeRequest expand;
  expand.set_volume_id("vol-1");
  (*expand.mutable_secrets())["k"] = kChapSecret;
  EXPECT_EQ(RedactedJson(expand).find(kChapSecret), std::string::npos);

  // The original message is untouched.
  auto req = StageRequestWithSecrets();
  (void)RedactedJson(req);
  EXPECT_EQ(req.secrets().at("chap-password"), kChapSecret);
}

// Encryption at rest: the class's key-encryption key travels in the
// provisioner and node-stage secrets under "encryptionKey", in the rotation
// request, and the wrapped data keys in the agent's records; none may reach a
// log line.
TEST(RedactionTest, EncryptionKeysAreBlankedWhereverTheyTravel) {
  constexpr char kKek[] = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
  constexpr char kWrapped[] = "v1.c2VjcmV0LXdyYXBwZWQta2V5LWJ5dGVzLWhlcmU=";
  csi::v1::CreateVolumeRequest create;
  create.set_name("pvc-1");
  (*create.mutable_parameters())["encrypted"] = "true";
  (*create.mutable_secrets())["encryptionKey"] = kKek;
  std::string json = RedactedJson(create);
  EXPECT_EQ(json.find(kKek), std::string::npos) << json;
  EXPECT_NE(json.find("encryptionKey"), std::string::npos) << json;
  EXPECT_NE(json.find("encrypted"), std::string::npos) << json;

  csi::v1::NodeStageVolumeRequest stage = StageRequestWithSecrets();
  (*stage.mutable_secrets())["encryptionKey"] = kKek;
  EXPECT_EQ(RedactedJson(stage).find(kKek), std::string::npos);

  keys::v1::RewrapDataKeysRequest rotate;
  rotate.set_old_encryption_key(kKek);
  rotate.set_new_encryption_key(kKek);
  EXPECT_EQ(RedactedJson(rotate).find(kKek), std::string::npos) << RedactedJson(rotate);

  target::v1::Volume volume;
  volume.set_id("vol-1");
  volume.set_wrapped_data_key(kWrapped);
  target::v1::SetWrappedDataKeyRequest set;
  set.set_expected(kWrapped);
  set.set_wrapped(kWrapped);
  EXPECT_EQ(RedactedJson(volume).find(kWrapped), std::string::npos) << RedactedJson(volume);
  EXPECT_EQ(RedactedJson(set).find(kWrapped), std::string::npos) << RedactedJson(set);
}

// A node service whose stage fails, as a real one might after a CHAP failure.
class FailingNode final : public csi::v1::Node::Service {
 public:
  grpc::Status NodeStageVolume(grpc::ServerContext*, const csi::v1::NodeStageVolumeRequest* request,
                               csi::v1::NodeStageVolumeResponse*) override {
    LogInfo("handler ran", {{"volume", request->volume_id()}});
    return ToGrpcStatus(PermissionDenied("volume " + request->volume_id() + ": CHAP authentication failed"));
  }
};

// A node service that always fails, behind the one RPC logging boundary, on
// a unix socket of its own.
struct LoggedFailingNode {
  testing::TempDir dir;
  std::string socket = dir.Join("csi.sock");
  FailingNode node;
  std::unique_ptr<grpc::Server> server;

  LoggedFailingNode() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
    builder.RegisterService(&node);
    AddRpcLogging(builder);
    server = builder.BuildAndStart();
  }
};

TEST(RedactionTest, RpcBoundaryLogsRequestWithoutSecretsAndTagsRequestId) {
  LoggedFailingNode served;
  ASSERT_TRUE(served.server);
  const std::string& socket = served.socket;
  auto& server = served.server;

  std::string log;
  InitLogging("blockcsi-test", LogFormat::kJson, LogLevel::kDebug);
  SetLogCaptureForTest(&log);
  auto stub = csi::v1::Node::NewStub(grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  csi::v1::NodeStageVolumeResponse resp;
  grpc::Status st = stub->NodeStageVolume(&ctx, StageRequestWithSecrets(), &resp);
  server->Shutdown();
  SetLogCaptureForTest(nullptr);

  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(st.error_message().find(kChapSecret), std::string::npos);
  EXPECT_NE(st.error_message().find("vol-42"), std::string::npos);
  EXPECT_EQ(log.find(kChapSecret), std::string::npos) << log;
  EXPECT_NE(log.find("rpc start"), std::string::npos) << log;
  EXPECT_NE(log.find("chap-password"), std::string::npos) << "the redacted request is logged";
  EXPECT_NE(log.find("PERMISSION_DENIED"), std::string::npos) << log;
  EXPECT_NE(log.find("/csi.v1.Node/NodeStageVolume"), std::string::npos) << log;
  // The handler's own line carries the same request id as the boundary's.
  EXPECT_NE(log.find("\"request_id\""), std::string::npos) << log;
  auto handler_line = log.find("handler ran");
  ASSERT_NE(handler_line, std::string::npos);
  auto line_start = log.rfind('\n', handler_line);
  std::string line = log.substr(line_start == std::string::npos ? 0 : line_start + 1,
                                log.find('\n', handler_line) - (line_start == std::string::npos ? 0 : line_start + 1));
  EXPECT_NE(line.find("request_id"), std::string::npos) << line;
}

// Bytes that are not the method's request message: gRPC itself answers
// INTERNAL with an empty message, which reads as a bug of ours; the one
// boundary turns it into INVALID_ARGUMENT with one line naming the method.
TEST(RedactionTest, ARequestThatDoesNotParseIsInvalidArgumentWithAOneLineMessage) {
  LoggedFailingNode served;
  ASSERT_TRUE(served.server);
  const std::string& socket = served.socket;
  auto& server = served.server;
  std::string log;
  InitLogging("blockcsi-test", LogFormat::kJson, LogLevel::kDebug);
  SetLogCaptureForTest(&log);
  grpc::GenericStub generic(grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  auto call = [&](const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, "/csi.v1.Node/NodeStageVolume", grpc::StubOptions(), &request, &response,
                      [&](grpc::Status st) { done.set_value(std::move(st)); });
    return done.get_future().get();
  };
  // A length-delimited field 1 that claims 127 bytes and has 2; a string
  // field that is not UTF-8 (proto3 refuses it: what a message of another
  // kind with bytes in that field gives).
  const std::string truncated("\x0a\x7f\x61\x62", 4);
  const std::string not_utf8("\x0a\x02\xc3\x28", 4);
  const std::vector<std::string> malformed = {truncated, not_utf8};
  for (const auto& bytes : malformed) {
    grpc::Status st = call(bytes);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find("/csi.v1.Node/NodeStageVolume"), std::string::npos) << st.error_message();
    EXPECT_EQ(st.error_message().find('\n'), std::string::npos) << st.error_message();
  }
  // A well-formed request still reaches the handler and keeps its own code.
  std::string good;
  ASSERT_TRUE(StageRequestWithSecrets().SerializeToString(&good));
  EXPECT_EQ(call(good).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  server->Shutdown();
  SetLogCaptureForTest(nullptr);
  EXPECT_NE(log.find("INVALID_ARGUMENT"), std::string::npos) << log;
  EXPECT_NE(log.find("does not parse"), std::string::npos) << log;
}

}  // namespace
}  // namespace blockcsi
