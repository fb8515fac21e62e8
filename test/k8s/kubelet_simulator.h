// The kubelet of one Node in the `k8s` tests (no real kubelet runs here):
// it registers the Node and its CSINode from the node plugin's
// NodeGetInfo, and for a Pod the real scheduler placed on it, waits for the
// VolumeAttachment the real attach-detach controller made and the real
// external-attacher attached, then stages and publishes through the
// project's CO simulator with that object's attachmentMetadata, and reports
// the volume in the Node's status.volumesInUse as kubelet does (the
// attach-detach controller does not detach a volume still listed there).
// Deleting a pod unpublishes, unstages, drops the volume from volumesInUse
// and removes the Pod object (kubelet's final delete). With a heartbeat
// (StartHeartbeat) it renews the Node's Lease in kube-node-lease and its
// Ready condition on a thread of its own, as kubelet does, until the test
// stops it (a node that dies). Not thread-safe, but for that thread, which
// touches only the Lease and the Ready condition.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "e2e/co_simulator.h"
#include "k8s/kube_cluster.h"

namespace blockcsi::testing {

// A pod this kubelet runs, with what it found on the way.
struct RunningPod {
  std::string ns;
  std::string name;
  std::string uid;  // the Pod object's (a StatefulSet's pod made again has the same name)
  std::string pvc;
  std::string pv;
  std::string volume_handle;
  std::string attachment;  // the VolumeAttachment's name
  bool block = false;
  std::map<std::string, std::string> publish_context;  // the VolumeAttachment's attachmentMetadata
  e2e::PersistentVolume volume;
  e2e::Pod pod;  // pod.volume_path: the mount dir, or the device file of a raw block volume
};

class KubeletSimulator {
 public:
  // `node`: the node plugin's stub; `kubelet_dir`: where staging paths and
  // pod directories go.
  KubeletSimulator(KubeCluster* cluster, csi::v1::Node::Stub* node, std::string node_name, std::string kubelet_dir,
                   std::string driver = "blockcsi.io");
  ~KubeletSimulator();
  KubeletSimulator(const KubeletSimulator&) = delete;
  KubeletSimulator& operator=(const KubeletSimulator&) = delete;

  // Creates the Node (Ready, schedulable, attach/detach managed by the
  // controller) and the CSINode with the driver's node id and topology keys.
  bool Register(std::string* error);
  const std::string& node_name() const { return node_name_; }
  const std::string& node_id() const { return node_id_; }
  // The node plugin's stub again, after the plugin was restarted (its
  // PluginUnderTest makes new stubs).
  void SetNodeStub(csi::v1::Node::Stub* node);

  // Renews the Node's Lease and Ready condition every `every` (the first
  // renewal before it returns), until StopHeartbeat.
  bool StartHeartbeat(std::chrono::milliseconds every, std::string* error);
  // No more heartbeats (the node died); returns when the thread is gone.
  void StopHeartbeat();
  // When the last renewal succeeded.
  std::chrono::steady_clock::time_point last_heartbeat() const { return last_heartbeat_.load(); }

  // Waits (up to `timeout`) for pod ns/name to be scheduled here and its
  // one PVC volume attached, then stages and publishes it and marks the
  // pod Running.
  bool RunPod(const std::string& ns, const std::string& name, RunningPod* out, std::string* error,
              std::chrono::milliseconds timeout = std::chrono::seconds(90));
  // Unpublish, unstage, volumesInUse, then the Pod object goes.
  bool DeletePod(const RunningPod& pod, std::string* error);
  // What kubelet does for the pods it ran whose object is gone, or is now
  // another pod (same name, another uid) or on another node: unpublish,
  // unstage, drop the volume from volumesInUse. The names let go of.
  std::vector<std::string> ReleaseDeletedPods(std::string* error);
  // NodeExpandVolume to the PV's capacity, then the PVC's status capacity
  // (kubelet finishes an online expansion so).
  bool ExpandVolume(const RunningPod& pod, std::string* error);

  e2e::CoSimulator& co() { return co_; }
  // Called on every poll while waiting for the cluster: what kubelet does
  // meanwhile for the node's other containers (the environment restarts
  // sidecars that exited).
  void SetSupervisor(std::function<void()> supervise) { supervise_ = std::move(supervise); }
  // KubeCluster::WaitFor, calling the supervisor on each poll.
  bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout);

 private:
  bool SetVolumesInUse();
  // One renewal of the Lease and the Ready condition.
  bool Beat(bool transition, std::string* error);

  KubeCluster* cluster_;
  csi::v1::Node::Stub* node_;
  std::string node_name_;
  std::string node_id_;
  std::string kubelet_dir_;
  std::string driver_;
  e2e::CoSimulator co_;
  std::vector<std::string> volumes_in_use_;
  std::function<void()> supervise_;
  std::vector<RunningPod> pods_;  // the pods RunPod started and no one deleted yet

  std::mutex heartbeat_mu_;
  std::condition_variable heartbeat_cv_;
  bool heartbeat_stop_ = false;  // guarded by heartbeat_mu_
  std::thread heartbeat_;
  std::atomic<std::chrono::steady_clock::time_point> last_heartbeat_{};
};

}  // namespace blockcsi::testing
