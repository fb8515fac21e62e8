// Several storage hosts in topology zones (issue #20): the placement order
// (pure), and RoutingBackend over two zoned FakeBackends — which host a
// volume goes to for the CO's requisite and preferred segments, a full host
// skipped, RESOURCE_EXHAUSTED only when no allowed host has room, a retry
// finding the volume an earlier try made, GetCapacity per segment — also
// through ControllerService, as the plugin wires it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backend/routing/placement.h"
#include "backend/routing/routing_backend.h"
#include "controller/controller_service.h"
#include "support/csi_requests.h"
#include "support/fake_backend.h"

namespace blockcsi {
namespace {

using ::testing::ElementsAre;
using testing::FakeBackend;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;
constexpr char kNodeKey[] = "topology.blockcsi.io/node";

TopologySegments Zone(const std::string& zone) { return {{kTopologyZoneKey, zone}}; }
TopologySegments NodeIn(const std::string& node, const std::string& zone) {
  return {{kNodeKey, node}, {kTopologyZoneKey, zone}};
}

// ---- Placement order (pure)

TEST(PlacementTest, NoRequirementsMeansTheDefaultAlone) {
  EXPECT_THAT(PlacementOrder({Zone("a"), Zone("b")}, 1, {}), ElementsAre(1u));
}

TEST(PlacementTest, PreferredSegmentsInTheirOrderThenTheRestOfTheRequisite) {
  const std::vector<TopologySegments> hosts{Zone("a"), Zone("b"), Zone("c")};
  AccessibilityRequirements r;
  r.requisite = {NodeIn("n1", "a"), NodeIn("n2", "b"), NodeIn("n3", "c")};
  r.preferred = {NodeIn("n2", "b"), NodeIn("n3", "c")};
  EXPECT_THAT(PlacementOrder(hosts, 0, r), ElementsAre(1u, 2u, 0u));
  // Requisite narrows: zone c is not requisite, so preferring it adds nothing.
  r.requisite = {NodeIn("n1", "a"), NodeIn("n2", "b")};
  EXPECT_THAT(PlacementOrder(hosts, 0, r), ElementsAre(1u, 0u));
  // Preferred alone: every host is allowed, the preferred one first.
  r.requisite.clear();
  r.preferred = {NodeIn("n3", "c")};
  EXPECT_THAT(PlacementOrder(hosts, 0, r), ElementsAre(2u, 0u, 1u));
}

TEST(PlacementTest, ARequisiteNoHostReachesLeavesNothing) {
  AccessibilityRequirements r;
  r.requisite = {NodeIn("n9", "z")};
  EXPECT_TRUE(PlacementOrder({Zone("a"), Zone("b")}, 0, r).empty());
  // A node that reports no zone reaches no zoned host.
  r.requisite = {{{kNodeKey, "n1"}}};
  EXPECT_TRUE(PlacementOrder({Zone("a"), Zone("b")}, 0, r).empty());
}

TEST(PlacementTest, AZonelessDefaultReachesEverySegmentAndComesFirst) {
  // hosts: 0 central (no zone, default), 1 zone a, 2 ceph (no zone, not default)
  const std::vector<TopologySegments> hosts{{}, Zone("a"), {}};
  AccessibilityRequirements r;
  r.requisite = {NodeIn("n1", "a")};
  r.preferred = {NodeIn("n1", "a")};
  // The zoneless non-default backend is never placed on: only a class naming it uses it.
  EXPECT_THAT(PlacementOrder(hosts, 0, r), ElementsAre(0u, 1u));
  r.requisite = {NodeIn("n2", "b")};
  r.preferred = {NodeIn("n2", "b")};
  EXPECT_THAT(PlacementOrder(hosts, 0, r), ElementsAre(0u));
}

// ---- RoutingBackend over two zoned hosts

class ZoneRoutingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto routing = RoutingBackend::Make({{"zone-a", a_, Zone("a")}, {"zone-b", b_, Zone("b")}}, "zone-a");
    ASSERT_TRUE(routing.ok()) << routing.status().ToString();
    routing_ = *routing;
  }

  // What external-provisioner sends for a pod the scheduler put on `node`
  // (in `zone`): both nodes requisite, that node's segment preferred first.
  static AccessibilityRequirements ForPodOn(const std::string& node) {
    AccessibilityRequirements r;
    r.requisite = {NodeIn("n1", "a"), NodeIn("n2", "b")};
    r.preferred = node == "n1" ? std::vector{NodeIn("n1", "a"), NodeIn("n2", "b")}
                               : std::vector{NodeIn("n2", "b"), NodeIn("n1", "a")};
    return r;
  }
  static AccessibilityRequirements Only(const std::string& node, const std::string& zone) {
    AccessibilityRequirements r;
    r.requisite = {NodeIn(node, zone)};
    r.preferred = {NodeIn(node, zone)};
    return r;
  }
  StatusOr<VolumeRecord> Create(const std::string& name, AccessibilityRequirements r,
                                std::map<std::string, std::string> params = {}) {
    CreateVolumeSpec spec{name, 8 * kMiB, {}, std::move(params)};
    spec.accessibility = std::move(r);
    return routing_->CreateVolume(spec);
  }

  std::shared_ptr<FakeBackend> a_ = std::make_shared<FakeBackend>();
  std::shared_ptr<FakeBackend> b_ = std::make_shared<FakeBackend>();
  std::shared_ptr<RoutingBackend> routing_;
};

TEST_F(ZoneRoutingTest, TheScheduledNodesZoneGetsTheVolumeAndItsTopology) {
  auto on_b = Create("pvc-1", ForPodOn("n2"));
  ASSERT_TRUE(on_b.ok()) << on_b.status().ToString();
  EXPECT_EQ(on_b->id, "zone-b~vol-1");
  EXPECT_EQ(on_b->topology.at(kTopologyZoneKey), "b");
  EXPECT_EQ(a_->Calls("CreateVolume"), 0);
  auto on_a = Create("pvc-2", ForPodOn("n1"));
  ASSERT_TRUE(on_a.ok()) << on_a.status().ToString();
  EXPECT_EQ(on_a->id, "zone-a~vol-1");
  EXPECT_EQ(on_a->topology.at(kTopologyZoneKey), "a");
  // Every later read says the zone too (ListVolumes, ControllerGetVolume).
  EXPECT_EQ(routing_->GetVolume("zone-b~vol-1")->topology.at(kTopologyZoneKey), "b");
}

TEST_F(ZoneRoutingTest, AFullHostIsSkippedForTheNextAllowedOne) {
  b_->SetAvailableBytes(4 * kMiB);
  auto record = Create("pvc-1", ForPodOn("n2"));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->id, "zone-a~vol-1");
  EXPECT_EQ(record->topology.at(kTopologyZoneKey), "a");
  EXPECT_EQ(b_->Calls("CreateVolume"), 1);
}

TEST_F(ZoneRoutingTest, ResourceExhaustedOnlyWhenNoAllowedHostHasRoom) {
  b_->SetAvailableBytes(4 * kMiB);
  // Only zone b allowed, and it is full: zone a's room does not count.
  auto only_b = Create("pvc-1", Only("n2", "b"));
  ASSERT_FALSE(only_b.ok());
  EXPECT_EQ(only_b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(a_->Calls("CreateVolume"), 0);
  // Both allowed, both full: RESOURCE_EXHAUSTED naming the volume and each host.
  a_->SetAvailableBytes(4 * kMiB);
  auto both = Create("pvc-2", ForPodOn("n2"));
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(both.status().message(), HasSubstr("\"pvc-2\""));
  EXPECT_THAT(both.status().message(), HasSubstr("zone-a"));
  EXPECT_THAT(both.status().message(), HasSubstr("zone-b"));
  EXPECT_TRUE(routing_->ListVolumes("", 0)->items.empty()) << "a refused volume must leave nothing";
}

TEST_F(ZoneRoutingTest, ATopologyNoHostReachesIsResourceExhaustedNamingIt) {
  auto record = Create("pvc-1", Only("n9", "z"));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(record.status().message(), HasSubstr("\"pvc-1\""));
  EXPECT_THAT(record.status().message(), HasSubstr("topology.blockcsi.io/zone=z"));
  // The StorageClass names zone a's backend; the pod's node is in zone b.
  auto named = Create("pvc-2", Only("n2", "b"), {{"backend", "zone-a"}});
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(named.status().message(), HasSubstr("zone-a"));
  EXPECT_EQ(a_->TotalCalls() + b_->TotalCalls(), 0);
}

TEST_F(ZoneRoutingTest, ARetryFindsTheVolumeOnTheHostAnEarlierTryChose) {
  b_->SetAvailableBytes(4 * kMiB);
  auto first = Create("pvc-1", ForPodOn("n2"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->id, "zone-a~vol-1");
  // Zone b has room again when the provisioner retries (its first answer
  // was lost): the retry goes to zone a, which holds the name (a real host
  // answers a known name with that volume), never makes a second on zone b.
  b_->SetAvailableBytes(100 * kMiB);
  auto retry = Create("pvc-1", ForPodOn("n2"));
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_TRUE(retry->id.starts_with("zone-a~")) << retry->id;
  EXPECT_EQ(a_->Calls("CreateVolume"), 2);
  EXPECT_EQ(b_->Calls("CreateVolume"), 1) << "only the first try, which found zone b full";
}

TEST_F(ZoneRoutingTest, CapacityIsTheHostsOfTheSegment) {
  a_->SetAvailableBytes(30 * kMiB);
  b_->SetAvailableBytes(20 * kMiB);
  EXPECT_EQ(*routing_->AvailableBytes({{}, NodeIn("n2", "b")}), 20 * kMiB);
  EXPECT_EQ(*routing_->AvailableBytes({{}, NodeIn("n1", "a")}), 30 * kMiB);
  EXPECT_EQ(*routing_->AvailableBytes({{}, NodeIn("n9", "z")}), 0u);  // no host in that zone
  // backend= names the host; a node of another zone cannot use it.
  EXPECT_EQ(*routing_->AvailableBytes({{{"backend", "zone-a"}}, NodeIn("n1", "a")}), 30 * kMiB);
  EXPECT_EQ(*routing_->AvailableBytes({{{"backend", "zone-a"}}, NodeIn("n2", "b")}), 0u);
  EXPECT_EQ(*routing_->AvailableBytes({}), 30 * kMiB);  // no segment: the default
}

// As the plugin runs it: ControllerService → routing.
TEST_F(ZoneRoutingTest, ControllerHonoursRequirementsAndAnswersCapacityPerSegment) {
  ControllerService service(routing_, ControllerOptions{});
  csi::v1::CreateVolumeRequest request = testing::CreateRequest("pvc-1", 8 * kMiB);
  auto* requirements = request.mutable_accessibility_requirements();
  for (const auto& node : {NodeIn("n1", "a"), NodeIn("n2", "b")}) {
    requirements->add_requisite()->mutable_segments()->insert(node.begin(), node.end());
  }
  for (const auto& node : {NodeIn("n2", "b"), NodeIn("n1", "a")}) {
    requirements->add_preferred()->mutable_segments()->insert(node.begin(), node.end());
  }
  csi::v1::CreateVolumeResponse response;
  grpc::Status st = service.CreateVolume(nullptr, &request, &response);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(response.volume().volume_id(), "zone-b~vol-1");
  ASSERT_EQ(response.volume().accessible_topology_size(), 1);
  EXPECT_EQ(response.volume().accessible_topology(0).segments().at(kTopologyZoneKey), "b");

  b_->SetAvailableBytes(0);
  request.set_name("pvc-2");
  requirements->clear_requisite();
  requirements->clear_preferred();
  requirements->add_requisite()->mutable_segments()->insert({kTopologyZoneKey, "b"});
  st = service.CreateVolume(nullptr, &request, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("pvc-2"));

  a_->SetAvailableBytes(64 * kMiB);
  csi::v1::GetCapacityRequest capacity;
  capacity.mutable_accessible_topology()->mutable_segments()->insert({kTopologyZoneKey, "a"});
  csi::v1::GetCapacityResponse capacity_response;
  ASSERT_TRUE(service.GetCapacity(nullptr, &capacity, &capacity_response).ok());
  EXPECT_EQ(capacity_response.available_capacity(), static_cast<int64_t>(64 * kMiB));
  (*capacity.mutable_accessible_topology()->mutable_segments())[kTopologyZoneKey] = "b";
  ASSERT_TRUE(service.GetCapacity(nullptr, &capacity, &capacity_response).ok());
  EXPECT_EQ(capacity_response.available_capacity(), 0);
}

}  // namespace
}  // namespace blockcsi
