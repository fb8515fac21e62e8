// NodeFencer and the controller's fenced-node rules against fake backends:
// one host, and two behind the routing backend with one of them failing.
#include "controller/fencing.h"

#include <gtest/gtest.h>

#include "backend/routing/routing_backend.h"
#include "common/metrics.h"
#include "controller/controller_service.h"
#include "support/fake_backend.h"

namespace blockcsi {
namespace {

using testing::FakeBackend;

csi::v1::ControllerPublishVolumeRequest PublishRequest(const std::string& volume, const std::string& node) {
  csi::v1::ControllerPublishVolumeRequest request;
  request.set_volume_id(volume);
  request.set_node_id(node);
  request.mutable_volume_capability()->mutable_mount()->set_fs_type("ext4");
  request.mutable_volume_capability()->mutable_access_mode()->set_mode(
      csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  return request;
}

std::string MakeVolume(FakeBackend& backend, const std::string& name) {
  CreateVolumeSpec spec;
  spec.name = name;
  spec.size_bytes = FakeBackend::kGranularity;
  auto v = backend.CreateVolume(spec);
  EXPECT_TRUE(v.ok());
  return v.ok() ? v->id : "";
}

// Where the node reads its fence and writes its report: a mailbox per node,
// with a switch that makes the next Withdraw fail.
class MailboxChannel final : public FenceChannel {
 public:
  Status Publish(const std::string& node_id, const std::string& fence_id) override {
    notices[node_id] = fence_id;
    return OkStatus();
  }
  StatusOr<std::string> CleanupReport(const std::string& node_id) override {
    return reports.contains(node_id) ? reports[node_id] : "";
  }
  Status Withdraw(const std::string& node_id) override {
    if (fail_withdraw) return Unavailable("API server unreachable");
    notices.erase(node_id);
    reports.erase(node_id);
    return OkStatus();
  }
  std::map<std::string, std::string> notices;
  std::map<std::string, std::string> reports;
  bool fail_withdraw = false;
};

// The value of one series in the metrics' text, or -1 when absent.
double Series(const std::string& series) {
  const std::string text = Metrics().Render();
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

TEST(NodeFencerTest, PublishIsRefusedNamingTheFenceAndUnpublishAnswersWithoutTheBackend) {
  auto backend = std::make_shared<FakeBackend>();
  const std::string id = MakeVolume(*backend, "pvc-1");
  auto fencer = std::make_shared<NodeFencer>(backend);
  ControllerOptions options;
  options.fencer = fencer;
  ControllerService controller(backend, options);
  grpc::ServerContext ctx;
  csi::v1::ControllerPublishVolumeResponse published;
  auto request = PublishRequest(id, "node-a");
  ASSERT_TRUE(controller.ControllerPublishVolume(&ctx, &request, &published).ok());

  auto fence = fencer->Fence("node-a");
  ASSERT_TRUE(fence.ok());
  EXPECT_TRUE(fence->complete());
  ASSERT_EQ(fence->held.size(), 1u);
  EXPECT_EQ(fence->held[0].grant.volume_id, id);
  EXPECT_EQ(fence->held[0].host, "fake");

  grpc::Status refused = controller.ControllerPublishVolume(&ctx, &request, &published);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("node \"node-a\" is fenced since " + fence->id()), std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find(id), std::string::npos) << "the message must name the volume";

  const int calls = backend->TotalCalls();
  csi::v1::ControllerUnpublishVolumeRequest unpublish;
  unpublish.set_volume_id(id);
  unpublish.set_node_id("node-a");
  csi::v1::ControllerUnpublishVolumeResponse unpublished;
  EXPECT_TRUE(controller.ControllerUnpublishVolume(&ctx, &unpublish, &unpublished).ok());
  EXPECT_EQ(backend->TotalCalls(), calls) << "unpublish from a fenced node must not wait for the backend";

  // Another node is not affected.
  auto other = PublishRequest(id, "node-b");
  EXPECT_TRUE(controller.ControllerPublishVolume(&ctx, &other, &published).ok());
}

TEST(NodeFencerTest, UnfenceNeedsTheReportForThisFenceOrForce) {
  auto backend = std::make_shared<FakeBackend>();
  NodeFencer fencer(backend);
  auto fence = fencer.Fence("node-a");
  ASSERT_TRUE(fence.ok());
  Status refused = fencer.Unfence("node-a", false);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("not reported that it cleaned up"), std::string::npos) << refused.ToString();
  EXPECT_FALSE(fencer.ReportCleanedUp("node-a", "2001-01-01T00:00:00Z"));
  EXPECT_FALSE(fencer.ReportCleanedUp("node-b", fence->id()));
  EXPECT_EQ(fencer.Unfence("node-a", false).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fencer.ReportCleanedUp("node-a", fence->id()));
  EXPECT_TRUE(fencer.Get("node-a")->cleaned_up);
  // Fencing again (the watcher's retries) keeps the id and the report.
  auto again = fencer.Fence("node-a");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id(), fence->id());
  EXPECT_TRUE(again->cleaned_up);
  ASSERT_TRUE(fencer.Unfence("node-a", false).ok());
  EXPECT_FALSE(fencer.Get("node-a").has_value());
  EXPECT_TRUE(backend->ListFences()[0].fences.empty());

  ASSERT_TRUE(fencer.Fence("node-c").ok());
  EXPECT_TRUE(fencer.Unfence("node-c", true).ok());
  EXPECT_TRUE(backend->ListFences()[0].fences.empty());
}

TEST(NodeFencerTest, AHostThatFailsLeavesTheFenceIncompleteNamedAndRetried) {
  auto one = std::make_shared<FakeBackend>();
  auto two = std::make_shared<FakeBackend>();
  auto routing = RoutingBackend::Make({{"one", one, {}}, {"two", two, {}}}, "one");
  ASSERT_TRUE(routing.ok());
  const std::string id_two = MakeVolume(*two, "pvc-2");
  ASSERT_TRUE(two->GrantAccess(id_two, {"iqn.2026-11.io.blockcsi:node:node-a", "node-a", false, "x", {}}).ok());
  NodeFencer fencer(*routing);
  two->FailNext("FenceNode", Unavailable("storage host down"));
  auto fence = fencer.Fence("node-a");
  ASSERT_TRUE(fence.ok());
  EXPECT_FALSE(fence->complete());
  ASSERT_EQ(fence->pending.count("two"), 1u);
  EXPECT_NE(fence->pending.at("two").find("storage host down"), std::string::npos);
  EXPECT_EQ(fence->pending.count("one"), 0u);
  EXPECT_TRUE(fencer.Get("node-a").has_value()) << "an incomplete fence still refuses publishes";

  auto retried = fencer.RetryPending();
  ASSERT_EQ(retried.size(), 1u);
  EXPECT_TRUE(retried[0].complete());
  ASSERT_EQ(retried[0].held.size(), 1u);
  EXPECT_EQ(retried[0].held[0].host, "two");
  EXPECT_EQ(retried[0].held[0].grant.volume_id, RoutingBackend::JoinId("two", id_two));
}

TEST(NodeFencerTest, LoadFencesOnEveryHostANodeOneHostRecorded) {
  auto one = std::make_shared<FakeBackend>();
  auto two = std::make_shared<FakeBackend>();
  auto routing = RoutingBackend::Make({{"one", one, {}}, {"two", two, {}}}, "one");
  ASSERT_TRUE(routing.ok());
  // What a controller killed after host one: only one has the record.
  ASSERT_TRUE(one->FenceNode("node-a", "iqn.2026-11.io.blockcsi:node:node-a")[0].status.ok());
  const std::string id_two = MakeVolume(*two, "pvc-2");
  ASSERT_TRUE(two->GrantAccess(id_two, {"iqn.2026-11.io.blockcsi:node:node-a", "node-a", false, "x", {}}).ok());
  NodeFencer fencer(*routing);
  EXPECT_TRUE(fencer.Load().empty());
  auto fence = fencer.Get("node-a");
  ASSERT_TRUE(fence.has_value());
  EXPECT_TRUE(fence->complete());
  EXPECT_EQ(two->ListFences()[0].fences.size(), 1u);
  EXPECT_TRUE(two->GetVolume(id_two)->grants.empty());
}

TEST(NodeFencerTest, AFenceByHandIsToldToItsNodeAndUnfenceReadsItsReportThenWithdrawsTheNotice) {
  auto backend = std::make_shared<FakeBackend>();
  auto channel = std::make_shared<MailboxChannel>();
  NodeFencer fencer(backend, channel);
  auto fence = fencer.Fence("node-a");
  ASSERT_TRUE(fence.ok());
  EXPECT_EQ(channel->notices["node-a"], fence->id()) << "a fence not made by the watcher was not told to the node";
  EXPECT_EQ(fencer.Unfence("node-a", false).code(), StatusCode::kFailedPrecondition);
  channel->reports["node-a"] = "2001-01-01T00:00:00Z";  // a report for another fence
  EXPECT_EQ(fencer.Unfence("node-a", false).code(), StatusCode::kFailedPrecondition);
  fencer.RefreshReports();
  EXPECT_FALSE(fencer.Get("node-a")->cleaned_up);

  // The node reported; a controller restarted since reads it from the
  // channel (the mirror's memory of it is gone).
  channel->reports["node-a"] = fence->id();
  NodeFencer restarted(backend, channel);
  EXPECT_TRUE(restarted.Load().empty());
  restarted.RefreshReports();
  EXPECT_TRUE(restarted.Get("node-a")->cleaned_up) << "blockctl fences would say the node has not reported";
  // The notice cannot be withdrawn: the node would keep refusing NodeStage,
  // so the fence stays here for the retry.
  channel->fail_withdraw = true;
  Status half = restarted.Unfence("node-a", false);
  EXPECT_EQ(half.code(), StatusCode::kUnavailable) << half.ToString();
  EXPECT_TRUE(restarted.Get("node-a").has_value());
  channel->fail_withdraw = false;
  ASSERT_TRUE(restarted.Unfence("node-a", false).ok());
  EXPECT_FALSE(restarted.Get("node-a").has_value());
  EXPECT_FALSE(channel->notices.contains("node-a"));
  EXPECT_TRUE(backend->ListFences()[0].fences.empty());
}

TEST(NodeFencerTest, FencesAndTheirDurationsAreCounted) {
  auto backend = std::make_shared<FakeBackend>();
  NodeFencer fencer(backend);
  const std::string complete = R"(blockcsi_fence_operations_total{operation="fence",result="complete"})";
  const std::string refused = R"(blockcsi_fence_operations_total{operation="unfence",result="refused"})";
  const std::string unfenced = R"(blockcsi_fence_operations_total{operation="unfence",result="complete"})";
  auto count = [](const std::string& series) { return std::max(0.0, Series(series)); };
  const double complete_before = count(complete), refused_before = count(refused), unfenced_before = count(unfenced);
  const double rounds_before = count("blockcsi_fence_round_seconds_count");
  const double durations_before = count("blockcsi_fenced_duration_seconds_count");

  auto fence = fencer.Fence("node-m");
  ASSERT_TRUE(fence.ok());
  EXPECT_EQ(Series(complete), complete_before + 1);
  EXPECT_EQ(Series("blockcsi_fence_round_seconds_count"), rounds_before + 1);
  EXPECT_GE(Series(R"(blockcsi_fenced_nodes{state="all"})"), 1);
  EXPECT_EQ(fencer.Unfence("node-m", false).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Series(refused), refused_before + 1);
  ASSERT_TRUE(fencer.ReportCleanedUp("node-m", fence->id()));
  ASSERT_TRUE(fencer.Unfence("node-m", false).ok());
  EXPECT_EQ(Series(unfenced), unfenced_before + 1);
  EXPECT_EQ(Series("blockcsi_fenced_duration_seconds_count"), durations_before + 1);
}

TEST(NodeFencerTest, ABadNodeIdFencesNothing) {
  auto backend = std::make_shared<FakeBackend>();
  NodeFencer fencer(backend);
  EXPECT_EQ(fencer.Fence("Not_A_Node").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->Calls("FenceNode"), 0);
  EXPECT_TRUE(fencer.List().empty());
}

}  // namespace
}  // namespace blockcsi
