#include "node/trim_loop.h"

#include "common/logging.h"

namespace blockcsi {

NodeTrimLoop::NodeTrimLoop(std::shared_ptr<NodeService> node, std::chrono::milliseconds interval)
    : node_(std::move(node)), interval_(interval) {}

NodeTrimLoop::~NodeTrimLoop() { Stop(); }

void NodeTrimLoop::Start() {
  loop_ = std::thread([this] {
    MutexLock lock(mu_);
    while (true) {
      const auto deadline = std::chrono::steady_clock::now() + interval_;
      while (!stopping_ && cv_.WaitUntil(mu_, deadline)) {
      }
      if (stopping_) return;
      mu_.Unlock();
      NodeService::TrimRound round = node_->TrimStagedVolumes();
      LogInfo("periodic trim: round done", {{"trimmed", std::to_string(round.trimmed)},
                                            {"busy", std::to_string(round.busy)},
                                            {"skipped", std::to_string(round.skipped)},
                                            {"failed", std::to_string(round.failed)},
                                            {"bytes", std::to_string(round.bytes)}});
      mu_.Lock();
      ++rounds_;
      cv_.SignalAll();
    }
  });
}

void NodeTrimLoop::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  if (loop_.joinable()) loop_.join();
}

size_t NodeTrimLoop::Rounds() const {
  MutexLock lock(mu_);
  return rounds_;
}

}  // namespace blockcsi
