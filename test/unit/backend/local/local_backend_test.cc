// LocalBackend's logic against the LIO exporter on a temp configfs tree: no
// daemon needed, so every rule of the interface is checked here; the same
// behaviour against a real tgtd is in test/integration/target.
#include "backend/local/local_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "backend/local/lio_exporter.h"
#include "common/metrics.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using testing::TempDir;
constexpr uint64_t kMiB = 1024 * 1024;
constexpr char kPrefix[] = "iqn.2026-11.io.blockcsi";
constexpr char kNodeA[] = "iqn.2026-11.io.blockcsi:node:a";

class LocalBackendTest : public ::testing::Test {
 protected:
  std::shared_ptr<LocalBackend> Open(FaultHook hook = nullptr) {
    LocalBackendOptions options;
    options.portals = {"127.0.0.1:3260"};
    options.iqn_prefix = kPrefix;
    options.reconcile_interval = std::chrono::milliseconds(0);
    options.fault_hook = std::move(hook);
    auto backend = LocalBackend::Open(pool_.path(), std::make_shared<LioExporter>(configfs_.path()), options);
    EXPECT_TRUE(backend.ok()) << backend.status().ToString();
    return backend.ok() ? *backend : nullptr;
  }
  std::string TargetDir(const std::string& iqn) { return configfs_.Join("target/iscsi/" + iqn); }
  std::vector<std::string> Files(const std::string& sub) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(pool_.Join(sub))) out.push_back(e.path().string());
    return out;
  }

  TempDir pool_;
  TempDir configfs_;
};

CreateVolumeSpec Spec(const std::string& name, uint64_t size) {
  CreateVolumeSpec spec;
  spec.name = name;
  spec.size_bytes = size;
  return spec;
}

TEST_F(LocalBackendTest, CreateIsIdempotentByNameAndConflictsAreAlreadyExists) {
  auto b = Open();
  auto v = b->CreateVolume(Spec("pvc-1", 16 * kMiB));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->id.rfind("vol-", 0), 0u);
  EXPECT_EQ(v->target_iqn, std::string(kPrefix) + ":" + v->id);
  EXPECT_EQ(v->lun, 1);
  EXPECT_EQ(v->portals, std::vector<std::string>{"127.0.0.1:3260"});
  EXPECT_FALSE(v->serial.empty());
  EXPECT_EQ(v->wwn.size(), 32u);
  EXPECT_TRUE(std::filesystem::is_directory(TargetDir(v->target_iqn) + "/tpgt_1/lun/lun_1"));

  auto again = b->CreateVolume(Spec("pvc-1", 16 * kMiB));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id, v->id);

  auto other_size = b->CreateVolume(Spec("pvc-1", 32 * kMiB));
  EXPECT_EQ(other_size.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(other_size.status().message().find("pvc-1"), std::string::npos);
  CreateVolumeSpec other_source = Spec("pvc-1", 16 * kMiB);
  other_source.source = {ContentSource::Kind::kVolume, v->id};
  EXPECT_EQ(b->CreateVolume(other_source).status().code(), StatusCode::kAlreadyExists);

  EXPECT_EQ(b->CreateVolume(Spec("pvc-odd", kMiB + 1)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(b->CreateVolume(Spec("", kMiB)).status().code(), StatusCode::kInvalidArgument);
}

// A source the backend cannot act on is the caller's mistake, refused
// before anything is made: it used to become a blank volume (or, for a
// kind out of the enum, a copy of whatever the id named) whose record kept
// the source id.
TEST_F(LocalBackendTest, AContentSourceOfNoKnownKindIsInvalidArgumentAndMakesNothing) {
  auto b = Open();
  auto v = b->CreateVolume(Spec("pvc-source", 4 * kMiB));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  CreateVolumeSpec unknown_kind = Spec("pvc-unknown-kind", 4 * kMiB);
  unknown_kind.source = {static_cast<ContentSource::Kind>(7), v->id};
  CreateVolumeSpec id_without_kind = Spec("pvc-id-without-kind", 4 * kMiB);
  id_without_kind.source = {ContentSource::Kind::kNone, v->id};
  CreateVolumeSpec kind_without_id = Spec("pvc-kind-without-id", 4 * kMiB);
  kind_without_id.source = {ContentSource::Kind::kSnapshot, ""};
  for (const auto& spec : {unknown_kind, id_without_kind, kind_without_id}) {
    SCOPED_TRACE(spec.name);
    auto created = b->CreateVolume(spec);
    EXPECT_EQ(created.status().code(), StatusCode::kInvalidArgument) << created.status().ToString();
    EXPECT_NE(created.status().message().find(spec.name), std::string::npos) << created.status().ToString();
  }
  auto listed = b->ListVolumes("", 0);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->items.size(), 1u);
  EXPECT_EQ(listed->items[0].id, v->id);
  EXPECT_EQ(Files("images").size(), 1u);
  size_t targets = 0;
  for (const auto& e : std::filesystem::directory_iterator(configfs_.Join("target/iscsi"))) {
    targets += e.path().filename().string().rfind(kPrefix, 0) == 0;
  }
  EXPECT_EQ(targets, 1u);
}

TEST_F(LocalBackendTest, IdsThatAreNotOursAreNotFoundOrOkNeverPaths) {
  auto b = Open();
  const std::string evil = "../../etc";
  EXPECT_EQ(b->GetVolume(evil).status().code(), StatusCode::kNotFound);
  EXPECT_NE(b->GetVolume(evil).status().message().find("../../etc"), std::string::npos);
  EXPECT_EQ(b->ExpandVolume(evil, kMiB).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(b->GrantAccess(evil, {kNodeA, "a", false, "c", {}}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(b->CheckVolume(evil).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(b->CreateSnapshot(evil, "s").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(b->GetSnapshot(evil).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(b->DeleteVolume(evil).ok());
  EXPECT_TRUE(b->RevokeAccess(evil, kNodeA).ok());
  EXPECT_TRUE(b->DeleteSnapshot(evil).ok());
  CreateVolumeSpec from_evil = Spec("pvc-e", kMiB);
  from_evil.source = {ContentSource::Kind::kSnapshot, evil};
  EXPECT_EQ(b->CreateVolume(from_evil).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(b->GetVolume("vol-0000000000000000").status().code(), StatusCode::kNotFound);
}

TEST_F(LocalBackendTest, GrantRevokeDeleteRulesAndIdempotency) {
  auto b = Open();
  auto v = b->CreateVolume(Spec("pvc-g", 8 * kMiB));
  ASSERT_TRUE(v.ok());
  AccessGrant grant{kNodeA, "a", false, "rwo-mount", {}};
  ASSERT_TRUE(b->GrantAccess(v->id, grant).ok());
  auto twice = b->GrantAccess(v->id, grant);
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(twice->grants.size(), 1u);
  AccessGrant different = grant;
  different.read_only = true;
  EXPECT_EQ(b->GrantAccess(v->id, different).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(b->GrantAccess(v->id, {"ALL", "x", false, "c", {}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(b->GrantAccess(v->id, {"192.168.0.1", "x", false, "c", {}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::filesystem::is_directory(TargetDir(v->target_iqn) + "/tpgt_1/acls/" + kNodeA));

  auto del = b->DeleteVolume(v->id);
  EXPECT_EQ(del.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(del.message().find(v->id), std::string::npos);

  ASSERT_TRUE(b->RevokeAccess(v->id, kNodeA).ok());
  ASSERT_TRUE(b->RevokeAccess(v->id, kNodeA).ok());
  EXPECT_FALSE(std::filesystem::exists(TargetDir(v->target_iqn) + "/tpgt_1/acls/" + kNodeA));
  EXPECT_TRUE(b->GetVolume(v->id)->grants.empty());

  ASSERT_TRUE(b->DeleteVolume(v->id).ok());
  ASSERT_TRUE(b->DeleteVolume(v->id).ok());
  EXPECT_EQ(b->GetVolume(v->id).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(TargetDir(v->target_iqn)));
  EXPECT_TRUE(Files("images").empty());
}

// The agent's GetVolume and ListVolumes carry what the image really takes
// beside its size, and the pool's metrics say the same per volume.
TEST_F(LocalBackendTest, VolumesReportAllocatedBytesBesideTheirSize) {
  auto b = Open();
  auto v = b->CreateVolume(Spec("pvc-alloc", 16 * kMiB));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_LT(b->GetVolume(v->id)->allocated_bytes, kMiB) << "a new image is sparse";
  {
    std::ofstream image(pool_.Join("images/" + v->id + ".img"), std::ios::in | std::ios::out | std::ios::binary);
    std::string data(4 * kMiB, 'x');
    image.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  auto got = b->GetVolume(v->id);
  ASSERT_TRUE(got.ok());
  EXPECT_GE(got->allocated_bytes, 4 * kMiB);
  EXPECT_EQ(got->size_bytes, 16 * kMiB);
  auto page = b->ListVolumes("", 0);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->items.size(), 1u);
  EXPECT_EQ(page->items[0].allocated_bytes, got->allocated_bytes);
  MetricsRegistry registry;
  b->CollectPoolMetrics(registry);
  std::string text = registry.Render();
  EXPECT_NE(text.find("blockcsi_target_volume_allocated_bytes{pool=\"" + pool_.path() + "\",volume=\"" + v->id +
                      "\"} " + std::to_string(got->allocated_bytes)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("blockcsi_target_pool_allocated_bytes{pool=\"" + pool_.path() + "\"} " +
                      std::to_string(got->allocated_bytes)),
            std::string::npos)
      << text;
  ASSERT_TRUE(b->DeleteVolume(v->id).ok());
}

TEST_F(LocalBackendTest, ExpandGrowsNeverShrinks) {
  auto b = Open();
  auto v = b->CreateVolume(Spec("pvc-x", 8 * kMiB));
  ASSERT_TRUE(v.ok());
  auto grown = b->ExpandVolume(v->id, 16 * kMiB);
  ASSERT_TRUE(grown.ok());
  EXPECT_EQ(grown->size_bytes, 16 * kMiB);
  EXPECT_EQ(std::filesystem::file_size(pool_.Join("images/" + v->id + ".img")), 16 * kMiB);
  EXPECT_TRUE(b->ExpandVolume(v->id, 16 * kMiB).ok());
  EXPECT_EQ(b->ExpandVolume(v->id, 8 * kMiB).status().code(), StatusCode::kOutOfRange);
}

TEST_F(LocalBackendTest, ListIsPagedInStableOrder) {
  auto b = Open();
  std::set<std::string> ids;
  for (int i = 0; i < 7; ++i) ids.insert(b->CreateVolume(Spec("pvc-" + std::to_string(i), kMiB))->id);
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    auto page = b->ListVolumes(token, 3);
    ASSERT_TRUE(page.ok());
    for (const auto& v : page->items) seen.push_back(v.id);
    token = page->next_token;
    ++pages;
  } while (!token.empty());
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, std::vector<std::string>(ids.begin(), ids.end()));
  EXPECT_EQ(b->ListVolumes("bogus", 3).status().code(), StatusCode::kAborted);
  EXPECT_EQ(b->ListVolumes("", 0)->items.size(), 7u);
}

TEST_F(LocalBackendTest, SnapshotsAndClones) {
  auto b = Open();
  auto v = b->CreateVolume(Spec("pvc-s", 8 * kMiB));
  ASSERT_TRUE(v.ok());
  auto s = b->CreateSnapshot(v->id, "snap-a");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->source_volume_id, v->id);
  EXPECT_EQ(b->CreateSnapshot(v->id, "snap-a")->id, s->id);
  auto v2 = b->CreateVolume(Spec("pvc-s2", 8 * kMiB));
  EXPECT_EQ(b->CreateSnapshot(v2->id, "snap-a").status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(b->CreateSnapshot("vol-00000000000000ff", "snap-b").status().code(), StatusCode::kNotFound);

  CreateVolumeSpec restore = Spec("pvc-restore", 16 * kMiB);
  restore.source = {ContentSource::Kind::kSnapshot, s->id};
  auto r = b->CreateVolume(restore);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source.id, s->id);
  CreateVolumeSpec clone = Spec("pvc-clone", 8 * kMiB);
  clone.source = {ContentSource::Kind::kVolume, v->id};
  ASSERT_TRUE(b->CreateVolume(clone).ok());
  CreateVolumeSpec too_small = Spec("pvc-small", 4 * kMiB);
  too_small.source = {ContentSource::Kind::kVolume, v->id};
  EXPECT_EQ(b->CreateVolume(too_small).status().code(), StatusCode::kOutOfRange);
  CreateVolumeSpec missing = Spec("pvc-missing", 8 * kMiB);
  missing.source = {ContentSource::Kind::kSnapshot, "snap-00000000000000ff"};
  EXPECT_EQ(b->CreateVolume(missing).status().code(), StatusCode::kNotFound);

  EXPECT_EQ(b->ListSnapshots(v->id, "", 0)->items.size(), 1u);
  EXPECT_EQ(b->ListSnapshots(v2->id, "", 0)->items.size(), 0u);
  ASSERT_TRUE(b->DeleteSnapshot(s->id).ok());
  ASSERT_TRUE(b->DeleteSnapshot(s->id).ok());
  EXPECT_EQ(b->GetSnapshot(s->id).status().code(), StatusCode::kNotFound);
}

TEST_F(LocalBackendTest, ConcurrentCreatesOfDistinctAndOfTheSameName) {
  auto b = Open();
  std::vector<std::thread> threads;
  std::vector<std::string> distinct(50), same(50);
  std::atomic<int> failures{0};
  for (int i = 0; i < 50; ++i) {
    threads.emplace_back([&, i] {
      auto v = b->CreateVolume(Spec("pvc-distinct-" + std::to_string(i), kMiB));
      if (v.ok())
        distinct[i] = v->id;
      else
        ++failures;
    });
    threads.emplace_back([&, i] {
      auto v = b->CreateVolume(Spec("pvc-same", kMiB));
      if (v.ok())
        same[i] = v->id;
      else
        ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(std::set<std::string>(distinct.begin(), distinct.end()).size(), 50u);
  EXPECT_EQ(std::set<std::string>(same.begin(), same.end()).size(), 1u);
  EXPECT_EQ(b->ListVolumes("", 0)->items.size(), 51u);
  EXPECT_EQ(Files("images").size(), 51u);
}

// An error return between steps, then a restart (a real kill -9 at these steps: test/fault).
TEST_F(LocalBackendTest, ErrorBetweenStepsThenRestartShowsWholeObjectsOrNothing) {
  for (const char* step :
       {"controller.create.image-staged", "controller.create.image-placed", "controller.create.after-record"}) {
    SCOPED_TRACE(step);
    TempDir pool;
    TempDir configfs;
    LocalBackendOptions options;
    options.portals = {"127.0.0.1:3260"};
    options.reconcile_interval = std::chrono::milliseconds(0);
    options.fault_hook = [step](std::string_view s) { return s == step ? Aborted("injected fault") : OkStatus(); };
    {
      auto b = LocalBackend::Open(pool.path(), std::make_shared<LioExporter>(configfs.path()), options);
      ASSERT_TRUE(b.ok());
      EXPECT_EQ((*b)->CreateVolume(Spec("pvc-crash", 4 * kMiB)).status().code(), StatusCode::kAborted);
    }
    options.fault_hook = nullptr;
    auto b = LocalBackend::Open(pool.path(), std::make_shared<LioExporter>(configfs.path()), options);
    ASSERT_TRUE(b.ok());
    auto list = (*b)->ListVolumes("", 0);
    ASSERT_TRUE(list.ok());
    size_t images = 0;
    for (const auto& e : std::filesystem::directory_iterator(pool.path() + "/images")) images += e.exists();
    if (list->items.empty()) {
      EXPECT_EQ(images, 0u) << "a half-made image is left";
    } else {
      // Committed before the fault: it must be whole, and exported by the restart's reconcile.
      ASSERT_EQ(list->items.size(), 1u);
      EXPECT_EQ(images, 1u);
      EXPECT_TRUE(std::filesystem::is_directory(configfs.path() + "/target/iscsi/" + list->items[0].target_iqn +
                                                "/tpgt_1/lun/lun_1"));
      EXPECT_EQ((*b)->CreateVolume(Spec("pvc-crash", 4 * kMiB))->id, list->items[0].id);
    }
  }
}

// Issue #15: a create or a grant that fails with a final code takes back
// what it made (the provisioner and the attacher do not come back for it);
// an uncertain failure (above: ABORTED) keeps it for the retry.
TEST_F(LocalBackendTest, FinalFailureOfCreateOrGrantLeavesNothing) {
  std::string failing;
  auto b = Open([&failing](std::string_view s) { return s == failing ? Internal("injected failure") : OkStatus(); });
  failing = "controller.create.after-record";
  auto created = b->CreateVolume(Spec("pvc-final", 4 * kMiB));
  EXPECT_EQ(created.status().code(), StatusCode::kInternal);
  EXPECT_TRUE(Files("images").empty()) << "the image stayed";
  EXPECT_TRUE(Files("volumes").empty()) << "the record stayed";
  auto list = b->ListVolumes("", 0);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->items.empty());
  EXPECT_FALSE(std::filesystem::exists(configfs_.Join("target/iscsi")) &&
               !std::filesystem::is_empty(configfs_.Join("target/iscsi")))
      << "an export stayed";

  failing = "";
  auto v = b->CreateVolume(Spec("pvc-final", 4 * kMiB));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  failing = "controller.publish.after-grant-record";
  AccessGrant grant{kNodeA, "a", false, "rwo-mount", {}};
  EXPECT_EQ(b->GrantAccess(v->id, grant).status().code(), StatusCode::kInternal);
  EXPECT_TRUE(b->GetVolume(v->id)->grants.empty()) << "the grant record stayed";
  EXPECT_FALSE(std::filesystem::exists(TargetDir(v->target_iqn) + "/tpgt_1/acls/" + kNodeA)) << "the ACL stayed";
  failing = "";
  ASSERT_TRUE(b->GrantAccess(v->id, grant).ok()) << "a later publish works";
}

TEST_F(LocalBackendTest, ErrorInDeleteThenRestartFinishesWithoutHalfVolume) {
  TempDir pool;
  TempDir configfs;
  LocalBackendOptions options;
  options.reconcile_interval = std::chrono::milliseconds(0);
  std::string id;
  {
    options.fault_hook = [](std::string_view s) {
      return s == "controller.delete.after-unexport" ? Aborted("fault") : OkStatus();
    };
    auto b = LocalBackend::Open(pool.path(), std::make_shared<LioExporter>(configfs.path()), options);
    ASSERT_TRUE(b.ok());
    id = (*b)->CreateVolume(Spec("pvc-d", kMiB))->id;
    EXPECT_EQ((*b)->DeleteVolume(id).code(), StatusCode::kAborted);
  }
  options.fault_hook = nullptr;
  auto b = LocalBackend::Open(pool.path(), std::make_shared<LioExporter>(configfs.path()), options);
  ASSERT_TRUE(b.ok());
  // Still a whole volume (record + image, and re-exported): the delete can be retried.
  ASSERT_TRUE((*b)->GetVolume(id).ok());
  ASSERT_TRUE((*b)->DeleteVolume(id).ok());
  EXPECT_EQ((*b)->GetVolume(id).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace blockcsi
