// A small container orchestrator of our own for the end-to-end tests: it
// plays the three Kubernetes parts that talk to a CSI driver, in the order
// and with the data Kubernetes uses.
//  - provisioner: CreateVolume / DeleteVolume (a "PV" keeps the volume id
//    and volume_context);
//  - attacher: VolumeAttachment objects, one per volume × node. Attach is
//    ControllerPublish to that node, detach ControllerUnpublish; ABORTED,
//    UNAVAILABLE and DEADLINE_EXCEEDED are retried with exponential backoff
//    as external-attacher does, anything else ends the attempt and is kept
//    in the object's attach/detach error. The publish_context is kept in
//    the object (status.attachmentMetadata);
//  - kubelet, one per node: a pod's volume is staged once per node at a
//    global staging path, then published into the pod's directory; the
//    publish_context comes from that node's VolumeAttachment only. Removing
//    the pod unpublishes, and unstages once no pod on the node uses it.
// Each call blocks until its RPCs are done. Not thread-safe: one test
// thread drives it (the stubs it holds are).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "csi.grpc.pb.h"

namespace blockcsi::e2e {

struct CoSimulatorOptions {
  std::string driver_name = "blockcsi.io";
  // external-attacher's defaults are 1 s doubling to 5 min; a test wants
  // the same shape on a shorter scale.
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{5000};
  // How long one attach, detach or kubelet operation keeps retrying.
  std::chrono::milliseconds retry_budget{std::chrono::seconds(180)};
  // Deadline of each single RPC.
  std::chrono::milliseconds rpc_timeout{std::chrono::seconds(120)};
};

// A topology segment: key → value (NodeGetInfo, accessible_topology).
using Segments = std::map<std::string, std::string>;

// CreateVolume's accessibility_requirements as external-provisioner's
// Topology feature sends them: requisite, and preferred with the segment
// of the node the scheduler picked first (WaitForFirstConsumer).
struct TopologyRequirement {
  std::vector<Segments> requisite;
  std::vector<Segments> preferred;
};

// What external-provisioner keeps in the PersistentVolume.
struct PersistentVolume {
  std::string name;
  std::string volume_id;
  int64_t capacity_bytes = 0;
  std::map<std::string, std::string> volume_context;
  // CreateVolume's accessible_topology: what the PV's node affinity says.
  std::vector<Segments> accessible_topology;
  csi::v1::VolumeCapability capability;
  // The Secret spec.csi.nodeStageSecretRef names, as kubelet reads it for
  // NodeStageVolume (e.g. a static PV's CHAP credentials).
  std::map<std::string, std::string> node_stage_secrets;
};

// storage.k8s.io/v1 VolumeAttachment, as far as a driver sees it.
struct VolumeAttachment {
  std::string name;  // csi-<volume>-<node>, unique like Kubernetes' hash
  std::string volume_id;
  std::string node_id;
  bool attached = false;
  std::map<std::string, std::string> attachment_metadata;  // the publish_context
  std::string attach_error;
  std::string detach_error;
  int attach_attempts = 0;
  int detach_attempts = 0;
};

// A pod of one volume on one node.
struct Pod {
  std::string name;
  std::string node_id;
  std::string volume_id;
  std::string volume_path;  // where the pod's container sees the volume
};

class CoSimulator {
 public:
  CoSimulator(csi::v1::Controller::Stub* controller, CoSimulatorOptions options = {});
  CoSimulator(const CoSimulator&) = delete;
  CoSimulator& operator=(const CoSimulator&) = delete;

  // A node the kubelet part serves: its plugin's Node stub and the
  // kubelet root (staging paths and pod dirs live under it).
  void AddNode(const std::string& node_id, csi::v1::Node::Stub* node, const std::string& kubelet_dir);

  // ---- provisioner
  grpc::Status Provision(const std::string& pvc_name, int64_t bytes, const csi::v1::VolumeCapability& capability,
                         const std::map<std::string, std::string>& parameters, PersistentVolume* pv,
                         const TopologyRequirement& topology = {});
  grpc::Status Deprovision(const PersistentVolume& pv);
  // GetCapacity for one segment, with no capability (as newer provisioners
  // send it), as --enable-capacity asks for each segment its nodes report.
  grpc::Status Capacity(const Segments& segment, const std::map<std::string, std::string>& parameters,
                        int64_t* available_bytes);
  // NodeGetInfo's segment of a node: what node-driver-registrar puts on
  // the Node's labels and the CSINode's topology keys.
  grpc::Status NodeTopology(const std::string& node_id, Segments* segments);

  // ---- attacher
  // Creates (or finds) the VolumeAttachment of pv × node and reconciles it
  // to attached. The error after the retry budget, or OK.
  grpc::Status Attach(const PersistentVolume& pv, const std::string& node_id);
  // Reconciles the VolumeAttachment to detached and deletes it.
  grpc::Status Detach(const PersistentVolume& pv, const std::string& node_id);
  // Takes an attachment another attacher made (the real external-attacher,
  // read from the VolumeAttachment's status), as kubelet reads the object:
  // RunPod then uses its attachment_metadata.
  void ObserveAttachment(const VolumeAttachment& va) { attachments_[va.name] = va; }
  // Forgets it again (the object was deleted).
  void ForgetAttachment(const std::string& name) { attachments_.erase(name); }
  // nullptr when there is none.
  const VolumeAttachment* FindAttachment(const std::string& volume_id, const std::string& node_id) const;

  // ---- kubelet
  // Stages (when this node has not yet) and publishes pv into a new pod
  // directory. FAILED_PRECONDITION when no attached VolumeAttachment of pv
  // × node exists (the real kubelet waits for one). Transient codes are
  // retried like kubelet's volume manager does.
  grpc::Status RunPod(const std::string& pod_name, const std::string& node_id, const PersistentVolume& pv, Pod* pod);
  // Unpublishes and, when it was the node's last pod using the volume,
  // unstages.
  grpc::Status DeletePod(const Pod& pod);
  // One NodeStageVolume, no retry, with the publish_context the caller
  // gives: for tests of what a node does with the wrong one.
  grpc::Status StageOnce(const std::string& node_id, const PersistentVolume& pv,
                         const std::map<std::string, std::string>& publish_context, const std::string& staging_path);
  grpc::Status VolumeStats(const Pod& pod, csi::v1::NodeGetVolumeStatsResponse* response);

  // ---- resizer + kubelet: a PVC's request raised to `bytes`. As
  // external-resizer: ControllerExpandVolume, the PV's capacity taken from
  // its answer; then, when it says node_expansion_required, as kubelet:
  // NodeExpandVolume on the pod's node and path. No retry (both would retry
  // later; a test looks at the first answer). The first failure, or OK.
  grpc::Status ResizePvc(PersistentVolume* pv, int64_t bytes, const Pod& pod);

  std::string StagingPath(const std::string& node_id, const std::string& volume_id) const;
  std::string PodVolumePath(const std::string& node_id, const std::string& pod_name, const std::string& pv_name) const;

  // What the simulator did, one line per RPC ("ControllerPublishVolume vol n1 -> OK"), for failure messages.
  const std::vector<std::string>& events() const { return events_; }
  std::string EventLog() const;

 private:
  struct NodeEntry {
    csi::v1::Node::Stub* stub = nullptr;
    std::string kubelet_dir;
    std::map<std::string, int> pods_using;  // volume id → pods on this node
  };
  // Runs `call` until it is OK, fails with a non-retryable code, or the
  // retry budget is spent; counts attempts in *attempts when given.
  template <typename Call>
  grpc::Status Retry(const std::string& what, Call call, int* attempts = nullptr);
  std::unique_ptr<grpc::ClientContext> Context() const;
  void Note(const std::string& what, const grpc::Status& status);
  NodeEntry* Node(const std::string& node_id);

  csi::v1::Controller::Stub* controller_;
  CoSimulatorOptions options_;
  std::map<std::string, NodeEntry> nodes_;
  std::map<std::string, VolumeAttachment> attachments_;  // by name
  std::vector<std::string> events_;
};

// True for the codes external-attacher and kubelet treat as "try again".
bool IsRetryable(grpc::StatusCode code);
std::string CodeName(grpc::StatusCode code);

}  // namespace blockcsi::e2e
