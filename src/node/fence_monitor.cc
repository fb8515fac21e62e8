#include "node/fence_monitor.h"

#include "common/logging.h"

namespace blockcsi {

NodeFenceMonitor::NodeFenceMonitor(std::shared_ptr<NodeService> node, NodeFenceMonitorOptions options)
    : node_(std::move(node)), options_(std::move(options)) {}

NodeFenceMonitor::~NodeFenceMonitor() { Stop(); }

Status NodeFenceMonitor::CheckNow() {
  BLOCKCSI_ASSIGN_OR_RETURN(FenceNotice notice, options_.check());
  node_->SetFenced(notice.fence_id);
  if (notice.fence_id.empty() || notice.cleaned_up == notice.fence_id) return OkStatus();
  std::vector<std::string> lazily;
  Status released = node_->ReleaseAll(&lazily);
  if (!released.ok()) return released.WithContext("fence " + notice.fence_id + ": cleanup not finished");
  BLOCKCSI_RETURN_IF_ERROR(options_.report(notice.fence_id, lazily));
  std::string paths;
  for (const auto& p : lazily) paths += (paths.empty() ? "" : ",") + p;
  LogWarn("fenced node cleaned up and reported it",
          {{"fence", notice.fence_id}, {"lazily_unmounted", paths.empty() ? "none" : paths}});
  return OkStatus();
}

void NodeFenceMonitor::Start() {
  loop_ = std::thread([this] {
    // The reading the last check answered for: a loss seen before or
    // during a check is covered by it.
    uint64_t losses_seen = options_.connection_losses ? options_.connection_losses() : 0;
    MutexLock lock(mu_);
    while (!stopping_) {
      poked_ = false;
      mu_.Unlock();
      Status checked = CheckNow();
      mu_.Lock();
      if (!checked.ok()) LogWarn("fence check failed; retrying", {{"error", checked.ToString()}});
      const auto deadline = std::chrono::steady_clock::now() + options_.interval;
      while (!stopping_ && !poked_) {
        auto until = deadline;
        if (options_.connection_losses) until = std::min(until, std::chrono::steady_clock::now() + options_.loss_poll);
        while (!stopping_ && !poked_ && cv_.WaitUntil(mu_, until)) {
        }
        if (stopping_ || poked_ || std::chrono::steady_clock::now() >= deadline) break;
        // Read outside the lock: it asks the node's bridges.
        mu_.Unlock();
        const uint64_t losses = options_.connection_losses();
        mu_.Lock();
        if (losses != losses_seen) {
          LogInfo("connections to storage lost; asking at once whether this node is fenced",
                  {{"losses", std::to_string(losses - losses_seen)}});
          losses_seen = losses;
          break;
        }
      }
    }
  });
}

void NodeFenceMonitor::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  if (loop_.joinable()) loop_.join();
}

void NodeFenceMonitor::Poke() {
  {
    MutexLock lock(mu_);
    poked_ = true;
  }
  cv_.SignalAll();
}

}  // namespace blockcsi
