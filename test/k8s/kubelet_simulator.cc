#include "k8s/kubelet_simulator.h"

#include <time.h>

#include <algorithm>

#include "support/plugin_under_test.h"

namespace blockcsi::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;
using Mode = csi::v1::VolumeCapability::AccessMode;

std::string Str(const Json& j, const Json::json_pointer& p) {
  return j.contains(p) && j.at(p).is_string() ? j.at(p).get<std::string>() : "";
}

// kubelet's mapping of a PV's access modes to the CSI mode.
Mode::Mode CsiMode(const Json& pv) {
  const Json modes = pv.value(Json::json_pointer("/spec/accessModes"), Json::array());
  auto has = [&](const char* m) { return std::find(modes.begin(), modes.end(), m) != modes.end(); };
  if (has("ReadWriteOncePod")) return Mode::SINGLE_NODE_SINGLE_WRITER;
  if (has("ReadWriteMany")) return Mode::MULTI_NODE_MULTI_WRITER;
  if (has("ReadOnlyMany") && !has("ReadWriteOnce")) return Mode::MULTI_NODE_READER_ONLY;
  return Mode::SINGLE_NODE_WRITER;
}

// Now in RFC 3339 with microseconds (a Lease's MicroTime; a condition's
// Time takes it too).
std::string NowRfc3339() {
  auto now = std::chrono::system_clock::now();
  time_t seconds = std::chrono::system_clock::to_time_t(now);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  struct tm utc;
  gmtime_r(&seconds, &utc);
  char text[64];
  snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
           utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<long>(micros));
  return text;
}

}  // namespace

KubeletSimulator::KubeletSimulator(KubeCluster* cluster, csi::v1::Node::Stub* node, std::string node_name,
                                   std::string kubelet_dir, std::string driver)
    : cluster_(cluster),
      node_(node),
      node_name_(std::move(node_name)),
      kubelet_dir_(std::move(kubelet_dir)),
      driver_(std::move(driver)),
      co_(nullptr, e2e::CoSimulatorOptions{.driver_name = driver_}) {}

KubeletSimulator::~KubeletSimulator() { StopHeartbeat(); }

void KubeletSimulator::SetNodeStub(csi::v1::Node::Stub* node) {
  node_ = node;
  co_.AddNode(node_id_, node_, kubelet_dir_);
}

bool KubeletSimulator::Beat(bool transition, std::string* error) {
  const std::string now = NowRfc3339();
  // kubelet's Lease: node lifecycle takes its renewal as the heartbeat.
  Json lease{{"apiVersion", "coordination.k8s.io/v1"},
             {"kind", "Lease"},
             {"metadata", {{"name", node_name_}, {"namespace", "kube-node-lease"}}},
             {"spec", {{"holderIdentity", node_name_}, {"leaseDurationSeconds", 10}, {"renewTime", now}}}};
  KubectlResult r = cluster_->Kubectl({"apply", "-f", "-"}, lease.dump());
  if (!r.ok()) {
    *error = "cannot renew the node's Lease: " + r.err;
    return false;
  }
  // The Ready condition (merged by type): a Node marked Unknown while its
  // kubelet was away is Ready again only when the kubelet says so.
  Json ready{{"type", "Ready"},
             {"status", "True"},
             {"reason", "KubeletReady"},
             {"message", "the k8s test's kubelet simulator"},
             {"lastHeartbeatTime", now}};
  if (transition) ready["lastTransitionTime"] = now;
  Json patch{{"status", {{"conditions", Json::array({ready})}}}};
  r = cluster_->Kubectl({"patch", "node", node_name_, "--subresource=status", "--type=strategic", "-p", patch.dump()});
  if (!r.ok()) {
    *error = "cannot renew the node's Ready condition: " + r.err;
    return false;
  }
  last_heartbeat_ = std::chrono::steady_clock::now();
  return true;
}

bool KubeletSimulator::StartHeartbeat(std::chrono::milliseconds every, std::string* error) {
  StopHeartbeat();
  if (!Beat(/*transition=*/true, error)) return false;
  {
    std::lock_guard lock(heartbeat_mu_);
    heartbeat_stop_ = false;
  }
  heartbeat_ = std::thread([this, every] {
    std::unique_lock lock(heartbeat_mu_);
    while (!heartbeat_cv_.wait_for(lock, every, [&] { return heartbeat_stop_; })) {
      lock.unlock();
      std::string why;
      // A failed renewal is a missed heartbeat, as for kubelet: the next
      // one may succeed, and node lifecycle decides what too many mean.
      Beat(/*transition=*/false, &why);
      lock.lock();
    }
  });
  return true;
}

void KubeletSimulator::StopHeartbeat() {
  if (!heartbeat_.joinable()) return;
  {
    std::lock_guard lock(heartbeat_mu_);
    heartbeat_stop_ = true;
  }
  heartbeat_cv_.notify_all();
  heartbeat_.join();
}

bool KubeletSimulator::Register(std::string* error) {
  csi::v1::NodeGetInfoRequest req;
  csi::v1::NodeGetInfoResponse info;
  auto ctx = Deadline(30s);
  grpc::Status st = node_->NodeGetInfo(ctx.get(), req, &info);
  if (!st.ok()) {
    *error = "NodeGetInfo: " + st.error_message();
    return false;
  }
  node_id_ = info.node_id();
  co_.AddNode(node_id_, node_, kubelet_dir_);

  Json labels{{"kubernetes.io/hostname", node_name_}, {"kubernetes.io/os", "linux"}};
  Json keys = Json::array();
  if (info.has_accessible_topology()) {
    for (const auto& [k, v] : info.accessible_topology().segments()) {
      labels[k] = v;
      keys.push_back(k);
    }
  }
  Json resources{{"cpu", "4"}, {"memory", "8Gi"}, {"pods", "110"}};
  Json node{{"apiVersion", "v1"},
            {"kind", "Node"},
            {"metadata",
             {{"name", node_name_},
              {"labels", labels},
              {"annotations",
               {{"volumes.kubernetes.io/controller-managed-attach-detach", "true"},
                {"csi.volume.kubernetes.io/nodeid", Json{{driver_, node_id_}}.dump()}}}}},
            {"status",
             {{"capacity", resources},
              {"allocatable", resources},
              {"conditions", Json::array({{{"type", "Ready"},
                                           {"status", "True"},
                                           {"reason", "KubeletReady"},
                                           {"message", "the k8s test's kubelet simulator"}}})}}}};
  if (!cluster_->Create(node.dump(), error)) return false;
  Json driver{{"name", driver_}, {"nodeID", node_id_}, {"topologyKeys", keys}};
  if (info.max_volumes_per_node() > 0) driver["allocatable"] = {{"count", info.max_volumes_per_node()}};
  Json csinode{{"apiVersion", "storage.k8s.io/v1"},
               {"kind", "CSINode"},
               {"metadata", {{"name", node_name_}}},
               {"spec", {{"drivers", Json::array({driver})}}}};
  return cluster_->Create(csinode.dump(), error);
}

bool KubeletSimulator::WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  return KubeCluster::WaitFor(
      [&] {
        if (supervise_) supervise_();
        return done();
      },
      timeout);
}

bool KubeletSimulator::SetVolumesInUse() {
  Json patch{{"status", {{"volumesInUse", volumes_in_use_}}}};
  return cluster_->Kubectl({"patch", "node", node_name_, "--subresource=status", "--type=merge", "-p", patch.dump()})
      .ok();
}

bool KubeletSimulator::RunPod(const std::string& ns, const std::string& name, RunningPod* out, std::string* error,
                              std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&] {
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
                    0ms);
  };
  out->ns = ns;
  out->name = name;
  Json pod;
  if (!WaitFor(
          [&] {
            auto got = cluster_->Get("pod", name, ns);
            if (!got) return false;
            pod = *got;
            return !Str(pod, "/spec/nodeName"_json_pointer).empty();
          },
          left())) {
    *error = "pod " + ns + "/" + name + " was not scheduled; pod: " + pod.dump();
    return false;
  }
  if (Str(pod, "/spec/nodeName"_json_pointer) != node_name_) {
    *error = "pod " + name + " was scheduled on " + Str(pod, "/spec/nodeName"_json_pointer);
    return false;
  }
  out->uid = Str(pod, "/metadata/uid"_json_pointer);
  out->pvc = Str(pod, "/spec/volumes/0/persistentVolumeClaim/claimName"_json_pointer);
  Json pvc;
  if (!WaitFor(
          [&] {
            auto got = cluster_->Get("pvc", out->pvc, ns);
            if (!got) return false;
            pvc = *got;
            return Str(pvc, "/status/phase"_json_pointer) == "Bound";
          },
          left())) {
    *error = "PVC " + out->pvc + " not bound; PVC: " + pvc.dump();
    return false;
  }
  out->pv = Str(pvc, "/spec/volumeName"_json_pointer);
  auto pv = cluster_->Get("pv", out->pv);
  if (!pv) {
    *error = "PV " + out->pv + " not found";
    return false;
  }
  out->volume_handle = Str(*pv, "/spec/csi/volumeHandle"_json_pointer);
  out->block = Str(*pv, "/spec/volumeMode"_json_pointer) == "Block";
  e2e::PersistentVolume& volume = out->volume;
  volume.name = out->pv;
  volume.volume_id = out->volume_handle;
  volume.capability = out->block ? BlockCapability(CsiMode(*pv))
                                 : MountCapability(Str(*pv, "/spec/csi/fsType"_json_pointer), CsiMode(*pv));
  if (pv->contains("/spec/csi/volumeAttributes"_json_pointer)) {
    for (const auto& [k, v] : pv->at("/spec/csi/volumeAttributes"_json_pointer).items()) {
      volume.volume_context[k] = v.get<std::string>();
    }
  }

  // The VolumeAttachment the attach-detach controller made, once the
  // external-attacher reported it attached.
  Json va;
  if (!WaitFor(
          [&] {
            for (const Json& item : cluster_->List("volumeattachments")) {
              if (Str(item, "/spec/source/persistentVolumeName"_json_pointer) == out->pv &&
                  Str(item, "/spec/nodeName"_json_pointer) == node_name_) {
                va = item;
                return va.value(Json::json_pointer("/status/attached"), false);
              }
            }
            return false;
          },
          left())) {
    *error = "no attached VolumeAttachment for PV " + out->pv + " on " + node_name_ + "; last seen: " + va.dump();
    return false;
  }
  e2e::VolumeAttachment attachment;
  attachment.name = Str(va, "/metadata/name"_json_pointer);
  attachment.volume_id = out->volume_handle;
  attachment.node_id = node_id_;
  attachment.attached = true;
  if (va.contains("/status/attachmentMetadata"_json_pointer)) {
    for (const auto& [k, v] : va.at("/status/attachmentMetadata"_json_pointer).items()) {
      attachment.attachment_metadata[k] = v.get<std::string>();
    }
  }
  out->publish_context = attachment.attachment_metadata;
  out->attachment = attachment.name;
  co_.ObserveAttachment(attachment);

  grpc::Status st = co_.RunPod(ns + "-" + name, node_id_, volume, &out->pod);
  if (!st.ok()) {
    *error = "kubelet: " + e2e::CodeName(st.error_code()) + ": " + st.error_message() + "\n" + co_.EventLog();
    return false;
  }
  volumes_in_use_.push_back("kubernetes.io/csi/" + driver_ + "^" + out->volume_handle);
  if (!SetVolumesInUse()) {
    *error = "cannot set the node's volumesInUse";
    return false;
  }
  Json running{{"status", {{"phase", "Running"}}}};
  cluster_->Kubectl({"patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge", "-p", running.dump()});
  pods_.push_back(*out);
  return true;
}

std::vector<std::string> KubeletSimulator::ReleaseDeletedPods(std::string* error) {
  std::vector<std::string> released;
  for (auto it = pods_.begin(); it != pods_.end();) {
    auto got = cluster_->Get("pod", it->name, it->ns);
    if (got && Str(*got, "/metadata/uid"_json_pointer) == it->uid &&
        Str(*got, "/spec/nodeName"_json_pointer) == node_name_) {
      ++it;
      continue;
    }
    grpc::Status st = co_.DeletePod(it->pod);
    if (!st.ok()) {
      *error = "kubelet: releasing " + it->name + ": " + e2e::CodeName(st.error_code()) + ": " + st.error_message();
      return released;
    }
    auto in_use = std::find(volumes_in_use_.begin(), volumes_in_use_.end(),
                            "kubernetes.io/csi/" + driver_ + "^" + it->volume_handle);
    if (in_use != volumes_in_use_.end()) volumes_in_use_.erase(in_use);
    co_.ForgetAttachment(it->attachment);
    released.push_back(it->ns + "/" + it->name);
    it = pods_.erase(it);
  }
  if (!SetVolumesInUse()) *error = "cannot set the node's volumesInUse";
  return released;
}

bool KubeletSimulator::DeletePod(const RunningPod& pod, std::string* error) {
  // The API delete first (graceful: the object stays, terminating), then
  // what kubelet does for a terminating pod.
  cluster_->Kubectl({"delete", "pod", pod.name, "-n", pod.ns, "--wait=false"});
  grpc::Status st = co_.DeletePod(pod.pod);
  if (!st.ok()) {
    *error = "kubelet: " + e2e::CodeName(st.error_code()) + ": " + st.error_message() + "\n" + co_.EventLog();
    return false;
  }
  auto it = std::find(volumes_in_use_.begin(), volumes_in_use_.end(),
                      "kubernetes.io/csi/" + driver_ + "^" + pod.volume_handle);
  if (it != volumes_in_use_.end()) volumes_in_use_.erase(it);
  if (!SetVolumesInUse()) {
    *error = "cannot set the node's volumesInUse";
    return false;
  }
  co_.ForgetAttachment(pod.attachment);
  pods_.erase(std::remove_if(pods_.begin(), pods_.end(),
                             [&](const RunningPod& p) { return p.ns == pod.ns && p.name == pod.name; }),
              pods_.end());
  KubectlResult r = cluster_->Kubectl({"delete", "pod", pod.name, "-n", pod.ns, "--grace-period=0", "--force"});
  if (!r.ok() && r.err.find("NotFound") == std::string::npos) {
    *error = "kubectl delete pod: " + r.err;
    return false;
  }
  return true;
}

bool KubeletSimulator::ExpandVolume(const RunningPod& pod, std::string* error) {
  auto pv = cluster_->Get("pv", pod.pv);
  if (!pv) {
    *error = "PV " + pod.pv + " not found";
    return false;
  }
  std::string capacity = Str(*pv, "/spec/capacity/storage"_json_pointer);
  csi::v1::NodeExpandVolumeRequest req;
  req.set_volume_id(pod.volume_handle);
  req.set_volume_path(pod.pod.volume_path);
  req.set_staging_target_path(co_.StagingPath(node_id_, pod.volume_handle));
  req.mutable_capacity_range()->set_required_bytes(QuantityBytes(capacity));
  *req.mutable_volume_capability() = pod.volume.capability;
  csi::v1::NodeExpandVolumeResponse resp;
  auto ctx = Deadline(120s);
  grpc::Status st = node_->NodeExpandVolume(ctx.get(), req, &resp);
  if (!st.ok()) {
    *error = "NodeExpandVolume: " + e2e::CodeName(st.error_code()) + ": " + st.error_message();
    return false;
  }
  Json patch{{"status", {{"capacity", {{"storage", capacity}}}, {"conditions", nullptr}}}};
  KubectlResult r = cluster_->Kubectl(
      {"patch", "pvc", pod.pvc, "-n", pod.ns, "--subresource=status", "--type=merge", "-p", patch.dump()});
  if (!r.ok()) {
    *error = "kubectl patch pvc status: " + r.err;
    return false;
  }
  return true;
}

}  // namespace blockcsi::testing
