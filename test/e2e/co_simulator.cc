#include "e2e/co_simulator.h"

#include <algorithm>
#include <filesystem>
#include <thread>

namespace blockcsi::e2e {

bool IsRetryable(grpc::StatusCode code) {
  return code == grpc::StatusCode::ABORTED || code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

std::string CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "code " + std::to_string(static_cast<int>(code));
  }
}

CoSimulator::CoSimulator(csi::v1::Controller::Stub* controller, CoSimulatorOptions options)
    : controller_(controller), options_(std::move(options)) {}

void CoSimulator::AddNode(const std::string& node_id, csi::v1::Node::Stub* node, const std::string& kubelet_dir) {
  nodes_[node_id] = NodeEntry{node, kubelet_dir, {}};
}

CoSimulator::NodeEntry* CoSimulator::Node(const std::string& node_id) {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

std::unique_ptr<grpc::ClientContext> CoSimulator::Context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
  return ctx;
}

void CoSimulator::Note(const std::string& what, const grpc::Status& status) {
  events_.push_back(what + " -> " + CodeName(status.error_code()) +
                    (status.ok() ? std::string() : ": " + status.error_message()));
}

std::string CoSimulator::EventLog() const {
  std::string out = "CO events:\n";
  for (const auto& e : events_) out += "  " + e + "\n";
  return out;
}

template <typename Call>
grpc::Status CoSimulator::Retry(const std::string& what, Call call, int* attempts) {
  auto deadline = std::chrono::steady_clock::now() + options_.retry_budget;
  std::chrono::milliseconds backoff = options_.initial_backoff;
  while (true) {
    grpc::Status st = call();
    if (attempts != nullptr) ++*attempts;
    Note(what, st);
    if (st.ok() || !IsRetryable(st.error_code())) return st;
    if (std::chrono::steady_clock::now() + backoff > deadline) return st;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

std::string CoSimulator::StagingPath(const std::string& node_id, const std::string& volume_id) const {
  // kubelet: <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount;
  // the volume id is already unique and path-safe here.
  auto it = nodes_.find(node_id);
  std::string root = it == nodes_.end() ? "/nonexistent" : it->second.kubelet_dir;
  return root + "/plugins/kubernetes.io/csi/" + options_.driver_name + "/" + volume_id + "/globalmount";
}

std::string CoSimulator::PodVolumePath(const std::string& node_id, const std::string& pod_name,
                                       const std::string& pv_name) const {
  auto it = nodes_.find(node_id);
  std::string root = it == nodes_.end() ? "/nonexistent" : it->second.kubelet_dir;
  return root + "/pods/" + pod_name + "/volumes/kubernetes.io~csi/" + pv_name + "/mount";
}

// ---- provisioner

grpc::Status CoSimulator::Provision(const std::string& pvc_name, int64_t bytes,
                                    const csi::v1::VolumeCapability& capability,
                                    const std::map<std::string, std::string>& parameters, PersistentVolume* pv,
                                    const TopologyRequirement& topology) {
  csi::v1::CreateVolumeRequest req;
  // external-provisioner names volumes pvc-<uid>.
  req.set_name("pvc-" + pvc_name);
  req.mutable_capacity_range()->set_required_bytes(bytes);
  *req.add_volume_capabilities() = capability;
  for (const auto& [k, v] : parameters) (*req.mutable_parameters())[k] = v;
  for (const auto& segments : topology.requisite) {
    req.mutable_accessibility_requirements()->add_requisite()->mutable_segments()->insert(segments.begin(),
                                                                                          segments.end());
  }
  for (const auto& segments : topology.preferred) {
    req.mutable_accessibility_requirements()->add_preferred()->mutable_segments()->insert(segments.begin(),
                                                                                          segments.end());
  }
  csi::v1::CreateVolumeResponse resp;
  grpc::Status st = Retry("CreateVolume " + req.name(), [&] {
    auto ctx = Context();
    return controller_->CreateVolume(ctx.get(), req, &resp);
  });
  if (!st.ok()) return st;
  pv->name = req.name();
  pv->volume_id = resp.volume().volume_id();
  pv->capacity_bytes = resp.volume().capacity_bytes();
  pv->volume_context.clear();
  for (const auto& [k, v] : resp.volume().volume_context()) pv->volume_context[k] = v;
  pv->accessible_topology.clear();
  for (const auto& t : resp.volume().accessible_topology()) {
    pv->accessible_topology.emplace_back(t.segments().begin(), t.segments().end());
  }
  pv->capability = capability;
  return st;
}

grpc::Status CoSimulator::Capacity(const Segments& segment, const std::map<std::string, std::string>& parameters,
                                   int64_t* available_bytes) {
  csi::v1::GetCapacityRequest req;
  req.mutable_accessible_topology()->mutable_segments()->insert(segment.begin(), segment.end());
  for (const auto& [k, v] : parameters) (*req.mutable_parameters())[k] = v;
  csi::v1::GetCapacityResponse resp;
  auto ctx = Context();
  grpc::Status st = controller_->GetCapacity(ctx.get(), req, &resp);
  std::string where;
  for (const auto& [k, v] : segment) where += (where.empty() ? "" : ",") + k + "=" + v;
  Note("GetCapacity " + where, st);
  if (st.ok()) *available_bytes = resp.available_capacity();
  return st;
}

grpc::Status CoSimulator::NodeTopology(const std::string& node_id, Segments* segments) {
  NodeEntry* node = Node(node_id);
  if (node == nullptr) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unknown node " + node_id);
  csi::v1::NodeGetInfoResponse resp;
  auto ctx = Context();
  grpc::Status st = node->stub->NodeGetInfo(ctx.get(), csi::v1::NodeGetInfoRequest(), &resp);
  Note("NodeGetInfo " + node_id, st);
  if (st.ok())
    segments->insert(resp.accessible_topology().segments().begin(), resp.accessible_topology().segments().end());
  return st;
}

grpc::Status CoSimulator::Deprovision(const PersistentVolume& pv) {
  csi::v1::DeleteVolumeRequest req;
  req.set_volume_id(pv.volume_id);
  csi::v1::DeleteVolumeResponse resp;
  return Retry("DeleteVolume " + pv.volume_id, [&] {
    auto ctx = Context();
    return controller_->DeleteVolume(ctx.get(), req, &resp);
  });
}

// ---- attacher

const VolumeAttachment* CoSimulator::FindAttachment(const std::string& volume_id, const std::string& node_id) const {
  for (const auto& [name, va] : attachments_) {
    if (va.volume_id == volume_id && va.node_id == node_id) return &va;
  }
  return nullptr;
}

grpc::Status CoSimulator::Attach(const PersistentVolume& pv, const std::string& node_id) {
  std::string name = "csi-" + pv.volume_id + "-" + node_id;
  VolumeAttachment& va = attachments_[name];
  va.name = name;
  va.volume_id = pv.volume_id;
  va.node_id = node_id;
  if (va.attached) return grpc::Status::OK;  // nothing to reconcile

  csi::v1::ControllerPublishVolumeRequest req;
  req.set_volume_id(pv.volume_id);
  req.set_node_id(node_id);
  *req.mutable_volume_capability() = pv.capability;
  req.set_readonly(false);
  for (const auto& [k, v] : pv.volume_context) (*req.mutable_volume_context())[k] = v;
  csi::v1::ControllerPublishVolumeResponse resp;
  grpc::Status st = Retry(
      "ControllerPublishVolume " + pv.volume_id + " " + node_id,
      [&] {
        auto ctx = Context();
        return controller_->ControllerPublishVolume(ctx.get(), req, &resp);
      },
      &va.attach_attempts);
  if (!st.ok()) {
    va.attach_error = CodeName(st.error_code()) + ": " + st.error_message();
    return st;
  }
  va.attach_error.clear();
  va.attached = true;
  va.attachment_metadata.clear();
  for (const auto& [k, v] : resp.publish_context()) va.attachment_metadata[k] = v;
  return st;
}

grpc::Status CoSimulator::Detach(const PersistentVolume& pv, const std::string& node_id) {
  std::string name = "csi-" + pv.volume_id + "-" + node_id;
  auto it = attachments_.find(name);
  // The real attacher also unpublishes an object it never saw attached:
  // a publish may have happened before a crash.
  VolumeAttachment& va = attachments_[name];
  if (it == attachments_.end()) {
    va.name = name;
    va.volume_id = pv.volume_id;
    va.node_id = node_id;
  }
  csi::v1::ControllerUnpublishVolumeRequest req;
  req.set_volume_id(pv.volume_id);
  req.set_node_id(node_id);
  csi::v1::ControllerUnpublishVolumeResponse resp;
  grpc::Status st = Retry(
      "ControllerUnpublishVolume " + pv.volume_id + " " + node_id,
      [&] {
        auto ctx = Context();
        return controller_->ControllerUnpublishVolume(ctx.get(), req, &resp);
      },
      &va.detach_attempts);
  if (!st.ok()) {
    va.detach_error = CodeName(st.error_code()) + ": " + st.error_message();
    return st;
  }
  attachments_.erase(name);  // the finalizer is removed, the object goes
  return st;
}

// ---- kubelet

grpc::Status CoSimulator::StageOnce(const std::string& node_id, const PersistentVolume& pv,
                                    const std::map<std::string, std::string>& publish_context,
                                    const std::string& staging_path) {
  NodeEntry* node = Node(node_id);
  if (node == nullptr) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unknown node " + node_id);
  std::error_code ec;
  std::filesystem::create_directories(staging_path, ec);  // kubelet makes it
  csi::v1::NodeStageVolumeRequest req;
  req.set_volume_id(pv.volume_id);
  req.set_staging_target_path(staging_path);
  *req.mutable_volume_capability() = pv.capability;
  for (const auto& [k, v] : publish_context) (*req.mutable_publish_context())[k] = v;
  for (const auto& [k, v] : pv.volume_context) (*req.mutable_volume_context())[k] = v;
  for (const auto& [k, v] : pv.node_stage_secrets) (*req.mutable_secrets())[k] = v;
  csi::v1::NodeStageVolumeResponse resp;
  auto ctx = Context();
  grpc::Status st = node->stub->NodeStageVolume(ctx.get(), req, &resp);
  Note("NodeStageVolume " + pv.volume_id + " on " + node_id + " (once)", st);
  return st;
}

grpc::Status CoSimulator::RunPod(const std::string& pod_name, const std::string& node_id, const PersistentVolume& pv,
                                 Pod* pod) {
  NodeEntry* node = Node(node_id);
  if (node == nullptr) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unknown node " + node_id);
  const VolumeAttachment* va = FindAttachment(pv.volume_id, node_id);
  if (va == nullptr || !va->attached) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "kubelet: volume " + pv.volume_id + " has no attached VolumeAttachment for node " + node_id);
  }
  std::string staging = StagingPath(node_id, pv.volume_id);
  if (node->pods_using[pv.volume_id] == 0) {
    std::error_code ec;
    std::filesystem::create_directories(staging, ec);
    csi::v1::NodeStageVolumeRequest req;
    req.set_volume_id(pv.volume_id);
    req.set_staging_target_path(staging);
    *req.mutable_volume_capability() = pv.capability;
    for (const auto& [k, v] : va->attachment_metadata) (*req.mutable_publish_context())[k] = v;
    for (const auto& [k, v] : pv.volume_context) (*req.mutable_volume_context())[k] = v;
    for (const auto& [k, v] : pv.node_stage_secrets) (*req.mutable_secrets())[k] = v;
    csi::v1::NodeStageVolumeResponse resp;
    grpc::Status st = Retry("NodeStageVolume " + pv.volume_id + " on " + node_id, [&] {
      auto ctx = Context();
      return node->stub->NodeStageVolume(ctx.get(), req, &resp);
    });
    if (!st.ok()) return st;
  }
  std::string target = PodVolumePath(node_id, pod_name, pv.name);
  std::error_code ec;
  // kubelet makes the parent; the driver makes the target itself.
  std::filesystem::create_directories(std::filesystem::path(target).parent_path(), ec);
  csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id(pv.volume_id);
  req.set_staging_target_path(staging);
  req.set_target_path(target);
  *req.mutable_volume_capability() = pv.capability;
  req.set_readonly(false);
  for (const auto& [k, v] : va->attachment_metadata) (*req.mutable_publish_context())[k] = v;
  for (const auto& [k, v] : pv.volume_context) (*req.mutable_volume_context())[k] = v;
  csi::v1::NodePublishVolumeResponse resp;
  grpc::Status st = Retry("NodePublishVolume " + pv.volume_id + " on " + node_id + " for pod " + pod_name, [&] {
    auto ctx = Context();
    return node->stub->NodePublishVolume(ctx.get(), req, &resp);
  });
  // A staged volume counts as in use by this pod even when publishing
  // failed: DeletePod then unstages it.
  ++node->pods_using[pv.volume_id];
  pod->name = pod_name;
  pod->node_id = node_id;
  pod->volume_id = pv.volume_id;
  pod->volume_path = target;
  return st;
}

grpc::Status CoSimulator::DeletePod(const Pod& pod) {
  NodeEntry* node = Node(pod.node_id);
  if (node == nullptr) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unknown node " + pod.node_id);
  csi::v1::NodeUnpublishVolumeRequest ureq;
  ureq.set_volume_id(pod.volume_id);
  ureq.set_target_path(pod.volume_path);
  csi::v1::NodeUnpublishVolumeResponse uresp;
  grpc::Status st = Retry("NodeUnpublishVolume " + pod.volume_id + " on " + pod.node_id + " for pod " + pod.name, [&] {
    auto ctx = Context();
    return node->stub->NodeUnpublishVolume(ctx.get(), ureq, &uresp);
  });
  if (!st.ok()) return st;
  int& using_pods = node->pods_using[pod.volume_id];
  if (using_pods > 0) --using_pods;
  if (using_pods > 0) return st;
  csi::v1::NodeUnstageVolumeRequest sreq;
  sreq.set_volume_id(pod.volume_id);
  sreq.set_staging_target_path(StagingPath(pod.node_id, pod.volume_id));
  csi::v1::NodeUnstageVolumeResponse sresp;
  return Retry("NodeUnstageVolume " + pod.volume_id + " on " + pod.node_id, [&] {
    auto ctx = Context();
    return node->stub->NodeUnstageVolume(ctx.get(), sreq, &sresp);
  });
}

grpc::Status CoSimulator::VolumeStats(const Pod& pod, csi::v1::NodeGetVolumeStatsResponse* response) {
  NodeEntry* node = Node(pod.node_id);
  if (node == nullptr) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unknown node " + pod.node_id);
  csi::v1::NodeGetVolumeStatsRequest req;
  req.set_volume_id(pod.volume_id);
  req.set_volume_path(pod.volume_path);
  req.set_staging_target_path(StagingPath(pod.node_id, pod.volume_id));
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return node->stub->NodeGetVolumeStats(ctx.get(), req, response);
}

grpc::Status CoSimulator::ResizePvc(PersistentVolume* pv, int64_t bytes, const Pod& pod) {
  NodeEntry* node = Node(pod.node_id);
  if (node == nullptr) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unknown node " + pod.node_id);
  csi::v1::ControllerExpandVolumeRequest creq;
  creq.set_volume_id(pv->volume_id);
  creq.mutable_capacity_range()->set_required_bytes(bytes);
  *creq.mutable_volume_capability() = pv->capability;
  csi::v1::ControllerExpandVolumeResponse cresp;
  grpc::Status st = controller_->ControllerExpandVolume(Context().get(), creq, &cresp);
  Note("ControllerExpandVolume " + pv->volume_id + " " + std::to_string(bytes), st);
  if (!st.ok()) return st;
  pv->capacity_bytes = cresp.capacity_bytes();
  if (!cresp.node_expansion_required()) return st;
  csi::v1::NodeExpandVolumeRequest nreq;
  nreq.set_volume_id(pv->volume_id);
  nreq.set_volume_path(pod.volume_path);
  nreq.set_staging_target_path(StagingPath(pod.node_id, pv->volume_id));
  nreq.mutable_capacity_range()->set_required_bytes(bytes);
  *nreq.mutable_volume_capability() = pv->capability;
  csi::v1::NodeExpandVolumeResponse nresp;
  st = node->stub->NodeExpandVolume(Context().get(), nreq, &nresp);
  Note("NodeExpandVolume " + pv->volume_id + " " + pod.node_id, st);
  return st;
}

}  // namespace blockcsi::e2e
