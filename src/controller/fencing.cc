#include "controller/fencing.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "common/logging.h"
#include "common/metrics.h"
#include "contract/initiator.h"

namespace blockcsi {
namespace {

std::string Quoted(const std::string& s) { return "\"" + s + "\""; }

// Fences and unfences by outcome: "complete", "pending" (some host not
// fenced yet), "error" (bad request), "refused" (unfence before cleanup).
void CountFence(std::string_view operation, std::string_view result) {
  static MetricFamily& family = Metrics().Counter(
      "blockcsi_fence_operations_total",
      "Node fencing rounds (fence, unfence) by result: complete, pending (a storage host not fenced yet), refused, "
      "error",
      {"operation", "result"});
  family.Add({std::string(operation), std::string(result)});
}

// How long one round of fencing took across every host.
void ObserveFenceRound(double seconds) {
  static MetricFamily& family =
      Metrics().Histogram("blockcsi_fence_round_seconds", "Time one fencing round took across every storage host", {},
                          {0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300});
  family.Observe({}, seconds);
}

// How long a node stayed fenced, observed when it is unfenced.
void ObserveFencedFor(double seconds) {
  static MetricFamily& family =
      Metrics().Histogram("blockcsi_fenced_duration_seconds", "How long a node stayed fenced, at its unfence", {},
                          {60, 300, 900, 1800, 3600, 7200, 21600, 86400, 604800});
  family.Observe({}, seconds);
}

void SetFencedGauge(size_t fenced, size_t incomplete) {
  static MetricFamily& family = Metrics().Gauge(
      "blockcsi_fenced_nodes", "Nodes fenced now; state=incomplete: some storage host not fenced yet", {"state"});
  family.Set({"all"}, static_cast<double>(fenced));
  family.Set({"incomplete"}, static_cast<double>(incomplete));
}

int64_t NowUnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

NodeFencer::NodeFencer(std::shared_ptr<VolumeBackend> backend, std::shared_ptr<FenceChannel> channel)
    : backend_(std::move(backend)), channel_(std::move(channel)) {}

NodeFence NodeFencer::Merge(const std::string& node_id, const std::vector<HostFences>& answers) {
  NodeFence fence;
  fence.node_id = node_id;
  for (const auto& answer : answers) {
    if (!answer.status.ok()) {
      fence.pending[answer.host] = answer.status.ToString();
      continue;
    }
    for (const auto& record : answer.fences) {
      if (record.node_id != node_id) continue;
      if (fence.since_unix_seconds == 0 ||
          (record.since_unix_seconds != 0 && record.since_unix_seconds < fence.since_unix_seconds)) {
        fence.since_unix_seconds = record.since_unix_seconds;
      }
      for (const auto& held : record.held) fence.held.push_back({answer.host, held});
    }
  }
  MutexLock lock(mu_);
  auto it = fences_.find(node_id);
  if (it != fences_.end()) {
    // The hosts' earliest record is the fence's id (the same after a
    // controller restart); before any host answered, the time this
    // controller started it. A cleanup report stands while the id does.
    if (fence.since_unix_seconds == 0) fence.since_unix_seconds = it->second.since_unix_seconds;
    fence.cleaned_up = it->second.cleaned_up && it->second.since_unix_seconds == fence.since_unix_seconds;
  }
  if (fence.since_unix_seconds == 0) fence.since_unix_seconds = NowUnixSeconds();
  fences_[node_id] = fence;
  size_t incomplete = 0;
  for (const auto& [node, f] : fences_) incomplete += f.complete() ? 0 : 1;
  SetFencedGauge(fences_.size(), incomplete);
  return fence;
}

std::map<std::string, std::string> NodeFencer::Load() {
  std::map<std::string, std::string> unreachable;
  std::set<std::string> nodes;
  for (const auto& answer : backend_->ListFences()) {
    if (!answer.status.ok()) {
      unreachable[answer.host] = answer.status.ToString();
      continue;
    }
    for (const auto& record : answer.fences) nodes.insert(record.node_id);
  }
  for (const auto& [host, why] : unreachable) {
    LogWarn("fencing: cannot read the fences of a storage host", {{"host", host}, {"error", why}});
  }
  // A fence found on any host is one on all: one a controller crash cut
  // short, or one a host missed while it was down, is completed now.
  for (const auto& node : nodes) {
    auto fence = Fence(node);
    if (!fence.ok())
      LogWarn("fencing: cannot complete a recorded fence", {{"node", node}, {"error", fence.status().ToString()}});
  }
  return unreachable;
}

StatusOr<NodeFence> NodeFencer::Fence(const std::string& node_id) {
  if (Status st = ValidateNodeId(node_id); !st.ok()) {
    CountFence("fence", "error");
    return st;
  }
  auto held = node_locks_.Lock(node_id);
  {
    // Mirrored before any host is asked: from here on ControllerPublish to
    // the node is refused and ControllerUnpublish answers at once.
    MutexLock lock(mu_);
    if (!fences_.contains(node_id)) {
      NodeFence starting;
      starting.node_id = node_id;
      starting.since_unix_seconds = NowUnixSeconds();
      starting.pending["*"] = "fencing in progress";
      fences_[node_id] = starting;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  auto answers = backend_->FenceNode(node_id, InitiatorIqnForNode(node_id));
  ObserveFenceRound(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  NodeFence fence = Merge(node_id, answers);
  CountFence("fence", fence.complete() ? "complete" : "pending");
  if (fence.complete()) {
    LogInfo("node fenced on every storage host",
            {{"node", node_id}, {"fence", fence.id()}, {"held", std::to_string(fence.held.size())}});
  } else {
    for (const auto& [host, why] : fence.pending) {
      LogWarn("node not fenced yet on a storage host; retrying", {{"node", node_id}, {"host", host}, {"error", why}});
    }
  }
  // Told even while incomplete: the node lets go of what it holds at once.
  if (channel_) {
    if (Status told = channel_->Publish(node_id, fence.id()); !told.ok()) {
      LogWarn("fencing: the node cannot be told of its fence yet; its volumes fail meanwhile",
              {{"node", node_id}, {"fence", fence.id()}, {"error", told.ToString()}});
    }
  }
  return fence;
}

Status NodeFencer::Tell(const std::string& node_id) {
  std::optional<NodeFence> fence = Get(node_id);
  if (!channel_ || !fence) return OkStatus();
  return channel_->Publish(node_id, fence->id());
}

void NodeFencer::RefreshReports() {
  if (!channel_) return;
  for (const auto& fence : List()) {
    if (fence.cleaned_up) continue;
    auto report = channel_->CleanupReport(fence.node_id);
    if (report.ok() && *report == fence.id()) ReportCleanedUp(fence.node_id, *report);
  }
}

std::vector<NodeFence> NodeFencer::RetryPending() {
  std::vector<std::string> nodes;
  {
    MutexLock lock(mu_);
    for (const auto& [node, fence] : fences_) {
      if (!fence.complete()) nodes.push_back(node);
    }
  }
  std::vector<NodeFence> out;
  for (const auto& node : nodes) {
    auto fence = Fence(node);
    if (fence.ok()) out.push_back(*fence);
  }
  return out;
}

bool NodeFencer::ReportCleanedUp(const std::string& node_id, const std::string& fence_id) {
  MutexLock lock(mu_);
  auto it = fences_.find(node_id);
  if (it == fences_.end() || it->second.id() != fence_id) return false;
  if (!it->second.cleaned_up) LogInfo("fenced node reported its cleanup", {{"node", node_id}, {"fence", fence_id}});
  it->second.cleaned_up = true;
  return true;
}

Status NodeFencer::Unfence(const std::string& node_id, bool force) {
  if (!ValidateNodeId(node_id).ok()) return OkStatus();  // never fenced
  auto held = node_locks_.Lock(node_id);
  std::optional<NodeFence> fence = Get(node_id);
  if (fence && !fence->cleaned_up && !force && channel_) {
    BLOCKCSI_ASSIGN_OR_RETURN(std::string report, channel_->CleanupReport(node_id));
    if (report == fence->id() && ReportCleanedUp(node_id, report)) fence->cleaned_up = true;
  }
  if (fence && !fence->cleaned_up && !force) {
    CountFence("unfence", "refused");
    return FailedPrecondition("node " + Quoted(node_id) + " is fenced since " + fence->id() +
                              " and its plugin has not reported that it cleaned up (mounts, sessions, bridges); "
                              "unfencing it now could let it write with stale state (use --force only when the "
                              "node is gone for good or known clean)");
  }
  // Even a node this mirror does not know may have records on a host.
  std::string failed;
  StatusCode code = StatusCode::kOk;
  for (const auto& answer : backend_->UnfenceNode(node_id)) {
    if (answer.status.ok()) continue;
    if (code == StatusCode::kOk) code = answer.status.code();
    failed += (failed.empty() ? "" : "; ") + answer.host + ": " + answer.status.message();
  }
  if (code != StatusCode::kOk) {
    CountFence("unfence", "pending");
    return Status(code, "node " + Quoted(node_id) + " is still fenced on some storage hosts: " + failed);
  }
  // The notice goes last: a node that still saw it would refuse NodeStage
  // forever, so its failure keeps the fence here for the retry.
  if (channel_) {
    if (Status withdrawn = channel_->Withdraw(node_id); !withdrawn.ok()) {
      CountFence("unfence", "pending");
      return withdrawn.WithContext("node " + Quoted(node_id) +
                                   " is unfenced on every storage host but still told it is fenced");
    }
  }
  MutexLock lock(mu_);
  if (auto it = fences_.find(node_id); it != fences_.end()) {
    const int64_t now = NowUnixSeconds();
    ObserveFencedFor(static_cast<double>(std::max<int64_t>(0, now - it->second.since_unix_seconds)));
    fences_.erase(it);
  }
  size_t incomplete = 0;
  for (const auto& [node, f] : fences_) incomplete += f.complete() ? 0 : 1;
  SetFencedGauge(fences_.size(), incomplete);
  CountFence("unfence", "complete");
  LogInfo(force ? "node unfenced by force" : "node unfenced", {{"node", node_id}});
  return OkStatus();
}

std::optional<NodeFence> NodeFencer::Get(const std::string& node_id) const {
  MutexLock lock(mu_);
  auto it = fences_.find(node_id);
  if (it == fences_.end()) return std::nullopt;
  return it->second;
}

std::vector<NodeFence> NodeFencer::List() const {
  MutexLock lock(mu_);
  std::vector<NodeFence> out;
  for (const auto& [node, fence] : fences_) out.push_back(fence);
  return out;
}

std::optional<std::string> NodeFencer::PublishRefusal(const std::string& node_id, const std::string& volume_id) const {
  auto fence = Get(node_id);
  if (!fence) return std::nullopt;
  FenceRecord record{node_id, "", fence->since_unix_seconds, {}};
  return FencedMessage(record, volume_id);
}

}  // namespace blockcsi
