#include "controller/node_fence_watcher.h"

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>

#include "common/logging.h"

namespace blockcsi {
namespace {

using nlohmann::json;

std::string Quoted(const std::string& s) { return "\"" + s + "\""; }

int64_t WallNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

StatusOr<int64_t> ParseRfc3339(const std::string& text) {
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return InvalidArgument("not an RFC 3339 time: " + Quoted(text));
  // Fractional seconds and a "Z" (the API server writes UTC) may follow.
  if (*end == '.') {
    ++end;
    while (*end >= '0' && *end <= '9') ++end;
  }
  if (*end != 'Z' && *end != '\0') return InvalidArgument("not a UTC RFC 3339 time: " + Quoted(text));
  return static_cast<int64_t>(timegm(&tm));
}

struct NodeFenceWatcher::NodeView {
  std::string name;
  std::string uid;
  std::string resource_version;
  bool ready = false;
  int64_t not_ready_since = 0;  // the Ready condition's last transition, when not Ready
  std::map<std::string, std::string> annotations;
  json taints = json::array();
  bool has_out_of_service_taint = false;
};

NodeFenceWatcher::NodeFenceWatcher(std::shared_ptr<KubeApiClient> api, std::shared_ptr<NodeFencer> fencer,
                                   NodeFenceWatcherOptions options)
    : api_(std::move(api)), fencer_(std::move(fencer)), options_(std::move(options)) {}

NodeFenceWatcher::~NodeFenceWatcher() { Stop(); }

void NodeFenceWatcher::Start() {
  loop_ = std::thread([this] {
    LogInfo("fence watcher started", {{"dead_after", std::to_string(options_.dead_after.count()) + "s"},
                                      {"taint", options_.taint ? "true" : "false"}});
    MutexLock lock(mu_);
    while (!stopping_) {
      mu_.Unlock();
      Status pass = RunOnce();
      mu_.Lock();
      if (!pass.ok()) LogWarn("fence watcher: pass failed; retrying", {{"error", pass.ToString()}});
      const auto deadline = std::chrono::steady_clock::now() + options_.period;
      while (!stopping_ && cv_.WaitUntil(mu_, deadline)) {
      }
    }
  });
}

void NodeFenceWatcher::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  if (loop_.joinable()) loop_.join();
}

Status NodeFenceWatcher::RunOnce() {
  BLOCKCSI_ASSIGN_OR_RETURN(KubeApiResponse response, api_->Get("/api/v1/nodes"));
  if (response.http_status != 200) return KubeApiFailure("list nodes", response);
  json list = json::parse(response.body, nullptr, false);
  if (list.is_discarded() || !list.contains("items")) return Unavailable("API server: list nodes: not a NodeList");
  Status first_error;
  for (const auto& item : list["items"]) {
    NodeView node;
    node.name = item.value("/metadata/name"_json_pointer, "");
    node.uid = item.value("/metadata/uid"_json_pointer, "");
    node.resource_version = item.value("/metadata/resourceVersion"_json_pointer, "");
    if (node.name.empty()) continue;
    const json annotations = item.value("/metadata/annotations"_json_pointer, json::object());
    for (const auto& [k, v] : annotations.items()) {
      if (v.is_string()) node.annotations[k] = v.get<std::string>();
    }
    node.taints = item.value("/spec/taints"_json_pointer, json::array());
    for (const auto& t : node.taints) {
      if (t.value("key", "") == kOutOfServiceTaint) node.has_out_of_service_taint = true;
    }
    // No Ready condition at all (a Node just registered) is not "dead".
    node.ready = true;
    const json conditions = item.value("/status/conditions"_json_pointer, json::array());
    for (const auto& c : conditions) {
      if (c.value("type", "") != "Ready") continue;
      node.ready = c.value("status", "") == "True";
      if (!node.ready) {
        auto since = ParseRfc3339(c.value("lastTransitionTime", ""));
        node.not_ready_since = since.ok() ? *since : 0;
      }
    }
    Status visited = Visit(node);
    if (!visited.ok()) {
      LogWarn("fence watcher: node not handled this pass", {{"node", node.name}, {"error", visited.ToString()}});
      if (first_error.ok()) first_error = visited;
    }
  }
  return first_error;
}

Status NodeFenceWatcher::Visit(const NodeView& node) {
  const int64_t now = options_.now ? options_.now() : WallNow();
  std::optional<NodeFence> fence = fencer_->Get(node.name);
  if (!fence) {
    // A taint of ours whose removal failed after the unfence: removed now.
    if (node.ready && node.annotations.contains(fence_annotations::kTainted)) return Untaint(node);
    if (node.ready || node.not_ready_since == 0) return OkStatus();
    if (now - node.not_ready_since < options_.dead_after.count()) return OkStatus();
    if (options_.runs_driver) {
      BLOCKCSI_ASSIGN_OR_RETURN(bool ours, options_.runs_driver(node.name));
      if (!ours) return OkStatus();
    }
    LogWarn("fence watcher: node not ready for too long; fencing it",
            {{"node", node.name}, {"not_ready_for", std::to_string(now - node.not_ready_since) + "s"}});
    BLOCKCSI_ASSIGN_OR_RETURN(NodeFence fenced, fencer_->Fence(node.name));
    fence = fenced;
    if (fence->complete()) {
      Event(node, "Warning", "NodeFenced",
            "blockcsi fenced the node after " + std::to_string(now - node.not_ready_since) +
                "s not ready: its access to " + std::to_string(fence->held.size()) +
                " volume(s) is revoked on every storage host, it cannot write to them until its plugin has cleaned "
                "up and it is Ready again (fence " +
                fence->id() + ")");
    }
  } else if (!fence->complete()) {
    BLOCKCSI_ASSIGN_OR_RETURN(NodeFence retried, fencer_->Fence(node.name));
    fence = retried;
    if (fence->complete()) {
      last_pending_event_.erase(node.name);
      Event(node, "Warning", "NodeFenced",
            "blockcsi completed the node's fence on every storage host (fence " + fence->id() + ")");
    }
  }
  // Each pass: a Lease deleted by hand, or one a failed call did not make.
  BLOCKCSI_RETURN_IF_ERROR(fencer_->Tell(node.name));

  if (!fence->complete()) {
    std::string why;
    for (const auto& [host, reason] : fence->pending) why += (why.empty() ? "" : "; ") + host + ": " + reason;
    const std::string message = "blockcsi cannot fence the node on every storage host yet" +
                                std::string(options_.taint ? " and does not taint it" : "") + "; retrying (" + why +
                                ")";
    if (last_pending_event_[node.name] != message) {
      Event(node, "Warning", "NodeFenceIncomplete", message);
      last_pending_event_[node.name] = message;
    }
    return OkStatus();
  }

  if (!node.ready) {
    if (options_.taint && !node.has_out_of_service_taint) BLOCKCSI_RETURN_IF_ERROR(Taint(node, fence->id()));
    return OkStatus();
  }

  // Ready again: unfenced once its plugin reported it cleaned up after this
  // fence (the fencer reads the report; FAILED_PRECONDITION until then).
  Status unfenced = fencer_->Unfence(node.name, false);
  if (unfenced.code() == StatusCode::kFailedPrecondition) {
    LogInfo("fence watcher: node is Ready but its plugin has not reported its cleanup yet",
            {{"node", node.name}, {"fence", fence->id()}});
    return OkStatus();
  }
  BLOCKCSI_RETURN_IF_ERROR(unfenced);
  BLOCKCSI_RETURN_IF_ERROR(Untaint(node));
  last_pending_event_.erase(node.name);
  Event(node, "Normal", "NodeUnfenced",
        "blockcsi unfenced the node: it is Ready and its plugin cleaned up after fence " + fence->id());
  return OkStatus();
}

// A merge patch that carries the resourceVersion the taints were read at:
// the API server refuses it (409) if the Node changed meanwhile, so the
// taints another controller set in between are never overwritten; the next
// pass reads them again.
Status NodeFenceWatcher::Taint(const NodeView& node, const std::string& fence_id) {
  json taints = node.taints;
  taints.push_back({{"key", kOutOfServiceTaint}, {"value", "nodeshutdown"}, {"effect", "NoExecute"}});
  json patch = {
      {"metadata",
       {{"resourceVersion", node.resource_version}, {"annotations", {{fence_annotations::kTainted, fence_id}}}}},
      {"spec", {{"taints", taints}}}};
  BLOCKCSI_ASSIGN_OR_RETURN(KubeApiResponse patched, api_->Send("PATCH", "/api/v1/nodes/" + node.name,
                                                                "application/merge-patch+json", patch.dump()));
  if (patched.http_status != 200) return KubeApiFailure("taint node " + node.name, patched);
  LogWarn("fence watcher: node tainted out-of-service", {{"node", node.name}, {"fence", fence_id}});
  Event(node, "Warning", "NodeOutOfService",
        "blockcsi gave the fenced node the node.kubernetes.io/out-of-service taint: its pods are deleted and its "
        "volumes force-detached");
  return OkStatus();
}

Status NodeFenceWatcher::Untaint(const NodeView& node) {
  // Only a taint this watcher added (the annotation says so) is removed: an
  // admin's own out-of-service taint stays.
  if (!node.annotations.contains(fence_annotations::kTainted)) return OkStatus();
  json taints = json::array();
  for (const auto& t : node.taints) {
    if (t.value("key", "") != kOutOfServiceTaint) taints.push_back(t);
  }
  json patch = {
      {"metadata",
       {{"resourceVersion", node.resource_version}, {"annotations", {{fence_annotations::kTainted, nullptr}}}}},
      {"spec", {{"taints", taints}}}};
  BLOCKCSI_ASSIGN_OR_RETURN(KubeApiResponse patched, api_->Send("PATCH", "/api/v1/nodes/" + node.name,
                                                                "application/merge-patch+json", patch.dump()));
  if (patched.http_status != 200) return KubeApiFailure("remove the taint of node " + node.name, patched);
  LogInfo("fence watcher: out-of-service taint removed", {{"node", node.name}});
  return OkStatus();
}

void NodeFenceWatcher::Event(const NodeView& node, const std::string& type, const std::string& reason,
                             const std::string& message) {
  const std::string now = FenceTime(options_.now ? options_.now() : WallNow());
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"generateName", node.name + ".blockcsi-"}, {"namespace", "default"}}},
                {"involvedObject", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node.name}, {"uid", node.uid}}},
                {"reason", reason},
                {"message", message},
                {"type", type},
                {"source", {{"component", "blockcsi-fence-watcher"}}},
                {"firstTimestamp", now},
                {"lastTimestamp", now},
                {"count", 1}};
  auto sent = api_->Send("POST", "/api/v1/namespaces/default/events", "application/json", event.dump());
  if (!sent.ok() || (sent->http_status != 201 && sent->http_status != 200)) {
    LogWarn("fence watcher: event not recorded",
            {{"node", node.name},
             {"reason", reason},
             {"error", sent.ok() ? "HTTP " + std::to_string(sent->http_status) : sent.status().ToString()}});
  }
}

}  // namespace blockcsi
