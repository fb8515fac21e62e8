// NodeFenceWatcher against an in-memory API server (Nodes, Leases, Events)
// and a fake storage host: when it fences, when it taints (only after a
// complete fence), what it says on the Node, and when it unfences. The real
// API server is the k8s label's.
#include "controller/node_fence_watcher.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/fake_backend.h"

namespace blockcsi {
namespace {

using nlohmann::json;
using testing::FakeBackend;

constexpr char kLeases[] = "/apis/coordination.k8s.io/v1/namespaces/blockcsi/leases";

// Just enough of an API server: one NodeList, Leases by name with merge
// patches, Node merge patches (checking resourceVersion), Events kept.
class FakeApiServer final : public KubeApiClient {
 public:
  StatusOr<KubeApiResponse> Get(const std::string& path) override {
    if (path == "/api/v1/nodes") {
      json list = {{"kind", "NodeList"}, {"items", json::array()}};
      for (const auto& [name, node] : nodes) list["items"].push_back(node);
      return KubeApiResponse{200, list.dump()};
    }
    if (path.starts_with(std::string(kLeases) + "/")) {
      auto it = leases.find(path.substr(std::string(kLeases).size() + 1));
      if (it == leases.end()) return KubeApiResponse{404, R"({"kind":"Status","reason":"NotFound"})"};
      return KubeApiResponse{200, it->second.dump()};
    }
    return KubeApiResponse{404, "{}"};
  }
  StatusOr<KubeApiResponse> Send(const std::string& method, const std::string& path, const std::string&,
                                 const std::string& body) override {
    json j = body.empty() ? json() : json::parse(body);
    if (method == "POST" && path == kLeases) {
      leases[j["metadata"]["name"].get<std::string>()] = j;
      return KubeApiResponse{201, body};
    }
    if (path.starts_with(std::string(kLeases) + "/")) {
      const std::string name = path.substr(std::string(kLeases).size() + 1);
      if (!leases.contains(name)) return KubeApiResponse{404, "{}"};
      if (method == "DELETE") {
        leases.erase(name);
        return KubeApiResponse{200, "{}"};
      }
      leases[name].merge_patch(j);
      return KubeApiResponse{200, leases[name].dump()};
    }
    if (method == "PATCH" && path.starts_with("/api/v1/nodes/")) {
      if (fail_node_patches > 0) {
        --fail_node_patches;
        return KubeApiResponse{500, R"({"kind":"Status","reason":"InternalError"})"};
      }
      json& node = nodes.at(path.substr(std::string("/api/v1/nodes/").size()));
      if (j["metadata"]["resourceVersion"] != node["metadata"]["resourceVersion"]) return KubeApiResponse{409, "{}"};
      j["metadata"].erase("resourceVersion");
      node.merge_patch(j);
      node["metadata"]["resourceVersion"] =
          std::to_string(std::stoi(node["metadata"]["resourceVersion"].get<std::string>()) + 1);
      return KubeApiResponse{200, node.dump()};
    }
    if (method == "POST" && path == "/api/v1/namespaces/default/events") {
      events.push_back(j);
      return KubeApiResponse{201, body};
    }
    return KubeApiResponse{404, "{}"};
  }

  void SetNode(const std::string& name, const std::string& ready, const std::string& since) {
    json node = nodes.contains(name)
                    ? nodes[name]
                    : json{{"metadata", {{"name", name}, {"uid", "uid-" + name}, {"resourceVersion", "1"}}},
                           {"spec", json::object()}};
    node["status"] = {{"conditions", {{{"type", "Ready"}, {"status", ready}, {"lastTransitionTime", since}}}}};
    nodes[name] = node;
  }
  bool Tainted(const std::string& name) {
    for (const auto& t : nodes[name]["spec"].value("taints", json::array())) {
      if (t["key"] == kOutOfServiceTaint) return true;
    }
    return false;
  }
  std::vector<std::string> Reasons() const {
    std::vector<std::string> out;
    for (const auto& e : events) out.push_back(e["reason"].get<std::string>());
    return out;
  }

  std::map<std::string, json> nodes;
  std::map<std::string, json> leases;
  std::vector<json> events;
  int fail_node_patches = 0;
};

constexpr int64_t kNow = 1'800'000'000;  // 2027-01-15T08:00:00Z

class NodeFenceWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    id_ = MakeVolume("pvc-1");
    ASSERT_TRUE(backend_->GrantAccess(id_, {"iqn.2026-11.io.blockcsi:node:node-a", "node-a", false, "x", {}}).ok());
  }
  std::string MakeVolume(const std::string& name) {
    CreateVolumeSpec spec;
    spec.name = name;
    spec.size_bytes = FakeBackend::kGranularity;
    auto v = backend_->CreateVolume(spec);
    return v.ok() ? v->id : "";
  }
  std::unique_ptr<NodeFenceWatcher> Watcher(bool taint) {
    NodeFenceWatcherOptions options;
    options.dead_after = std::chrono::seconds(60);
    options.taint = taint;
    options.now = [this] { return now_; };
    return std::make_unique<NodeFenceWatcher>(api_, fencer_, options);
  }
  static std::string Time(int64_t t) { return FenceTime(t); }

  std::shared_ptr<FakeApiServer> api_ = std::make_shared<FakeApiServer>();
  std::shared_ptr<FakeBackend> backend_ = std::make_shared<FakeBackend>();
  std::shared_ptr<NodeFencer> fencer_ =
      std::make_shared<NodeFencer>(backend_, std::make_shared<FenceLeases>(api_, "blockcsi"));
  int64_t now_ = kNow;
  std::string id_;
};

TEST_F(NodeFenceWatcherTest, FencesOnlyAfterTheGracePeriodThenTaintsAndUnfencesAfterTheReport) {
  auto watcher = Watcher(true);
  api_->SetNode("node-a", "Unknown", Time(kNow - 59));
  api_->SetNode("node-b", "True", Time(kNow - 3600));
  ASSERT_TRUE(watcher->RunOnce().ok());
  EXPECT_FALSE(fencer_->Get("node-a").has_value()) << "fenced before --fence-dead-nodes-after";
  EXPECT_FALSE(api_->Tainted("node-a"));

  now_ = kNow + 1;
  ASSERT_TRUE(watcher->RunOnce().ok());
  auto fence = fencer_->Get("node-a");
  ASSERT_TRUE(fence.has_value());
  EXPECT_TRUE(fence->complete());
  EXPECT_TRUE(backend_->GetVolume(id_)->grants.empty());
  EXPECT_TRUE(api_->Tainted("node-a"));
  EXPECT_FALSE(api_->Tainted("node-b"));
  EXPECT_FALSE(fencer_->Get("node-b").has_value());
  const json& lease = api_->leases.at("blockcsi-fence-node-a");
  EXPECT_EQ(lease["metadata"]["annotations"][fence_annotations::kFenceId], fence->id());
  EXPECT_EQ(api_->nodes["node-a"]["metadata"]["annotations"][fence_annotations::kTainted], fence->id());
  EXPECT_EQ(api_->Reasons(), (std::vector<std::string>{"NodeFenced", "NodeOutOfService"}));

  // Ready again, but no report: still fenced and tainted.
  api_->SetNode("node-a", "True", Time(now_));
  ASSERT_TRUE(watcher->RunOnce().ok());
  EXPECT_TRUE(fencer_->Get("node-a").has_value()) << "unfenced on readiness alone";
  EXPECT_TRUE(api_->Tainted("node-a"));
  // A report for another fence does not count either.
  api_->leases["blockcsi-fence-node-a"]["metadata"]["annotations"][fence_annotations::kCleanedUp] =
      "2001-01-01T00:00:00Z";
  ASSERT_TRUE(watcher->RunOnce().ok());
  EXPECT_TRUE(fencer_->Get("node-a").has_value());

  api_->leases["blockcsi-fence-node-a"]["metadata"]["annotations"][fence_annotations::kCleanedUp] = fence->id();
  ASSERT_TRUE(watcher->RunOnce().ok());
  EXPECT_FALSE(fencer_->Get("node-a").has_value());
  EXPECT_FALSE(api_->Tainted("node-a"));
  EXPECT_FALSE(api_->leases.contains("blockcsi-fence-node-a"));
  EXPECT_FALSE(api_->nodes["node-a"]["metadata"]["annotations"].contains(fence_annotations::kTainted));
  EXPECT_EQ(api_->Reasons().back(), "NodeUnfenced");
  EXPECT_TRUE(backend_->ListFences()[0].fences.empty());
}

TEST_F(NodeFenceWatcherTest, AnIncompleteFenceIsRetriedAndNeverTaints) {
  auto watcher = Watcher(true);
  api_->SetNode("node-a", "Unknown", Time(kNow - 600));
  backend_->FailNext("FenceNode", Unavailable("storage host down"));
  ASSERT_TRUE(watcher->RunOnce().ok());
  auto fence = fencer_->Get("node-a");
  ASSERT_TRUE(fence.has_value());
  EXPECT_FALSE(fence->complete());
  EXPECT_FALSE(api_->Tainted("node-a")) << "tainted before every host was fenced";
  ASSERT_FALSE(api_->events.empty());
  EXPECT_EQ(api_->events.back()["reason"], "NodeFenceIncomplete");
  EXPECT_NE(api_->events.back()["message"].get<std::string>().find("storage host down"), std::string::npos);
  // The same failure again is not evented twice.
  backend_->FailNext("FenceNode", Unavailable("storage host down"));
  ASSERT_TRUE(watcher->RunOnce().ok());
  EXPECT_EQ(api_->events.size(), 1u);
  // The host is back: the fence completes, then the taint.
  ASSERT_TRUE(watcher->RunOnce().ok());
  EXPECT_TRUE(fencer_->Get("node-a")->complete());
  EXPECT_TRUE(api_->Tainted("node-a"));
}

TEST_F(NodeFenceWatcherTest, WithoutTaintingItFencesAndLeavesTheTaintsAlone) {
  auto watcher = Watcher(false);
  api_->SetNode("node-a", "False", Time(kNow - 600));
  ASSERT_TRUE(watcher->RunOnce().ok());
  EXPECT_TRUE(fencer_->Get("node-a").has_value());
  EXPECT_FALSE(api_->Tainted("node-a"));
}

TEST_F(NodeFenceWatcherTest, AnAdminsOwnOutOfServiceTaintStays) {
  auto watcher = Watcher(true);
  api_->SetNode("node-a", "Unknown", Time(kNow - 600));
  api_->nodes["node-a"]["spec"]["taints"] = {
      {{"key", kOutOfServiceTaint}, {"value", "admin"}, {"effect", "NoExecute"}}};
  ASSERT_TRUE(watcher->RunOnce().ok());
  auto fence = fencer_->Get("node-a");
  ASSERT_TRUE(fence.has_value());
  api_->SetNode("node-a", "True", Time(now_));
  api_->leases["blockcsi-fence-node-a"]["metadata"]["annotations"][fence_annotations::kCleanedUp] = fence->id();
  ASSERT_TRUE(watcher->RunOnce().ok());
  EXPECT_FALSE(fencer_->Get("node-a").has_value());
  EXPECT_TRUE(api_->Tainted("node-a")) << "the watcher removed a taint it did not add";
}

TEST_F(NodeFenceWatcherTest, AFenceMadeByHandIsUnfencedOnItsReportAndATaintLeftBehindGoesNextPass) {
  auto watcher = Watcher(true);
  api_->SetNode("node-a", "Unknown", Time(kNow - 600));
  ASSERT_TRUE(watcher->RunOnce().ok());
  auto fence = fencer_->Get("node-a");
  ASSERT_TRUE(fence.has_value());
  ASSERT_TRUE(api_->Tainted("node-a"));
  // Ready and reported; the taint's removal fails after the unfence.
  api_->SetNode("node-a", "True", Time(now_));
  api_->leases["blockcsi-fence-node-a"]["metadata"]["annotations"][fence_annotations::kCleanedUp] = fence->id();
  api_->fail_node_patches = 1;
  EXPECT_FALSE(watcher->RunOnce().ok());
  EXPECT_FALSE(fencer_->Get("node-a").has_value());
  ASSERT_TRUE(api_->Tainted("node-a"));
  ASSERT_TRUE(watcher->RunOnce().ok());
  EXPECT_FALSE(api_->Tainted("node-a")) << "a taint of ours stayed on a node no longer fenced";

  // A fence made by hand (blockctl fence) on a Ready node: told through the
  // Lease, and unfenced by the watcher once reported.
  auto by_hand = fencer_->Fence("node-a");
  ASSERT_TRUE(by_hand.ok());
  ASSERT_TRUE(api_->leases.contains("blockcsi-fence-node-a"));
  EXPECT_EQ(api_->leases["blockcsi-fence-node-a"]["metadata"]["annotations"][fence_annotations::kFenceId],
            by_hand->id());
  ASSERT_TRUE(watcher->RunOnce().ok());
  EXPECT_TRUE(fencer_->Get("node-a").has_value()) << "unfenced without the node's report";
  api_->leases["blockcsi-fence-node-a"]["metadata"]["annotations"][fence_annotations::kCleanedUp] = by_hand->id();
  ASSERT_TRUE(watcher->RunOnce().ok());
  EXPECT_FALSE(fencer_->Get("node-a").has_value());
  EXPECT_FALSE(api_->leases.contains("blockcsi-fence-node-a"));
}

TEST(ParseRfc3339Test, ReadsTheApiServersTimes) {
  EXPECT_EQ(*ParseRfc3339("1970-01-01T00:01:00Z"), 60);
  EXPECT_EQ(*ParseRfc3339("2027-01-15T08:00:00Z"), kNow);
  EXPECT_EQ(*ParseRfc3339("2027-01-15T08:00:00.123456Z"), kNow);
  EXPECT_FALSE(ParseRfc3339("yesterday").ok());
  EXPECT_FALSE(ParseRfc3339("2027-01-15T08:00:00+02:00").ok());
}

}  // namespace
}  // namespace blockcsi
