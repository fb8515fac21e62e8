#include "backend/remote/remote_backend.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "backend/remote/target_proto.h"
#include "backend/volume_id.h"
#include "common/atomic_file.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "target.grpc.pb.h"

namespace blockcsi {
namespace {

using namespace ::blockcsi::target::v1;  // NOLINT(google-build-using-namespace): the service's own messages

class RemoteBackend final : public VolumeBackend {
 public:
  RemoteBackend(const std::shared_ptr<grpc::Channel>& channel, RemoteBackendOptions options)
      : options_(std::move(options)), stub_(TargetAgent::NewStub(channel)) {}

  void LoadInfo() {
    GetInfoResponse info;
    auto ctx = Context(options_.connect_timeout);
    ctx->set_wait_for_ready(true);
    grpc::Status st = stub_->GetInfo(ctx.get(), GetInfoRequest(), &info);
    if (!st.ok()) {
      LogWarn("target agent not answering yet", {{"agent", options_.target}, {"error", st.error_message()}});
      return;
    }
    MutexLock lock(mu_);
    name_ = info.name();
    granularity_ = info.allocation_granularity();
    parameters_.assign(info.supported_parameters().begin(), info.supported_parameters().end());
  }

  std::string Name() const override {
    MutexLock lock(mu_);
    return "remote-" + name_;
  }
  uint64_t AllocationGranularity() const override {
    MutexLock lock(mu_);
    return granularity_;
  }
  std::vector<std::string> SupportedParameters() const override {
    MutexLock lock(mu_);
    return parameters_;
  }

  StatusOr<VolumeRecord> CreateVolume(const CreateVolumeSpec& spec) override {
    CreateVolumeRequest req;
    req.set_name(spec.name);
    req.set_size_bytes(spec.size_bytes);
    ToProto(spec.source, req.mutable_source());
    req.mutable_parameters()->insert(spec.parameters.begin(), spec.parameters.end());
    Volume out;
    BLOCKCSI_RETURN_IF_ERROR(Call(&TargetAgent::Stub::CreateVolume, req, &out));
    return FromProto(out);
  }
  Status DeleteVolume(const std::string& volume_id) override {
    DeleteVolumeRequest req;
    req.set_volume_id(volume_id);
    DeleteVolumeResponse out;
    return Call(&TargetAgent::Stub::DeleteVolume, req, &out);
  }
  StatusOr<VolumeRecord> ExpandVolume(const std::string& volume_id, uint64_t new_size_bytes) override {
    ExpandVolumeRequest req;
    req.set_volume_id(volume_id);
    req.set_new_size_bytes(new_size_bytes);
    Volume out;
    BLOCKCSI_RETURN_IF_ERROR(Call(&TargetAgent::Stub::ExpandVolume, req, &out));
    return FromProto(out);
  }
  StatusOr<VolumeRecord> GrantAccess(const std::string& volume_id, const AccessGrant& grant) override {
    GrantAccessRequest req;
    req.set_volume_id(volume_id);
    req.set_initiator_iqn(grant.initiator_iqn);
    req.set_node_id(grant.node_id);
    req.set_read_only(grant.read_only);
    req.set_capability(grant.capability);
    ToProto(grant.chap, req.mutable_chap());
    Volume out;
    BLOCKCSI_RETURN_IF_ERROR(Call(&TargetAgent::Stub::GrantAccess, req, &out));
    return FromProto(out);
  }
  Status RevokeAccess(const std::string& volume_id, const std::string& initiator_iqn) override {
    RevokeAccessRequest req;
    req.set_volume_id(volume_id);
    req.set_initiator_iqn(initiator_iqn);
    RevokeAccessResponse out;
    return Call(&TargetAgent::Stub::RevokeAccess, req, &out);
  }
  StatusOr<VolumeRecord> GetVolume(const std::string& volume_id) override {
    GetVolumeRequest req;
    req.set_volume_id(volume_id);
    Volume out;
    BLOCKCSI_RETURN_IF_ERROR(Call(&TargetAgent::Stub::GetVolume, req, &out));
    return FromProto(out);
  }
  StatusOr<VolumeHealth> CheckVolume(const std::string& volume_id) override {
    CheckVolumeRequest req;
    req.set_volume_id(volume_id);
    CheckVolumeResponse out;
    BLOCKCSI_RETURN_IF_ERROR(Call(&TargetAgent::Stub::CheckVolume, req, &out));
    return VolumeHealth{out.abnormal(), out.message()};
  }
  StatusOr<Page<VolumeRecord>> ListVolumes(const std::string& start_token, int max_entries) override {
    ListVolumesRequest req;
    req.set_start_token(start_token);
    req.set_max_entries(max_entries);
    ListVolumesResponse out;
    BLOCKCSI_RETURN_IF_ERROR(Call(&TargetAgent::Stub::ListVolumes, req, &out));
    Page<VolumeRecord> page;
    for (const auto& v : out.volumes()) page.items.push_back(FromProto(v));
    page.next_token = out.next_token();
    return page;
  }
  // The agent serves one pool, whose free space is the same whatever the
  // query's parameters or segment: the query does not travel.
  StatusOr<uint64_t> AvailableBytes(const CapacityQuery& /*query*/) override {
    GetCapacityResponse out;
    BLOCKCSI_RETURN_IF_ERROR(Call(&TargetAgent::Stub::GetCapacity, GetCapacityRequest(), &out));
    return out.available_bytes();
  }
  StatusOr<SnapshotRecord> CreateSnapshot(const std::string& source_volume_id, const std::string& name) override {
    CreateSnapshotRequest req;
    req.set_source_volume_id(source_volume_id);
    req.set_name(name);
    Snapshot out;
    BLOCKCSI_RETURN_IF_ERROR(Call(&TargetAgent::Stub::CreateSnapshot, req, &out));
    return FromProto(out);
  }
  Status DeleteSnapshot(const std::string& snapshot_id) override {
    DeleteSnapshotRequest req;
    req.set_snapshot_id(snapshot_id);
    DeleteSnapshotResponse out;
    return Call(&TargetAgent::Stub::DeleteSnapshot, req, &out);
  }
  Status SetWrappedDataKey(const std::string& id, const std::string& expected, const std::string& wrapped) override {
    SetWrappedDataKeyRequest req;
    req.set_id(id);
    req.set_expected(expected);
    req.set_wrapped(wrapped);
    SetWrappedDataKeyResponse out;
    return Call(&TargetAgent::Stub::SetWrappedDataKey, req, &out);
  }
  StatusOr<SnapshotRecord> GetSnapshot(const std::string& snapshot_id) override {
    GetSnapshotRequest req;
    req.set_snapshot_id(snapshot_id);
    Snapshot out;
    BLOCKCSI_RETURN_IF_ERROR(Call(&TargetAgent::Stub::GetSnapshot, req, &out));
    return FromProto(out);
  }
  StatusOr<Page<SnapshotRecord>> ListSnapshots(const std::string& source_volume_id, const std::string& start_token,
                                               int max_entries) override {
    ListSnapshotsRequest req;
    req.set_source_volume_id(source_volume_id);
    req.set_start_token(start_token);
    req.set_max_entries(max_entries);
    ListSnapshotsResponse out;
    BLOCKCSI_RETURN_IF_ERROR(Call(&TargetAgent::Stub::ListSnapshots, req, &out));
    Page<SnapshotRecord> page;
    for (const auto& s : out.snapshots()) page.items.push_back(FromProto(s));
    page.next_token = out.next_token();
    return page;
  }
  // The agent serves the local backend, whose ids are vol-<hex>.
  bool MayHoldVolume(const std::string& volume_id) const override { return IsVolumeId(volume_id); }
  Status Healthy() override {
    ProbeResponse out;
    return Call(&TargetAgent::Stub::Probe, ProbeRequest(), &out);
  }
  std::vector<HostFences> FenceNode(const std::string& node_id, const std::string& initiator_iqn) override {
    FenceNodeRequest req;
    req.set_node_id(node_id);
    req.set_initiator_iqn(initiator_iqn);
    Fence out;
    HostFences answer{Name(), Call(&TargetAgent::Stub::FenceNode, req, &out), {}};
    if (answer.status.ok()) answer.fences.push_back(FromProto(out));
    return {answer};
  }
  std::vector<HostFences> UnfenceNode(const std::string& node_id) override {
    UnfenceNodeRequest req;
    req.set_node_id(node_id);
    UnfenceNodeResponse out;
    return {HostFences{Name(), Call(&TargetAgent::Stub::UnfenceNode, req, &out), {}}};
  }
  std::vector<HostFences> ListFences() override {
    ListFencesResponse out;
    HostFences answer{Name(), Call(&TargetAgent::Stub::ListFences, ListFencesRequest(), &out), {}};
    for (const auto& f : out.fences()) answer.fences.push_back(FromProto(f));
    return {answer};
  }

 private:
  std::unique_ptr<grpc::ClientContext> Context(std::chrono::milliseconds timeout) const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + timeout);
    // Carries the controller's request id so an operator can match the
    // agent's log lines of this call with the controller's.
    std::string_view request_id = CurrentRequestId();
    if (!request_id.empty()) ctx->AddMetadata("x-request-id", std::string(request_id));
    return ctx;
  }

  template <typename Req, typename Resp>
  Status Call(grpc::Status (TargetAgent::Stub::*method)(grpc::ClientContext*, const Req&, Resp*), const Req& req,
              Resp* out) {
    auto ctx = Context(options_.call_timeout);
    grpc::Status st = (stub_.get()->*method)(ctx.get(), req, out);
    if (st.ok()) return OkStatus();
    Status status = FromGrpcStatus(st);
    if (status.code() == StatusCode::kUnavailable) return status.WithContext("target agent " + options_.target);
    return status;
  }

  const RemoteBackendOptions options_;
  std::unique_ptr<TargetAgent::Stub> stub_;
  mutable Mutex mu_;
  std::string name_ GUARDED_BY(mu_) = "target";
  uint64_t granularity_ GUARDED_BY(mu_) = uint64_t{1} << 20;
  std::vector<std::string> parameters_ GUARDED_BY(mu_);
};

}  // namespace

StatusOr<std::shared_ptr<VolumeBackend>> MakeRemoteBackend(const RemoteBackendOptions& options) {
  if (options.target.empty()) return InvalidArgument("--target-agent HOST:PORT is required for --backend remote");
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  bool any_tls = !options.tls_cert.empty() || !options.tls_key.empty() || !options.tls_ca.empty();
  bool unix_socket = options.target.rfind("unix:", 0) == 0;
  if (any_tls) {
    if (options.tls_cert.empty() || options.tls_key.empty() || options.tls_ca.empty()) {
      return InvalidArgument("mTLS to the target agent needs all of --tls-cert, --tls-key and --tls-ca");
    }
    grpc::SslCredentialsOptions ssl;
    BLOCKCSI_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFileToString(options.tls_ca));
    BLOCKCSI_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadFileToString(options.tls_key));
    BLOCKCSI_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadFileToString(options.tls_cert));
    credentials = grpc::SslCredentials(ssl);
  } else if (options.insecure || unix_socket) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    return InvalidArgument("the target agent " + options.target +
                           " is reached over TCP: give --tls-cert, --tls-key and --tls-ca, or --insecure");
  }
  auto channel = grpc::CreateChannel(options.target, credentials);
  auto backend = std::make_shared<RemoteBackend>(channel, options);
  backend->LoadInfo();
  return std::shared_ptr<VolumeBackend>(backend);
}

}  // namespace blockcsi
