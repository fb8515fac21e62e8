// NodeTrimLoop: the node plugin's periodic trim (--fstrim-interval). Every
// interval it runs one NodeService::TrimStagedVolumes round: the staged
// filesystem volumes one at a time, so that the storage sees one volume's
// discards at a time, and a volume busy being staged or unstaged is skipped
// until the next round, never waited for. The first round is one interval
// after Start: a plugin that restarts does not trim everything at once.
// Thread-safe; one loop thread (Start), stopped by Stop or the destructor.
#pragma once

#include <chrono>
#include <memory>
#include <thread>

#include "common/mutex.h"
#include "node/node_service.h"

namespace blockcsi {

class NodeTrimLoop {
 public:
  NodeTrimLoop(std::shared_ptr<NodeService> node, std::chrono::milliseconds interval);
  ~NodeTrimLoop();
  NodeTrimLoop(const NodeTrimLoop&) = delete;
  NodeTrimLoop& operator=(const NodeTrimLoop&) = delete;

  void Start();
  // Waits for a round in progress to finish its current volume's trim.
  void Stop();
  // Rounds finished so far (tests wait on it).
  size_t Rounds() const;

 private:
  const std::shared_ptr<NodeService> node_;
  const std::chrono::milliseconds interval_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  size_t rounds_ GUARDED_BY(mu_) = 0;
  std::thread loop_;
};

}  // namespace blockcsi
