// RoutingBackend (several named backends behind one) with two in-memory
// FakeBackends: routing by the `backend` parameter and by id, the default
// backend, unknown backends, paging across backends, capacity per backend,
// health; and the whole path through ControllerService (which hands
// GetCapacity's parameters to the backend), as the plugin wires it.
#include "backend/routing/routing_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "controller/controller_service.h"
#include "support/csi_requests.h"
#include "support/fake_backend.h"

namespace blockcsi {
namespace {

using testing::FakeBackend;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint64_t kMiB = 1 << 20;

class RoutingBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto routing = RoutingBackend::Make({{"fast", fast_}, {"slow", slow_}}, "slow");
    ASSERT_TRUE(routing.ok()) << routing.status().ToString();
    routing_ = *routing;
  }

  StatusOr<VolumeRecord> Create(const std::string& name, std::map<std::string, std::string> params = {},
                                ContentSource source = {}) {
    return routing_->CreateVolume({name, 8 * kMiB, source, std::move(params)});
  }

  std::shared_ptr<FakeBackend> fast_ = std::make_shared<FakeBackend>();
  std::shared_ptr<FakeBackend> slow_ = std::make_shared<FakeBackend>();
  std::shared_ptr<RoutingBackend> routing_;
};

TEST_F(RoutingBackendTest, MakeRefusesBadConfigurations) {
  EXPECT_EQ(RoutingBackend::Make({}, "a").status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(RoutingBackend::Make({{"a", fast_}, {"a", slow_}}, "a").status().message(), HasSubstr("twice"));
  EXPECT_THAT(RoutingBackend::Make({{"a~b", fast_}}, "a~b").status().message(), HasSubstr("~"));
  EXPECT_THAT(RoutingBackend::Make({{"a", fast_}}, "b").status().message(), HasSubstr("\"b\""));
}

// Issue #24: the controller keeps a static PV's handle away from every
// backend, so routing must say "not mine" for ids no configured backend
// makes, without a call to any of them.
TEST_F(RoutingBackendTest, MayHoldVolumeAsksTheBackendTheIdNames) {
  EXPECT_TRUE(routing_->MayHoldVolume("fast~vol-1"));
  EXPECT_TRUE(routing_->MayHoldVolume("vol-1"));  // no "~": the default backend's
  EXPECT_FALSE(routing_->MayHoldVolume("fast~array-disk1"));
  EXPECT_FALSE(routing_->MayHoldVolume("gone~vol-1"));  // backend not configured
  EXPECT_FALSE(routing_->MayHoldVolume("array-a-disk1"));
  EXPECT_EQ(fast_->TotalCalls() + slow_->TotalCalls(), 0);
}

TEST_F(RoutingBackendTest, CreateRoutesByParameterAndIdsCarryTheBackend) {
  auto on_fast = Create("v1", {{"backend", "fast"}});
  ASSERT_TRUE(on_fast.ok()) << on_fast.status().ToString();
  EXPECT_EQ(on_fast->id, "fast~vol-1");
  EXPECT_EQ(fast_->Calls("CreateVolume"), 1);
  EXPECT_EQ(slow_->Calls("CreateVolume"), 0);

  // The inner ids of both fakes collide ("vol-1"); the prefix keeps them apart.
  auto on_slow = Create("v2", {{"backend", "slow"}});
  ASSERT_TRUE(on_slow.ok());
  EXPECT_EQ(on_slow->id, "slow~vol-1");

  // Every later call goes where the id says.
  auto got = routing_->GetVolume("fast~vol-1");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->name, "v1");
  EXPECT_EQ(routing_->GetVolume("slow~vol-1")->name, "v2");
  ASSERT_TRUE(routing_->ExpandVolume("fast~vol-1", 16 * kMiB).ok());
  EXPECT_EQ(fast_->Calls("ExpandVolume"), 1);
  EXPECT_EQ(slow_->Calls("ExpandVolume"), 0);
  auto granted = routing_->GrantAccess("slow~vol-1", {"iqn.x:n1", "n1", false, "cap", {}});
  ASSERT_TRUE(granted.ok());
  EXPECT_EQ(granted->id, "slow~vol-1");
  ASSERT_TRUE(routing_->RevokeAccess("slow~vol-1", "iqn.x:n1").ok());
  EXPECT_EQ(slow_->Calls("RevokeAccess"), 1);
  ASSERT_TRUE(routing_->DeleteVolume("fast~vol-1").ok());
  EXPECT_FALSE(fast_->GetVolume("vol-1").ok());
  EXPECT_TRUE(slow_->GetVolume("vol-1").ok());
}

TEST_F(RoutingBackendTest, CreateWithoutParameterGoesToTheDefault) {
  auto record = Create("v1");
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->id, "slow~vol-1");
  EXPECT_EQ(fast_->Calls("CreateVolume"), 0);
}

TEST_F(RoutingBackendTest, UnknownBackendParameterIsInvalidArgumentNamingIt) {
  auto record = Create("v1", {{"backend", "nvme"}});
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(record.status().message(), HasSubstr("\"nvme\""));
  EXPECT_THAT(record.status().message(), HasSubstr("fast, slow"));
}

TEST_F(RoutingBackendTest, IdOfAnUnconfiguredBackendIsNotFoundForLookupsAndOkForDeletes) {
  EXPECT_EQ(routing_->GetVolume("gone~vol-1").status().code(), StatusCode::kNotFound);
  EXPECT_THAT(routing_->GetVolume("gone~vol-1").status().message(), HasSubstr("\"gone\""));
  EXPECT_EQ(routing_->CheckVolume("gone~vol-1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(routing_->ExpandVolume("gone~vol-1", 8 * kMiB).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(routing_->GrantAccess("gone~vol-1", {}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(routing_->GetSnapshot("gone~snap-1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(routing_->CreateSnapshot("gone~vol-1", "s").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(routing_->DeleteVolume("gone~vol-1").ok());
  EXPECT_TRUE(routing_->RevokeAccess("gone~vol-1", "iqn.x:n1").ok());
  EXPECT_TRUE(routing_->DeleteSnapshot("gone~snap-1").ok());
  EXPECT_EQ(fast_->Calls("DeleteVolume") + slow_->Calls("DeleteVolume"), 0);
}

TEST_F(RoutingBackendTest, CheckVolumesGroupsByBackendAndKeepsTheOrder) {
  ASSERT_TRUE(Create("a", {{"backend", "fast"}}).ok());
  ASSERT_TRUE(Create("b", {{"backend", "slow"}}).ok());
  fast_->SetHealth("vol-1", {true, "export missing"});
  auto results = routing_->CheckVolumes({"slow~vol-1", "gone~vol-1", "fast~vol-1"});
  ASSERT_EQ(results.size(), 3u);
  ASSERT_TRUE(results[0].ok());
  EXPECT_FALSE(results[0]->abnormal);
  EXPECT_EQ(results[1].status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(results[2].ok());
  EXPECT_TRUE(results[2]->abnormal);
  EXPECT_EQ(results[2]->message, "export missing");
}

TEST_F(RoutingBackendTest, IdWithoutBackendIsTheDefaultBackendsOwn) {
  ASSERT_TRUE(slow_->CreateVolume({"legacy", 8 * kMiB, {}, {}}).ok());
  auto record = routing_->GetVolume("vol-1");
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->name, "legacy");
  EXPECT_EQ(record->id, "slow~vol-1");
}

TEST_F(RoutingBackendTest, SnapshotsAndRestoresStayOnTheSourcesBackend) {
  ASSERT_TRUE(Create("v1", {{"backend", "fast"}}).ok());
  auto snap = routing_->CreateSnapshot("fast~vol-1", "s1");
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  EXPECT_EQ(snap->id, "fast~snap-2");
  EXPECT_EQ(snap->source_volume_id, "fast~vol-1");
  EXPECT_EQ(routing_->GetSnapshot(snap->id)->name, "s1");

  // No backend parameter: the restore follows its source.
  auto restored = Create("r1", {}, {ContentSource::Kind::kSnapshot, snap->id});
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_THAT(restored->id, StartsWith("fast~"));
  EXPECT_EQ(restored->source.id, snap->id);
  // A source on another backend than the parameter asks for is refused.
  auto crossed = Create("r2", {{"backend", "slow"}}, {ContentSource::Kind::kVolume, "fast~vol-1"});
  ASSERT_FALSE(crossed.ok());
  EXPECT_EQ(crossed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(crossed.status().message(), HasSubstr("one backend"));
  // A source on an unconfigured backend does not exist.
  EXPECT_EQ(Create("r3", {}, {ContentSource::Kind::kSnapshot, "gone~snap-1"}).status().code(), StatusCode::kNotFound);

  auto listed = routing_->ListSnapshots("fast~vol-1", "", 0);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->items.size(), 1u);
  EXPECT_EQ(listed->items[0].id, snap->id);
  EXPECT_EQ(routing_->ListSnapshots("gone~vol-1", "", 0).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(routing_->DeleteSnapshot(snap->id).ok());
  EXPECT_EQ(fast_->Calls("DeleteSnapshot"), 1);
}

TEST_F(RoutingBackendTest, ListVolumesPagesAcrossBackendsInConfigurationOrder) {
  for (const char* name : {"a1", "a2", "a3"}) ASSERT_TRUE(Create(name, {{"backend", "fast"}}).ok());
  for (const char* name : {"b1", "b2"}) ASSERT_TRUE(Create(name, {{"backend", "slow"}}).ok());

  std::vector<std::string> names;
  std::string token;
  int pages = 0;
  do {
    auto page = routing_->ListVolumes(token, 2);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    EXPECT_LE(page->items.size(), 2u);
    for (const auto& v : page->items) names.push_back(v.id + "=" + v.name);
    token = page->next_token;
    ASSERT_LT(++pages, 10) << "paging does not end";
  } while (!token.empty());
  EXPECT_EQ(names, (std::vector<std::string>{"fast~vol-1=a1", "fast~vol-2=a2", "fast~vol-3=a3", "slow~vol-1=b1",
                                             "slow~vol-2=b2"}));

  auto all = routing_->ListVolumes("", 0);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->items.size(), 5u);
  EXPECT_TRUE(all->next_token.empty());

  // A page that ends exactly at a backend's end resumes at the next one.
  auto three = routing_->ListVolumes("", 3);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->items.size(), 3u);
  EXPECT_EQ(three->next_token, "slow~");
  auto rest = routing_->ListVolumes(three->next_token, 0);
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->items.size(), 2u);
  EXPECT_EQ(rest->items[0].name, "b1");

  EXPECT_EQ(routing_->ListVolumes("nonsense", 2).status().code(), StatusCode::kAborted);
  EXPECT_EQ(routing_->ListVolumes("gone~x", 2).status().code(), StatusCode::kAborted);
}

TEST_F(RoutingBackendTest, ListSnapshotsPagesAcrossBackends) {
  ASSERT_TRUE(Create("a", {{"backend", "fast"}}).ok());
  ASSERT_TRUE(Create("b", {{"backend", "slow"}}).ok());
  ASSERT_TRUE(routing_->CreateSnapshot("fast~vol-1", "s-a").ok());
  ASSERT_TRUE(routing_->CreateSnapshot("slow~vol-1", "s-b").ok());
  auto first = routing_->ListSnapshots("", "", 1);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->items.size(), 1u);
  EXPECT_EQ(first->items[0].name, "s-a");
  ASSERT_FALSE(first->next_token.empty());
  auto second = routing_->ListSnapshots("", first->next_token, 1);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->items.size(), 1u);
  EXPECT_EQ(second->items[0].name, "s-b");
  EXPECT_EQ(second->items[0].source_volume_id, "slow~vol-1");
}

TEST_F(RoutingBackendTest, CapacityIsTheNamedBackendsOrTheDefaults) {
  fast_->SetAvailableBytes(10 * kMiB);
  slow_->SetAvailableBytes(20 * kMiB);
  EXPECT_EQ(*routing_->AvailableBytes({}), 20 * kMiB);  // no parameters: the default
  EXPECT_EQ(*routing_->AvailableBytes({{{"backend", "fast"}}}), 10 * kMiB);
  EXPECT_EQ(routing_->AvailableBytes({{{"backend", "nvme"}}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*routing_->AvailableBytes({{{"fsType", "xfs"}}}), 20 * kMiB);
}

TEST_F(RoutingBackendTest, SecretsReachEveryBackendAndNoViewIsMadeWhenNoneTakesThem) {
  EXPECT_EQ(routing_->WithSecrets({{{"userID", "u"}}}), nullptr);
  ASSERT_EQ(fast_->SecretsSeen().size(), 1u);
  ASSERT_EQ(slow_->SecretsSeen().size(), 1u);
  EXPECT_EQ(fast_->SecretsSeen()[0].at("userID"), "u");
  EXPECT_EQ(slow_->SecretsSeen()[0].at("userID"), "u");
}

TEST_F(RoutingBackendTest, ARequestsSecretsRouteToTheBackendsViewForThem) {
  auto fast_view = std::make_shared<testing::FakeBackend>();
  fast_->ServeSecretsWith(fast_view);
  auto bound = routing_->WithSecrets({{{"userID", "u"}}});
  ASSERT_NE(bound, nullptr);
  auto created = bound->CreateVolume({"pvc-1", kMiB, {}, {{"backend", "fast"}}});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->id, "fast~vol-1");
  EXPECT_EQ(fast_view->Calls("CreateVolume"), 1);
  EXPECT_EQ(fast_->Calls("CreateVolume"), 0) << "the view serves the request, not the shared backend";
  ASSERT_TRUE(bound->GetVolume(created->id).ok());
  EXPECT_FALSE(routing_->GetVolume(created->id).ok()) << "made through the view only";
}

TEST_F(RoutingBackendTest, HealthyOnlyWhenAllAreAndNamesTheSickOne) {
  EXPECT_TRUE(routing_->Healthy().ok());
  fast_->FailNext("Healthy", Unavailable("tgtd is not answering"));
  Status st = routing_->Healthy();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("backend \"fast\": tgtd is not answering"));
  EXPECT_THAT(st.message(), ::testing::Not(HasSubstr("\"slow\"")));
}

TEST_F(RoutingBackendTest, ParametersAndGranularityCoverEveryBackend) {
  EXPECT_EQ(routing_->SupportedParameters(), std::vector<std::string>{"thin"});
  EXPECT_EQ(routing_->AllocationGranularity(), FakeBackend::kGranularity);
  EXPECT_THAT(routing_->Name(), HasSubstr("fast=fake"));
}

TEST_F(RoutingBackendTest, IdsLongerThanCsiAllowsAreRefused) {
  auto routing = RoutingBackend::Make({{std::string(125, 'x'), fast_}}, std::string(125, 'x'));
  ASSERT_TRUE(routing.ok());
  auto record = (*routing)->CreateVolume({"v", 8 * kMiB, {}, {}});
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kInternal);
  EXPECT_THAT(record.status().message(), HasSubstr("128"));
}

// The plugin's wiring: ControllerService → routing.
class RoutedControllerTest : public RoutingBackendTest {
 protected:
  void SetUp() override {
    RoutingBackendTest::SetUp();
    service_ = std::make_unique<ControllerService>(routing_, ControllerOptions{});
  }
  std::unique_ptr<ControllerService> service_;
};

TEST_F(RoutedControllerTest, StorageClassBackendParameterPicksTheBackendEndToEnd) {
  csi::v1::CreateVolumeRequest request = testing::CreateRequest("pvc-1", 8 * kMiB);
  (*request.mutable_parameters())["backend"] = "fast";
  csi::v1::CreateVolumeResponse response;
  grpc::Status st = service_->CreateVolume(nullptr, &request, &response);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(response.volume().volume_id(), "fast~vol-1");

  csi::v1::GetCapacityRequest capacity;
  (*capacity.mutable_parameters())["backend"] = "fast";
  fast_->SetAvailableBytes(64 * kMiB);
  slow_->SetAvailableBytes(128 * kMiB);
  csi::v1::GetCapacityResponse capacity_response;
  ASSERT_TRUE(service_->GetCapacity(nullptr, &capacity, &capacity_response).ok());
  EXPECT_EQ(capacity_response.available_capacity(), static_cast<int64_t>(64 * kMiB));
  capacity.mutable_parameters()->clear();
  ASSERT_TRUE(service_->GetCapacity(nullptr, &capacity, &capacity_response).ok());
  EXPECT_EQ(capacity_response.available_capacity(), static_cast<int64_t>(128 * kMiB));

  csi::v1::ControllerGetVolumeRequest get;
  get.set_volume_id("gone~vol-1");
  csi::v1::ControllerGetVolumeResponse got;
  EXPECT_EQ(service_->ControllerGetVolume(nullptr, &get, &got).error_code(), grpc::StatusCode::NOT_FOUND);
  csi::v1::DeleteVolumeRequest del;
  del.set_volume_id("gone~vol-1");
  csi::v1::DeleteVolumeResponse deleted;
  EXPECT_TRUE(service_->DeleteVolume(nullptr, &del, &deleted).ok());
}

}  // namespace
}  // namespace blockcsi
