// NodeFenceMonitor: the node plugin's side of fencing. It asks whether this
// node is fenced (at start, then every interval, and at once when Poke()d
// or when the node's connections to its storage were lost: a fence ends
// them, so the node hears of it in about a second instead of an interval),
// and when it is: refuses NodeStage (NodeService::SetFenced), lets go of
// every volume without waiting for kubelet (NodeService::ReleaseAll) and,
// once nothing is left, reports that it cleaned up after that fence. Where
// the question is asked and the report goes is the caller's (cmd wires the
// fence's Lease in the Kubernetes API, controller/node_fence_watcher.h);
// this class knows no API. Thread-safe; one loop thread (Start).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "node/node_service.h"

namespace blockcsi {

struct FenceNotice {
  std::string fence_id;    // "": this node is not fenced
  std::string cleaned_up;  // the fence id the node last reported cleaning up after
};

struct NodeFenceMonitorOptions {
  std::function<StatusOr<FenceNotice>()> check;
  // The node cleaned up after `fence_id`; `lazily_unmounted`: the paths it
  // could only detach lazily.
  std::function<Status(const std::string& fence_id, const std::vector<std::string>& lazily_unmounted)> report;
  std::chrono::milliseconds interval{std::chrono::seconds(30)};
  // How many times this node's connections to its storage were lost so far
  // (sessions dropped, I/O that failed, a client fenced): a local reading,
  // taken every loss_poll; when it changed, the monitor asks at once.
  // Empty: only the interval and Poke.
  std::function<uint64_t()> connection_losses;
  std::chrono::milliseconds loss_poll{std::chrono::seconds(1)};
};

class NodeFenceMonitor {
 public:
  NodeFenceMonitor(std::shared_ptr<NodeService> node, NodeFenceMonitorOptions options);
  ~NodeFenceMonitor();
  NodeFenceMonitor(const NodeFenceMonitor&) = delete;
  NodeFenceMonitor& operator=(const NodeFenceMonitor&) = delete;

  // One round: ask, and when fenced and not reported yet, clean up and report.
  Status CheckNow();
  void Start();
  void Stop();
  // Checks at once (e.g. a session found closed by the target).
  void Poke();

 private:
  const std::shared_ptr<NodeService> node_;
  const NodeFenceMonitorOptions options_;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool poked_ GUARDED_BY(mu_) = false;
  std::thread loop_;
};

}  // namespace blockcsi
