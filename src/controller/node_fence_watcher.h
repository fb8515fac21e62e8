// NodeFenceWatcher: the controller's opt-in loop (--fence-dead-nodes-after)
// that fences a Node which has been NotReady or Unknown that long, and —
// with --taint-fenced-nodes — then gives it the
// node.kubernetes.io/out-of-service taint, so that kube-controller-manager
// deletes its pods and force-detaches its volumes (NodeOutOfServiceVolume-
// Detach). It taints only once the fence is complete on every storage host;
// an incomplete fence is retried each pass and its reason is put on the Node
// as an event. When the Node is Ready again and its plugin has reported that
// it cleaned up (the fence's Lease, controller/fence_leases.h, which the
// fencer makes, reads and deletes), it unfences and removes the taint it
// added.
//
// Only one instance may run the watcher (run the controller with one
// replica, or enable it on one); two would fence and taint alike, but their
// events would double. Not thread-safe: one thread runs RunOnce (Start).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "controller/fence_leases.h"
#include "controller/fencing.h"
#include "controller/k8s_node_directory.h"

namespace blockcsi {

inline constexpr char kOutOfServiceTaint[] = "node.kubernetes.io/out-of-service";

struct NodeFenceWatcherOptions {
  std::chrono::seconds dead_after{0};  // 0: the watcher is off
  bool taint = false;
  std::chrono::milliseconds period{std::chrono::seconds(5)};
  std::string driver_name = "blockcsi.io";
  // "Is this node one of ours" (CSINode lists the driver): only such nodes
  // are fenced. Empty: every node.
  std::function<StatusOr<bool>(const std::string& node_id)> runs_driver;
  // Wall clock, unix seconds (tests move it).
  std::function<int64_t()> now;
};

// "2026-12-06T03:37:06Z" (also with fractional seconds) → unix seconds.
StatusOr<int64_t> ParseRfc3339(const std::string& text);

class NodeFenceWatcher {
 public:
  NodeFenceWatcher(std::shared_ptr<KubeApiClient> api, std::shared_ptr<NodeFencer> fencer,
                   NodeFenceWatcherOptions options);
  ~NodeFenceWatcher();
  NodeFenceWatcher(const NodeFenceWatcher&) = delete;
  NodeFenceWatcher& operator=(const NodeFenceWatcher&) = delete;

  // One pass over the Nodes. An error is the API's (the pass is retried).
  Status RunOnce();
  // RunOnce every period on a thread of its own, until Stop or destruction.
  void Start();
  void Stop();

 private:
  struct NodeView;
  Status Visit(const NodeView& node);
  Status Taint(const NodeView& node, const std::string& fence_id);
  Status Untaint(const NodeView& node);
  // A Node event; failures are logged, never fatal.
  void Event(const NodeView& node, const std::string& type, const std::string& reason, const std::string& message);

  const std::shared_ptr<KubeApiClient> api_;
  const std::shared_ptr<NodeFencer> fencer_;
  const NodeFenceWatcherOptions options_;
  // The last incomplete-fence message evented per node, so that a retry
  // that fails the same way does not repeat the event.
  std::map<std::string, std::string> last_pending_event_;

  Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread loop_;
};

}  // namespace blockcsi
