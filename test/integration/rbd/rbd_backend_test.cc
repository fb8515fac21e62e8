// RbdBackend against a real single-node Ceph (hack/ceph-cluster.sh): root and
// the ceph packages, else skipped with the reason. One cluster per test
// binary, or the one ctest's rbd_cluster fixture started (BLOCKCSI_CEPH_DIR).
// The "nodes" here are plain librados/librbd clients of the test's own.
// Each case deletes what it made; TearDown asserts with the shared leak
// checker, before it cleans, that the pool holds no image or snapshot it did
// not hold before, and a refused create or grant is checked right after the
// call (issue #22). The checker reads the whole shared pool, so every test
// of this binary runs alone (RUN_SERIAL in CMakeLists.txt).
#include "backend/rbd/rbd_backend.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "contract/initiator.h"
#include "support/ceph_client.h"
#include "support/ceph_test_cluster.h"
#include "support/rbd_backend_env.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using ::blockcsi::testing::ChildProcess;
using ::blockcsi::testing::IsRoot;
using ::blockcsi::testing::ReadFileOrEmpty;
using ::blockcsi::testing::TempDir;

constexpr uint64_t kMiB = 1ULL << 20;

using Client = testing::CephClient;  // a "node" (or an admin's view)

class RbdBackendTest : public testing::CephSuiteTest {
 protected:
  void SetUp() override {
    CephSuiteTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    options_ = testing::RbdBackendOptionsFor(env_);
    options_.topology = {{"topology.blockcsi.io/ceph", "test"}};
    auto backend = MakeRbdBackend(options_);
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = *backend;
    baseline_ = testing::TakeLeakSnapshot(PoolLeakScope());
    // A pool the checker cannot read would make every later check vacuous.
    ASSERT_TRUE(baseline_.unreadable.empty())
        << testing::DescribeItems({baseline_.unreadable.begin(), baseline_.unreadable.end()});
    have_baseline_ = true;
  }

  void TearDown() override {
    // The case's own deletes ran: anything new in the pool is a leak, asserted
    // before the fallback below removes it.
    if (have_baseline_) {
      EXPECT_TRUE(
          testing::NothingLeftSince(baseline_, PoolLeakScope(), "the test's own deletes, before the fixture cleans"));
    }
    // Leave the shared cluster as we found it, even after a failure.
    if (backend_ == nullptr) return;
    for (const auto& id : snapshots_) (void)backend_->DeleteSnapshot(id);
    for (auto it = volumes_.rbegin(); it != volumes_.rend(); ++it) {
      auto record = backend_->GetVolume(*it);
      if (record.ok()) {
        for (const auto& g : record->grants) (void)backend_->RevokeAccess(*it, g.initiator_iqn);
      }
      (void)backend_->DeleteVolume(*it);
    }
  }

  // A test-unique name, so tests sharing one cluster never collide.
  std::string Unique(const std::string& what) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return std::string(info->name()) + "-" + what + "-" + std::to_string(::getpid());
  }

  StatusOr<VolumeRecord> Create(const std::string& name, uint64_t size, ContentSource source = {}) {
    CreateVolumeSpec spec;
    spec.name = name;
    spec.size_bytes = size;
    spec.source = source;
    spec.parameters = {{"fsType", "ext4"}};
    auto record = backend_->CreateVolume(spec);
    if (record.ok()) volumes_.push_back(record->id);
    return record;
  }

  std::unique_ptr<Client> AdminClient() {
    return std::make_unique<Client>(env_["CEPH_CONF"], "admin", env_["CEPH_KEYRING"], env_["RBD_POOL"]);
  }

  static AccessGrant GrantFor(const std::string& node, const std::string& capability = "SINGLE_NODE_WRITER/block") {
    AccessGrant grant;
    grant.node_id = node;
    grant.initiator_iqn = InitiatorIqnForNode(node);
    grant.capability = capability;
    return grant;
  }

  // The pool's images and snapshots, and the metadata (grants) of `images`.
  testing::LeakScope ScopeWithMetadataOf(const std::vector<std::string>& images) const {
    testing::LeakScope scope = PoolLeakScope();
    for (const auto& image : images) scope.rbd_metadata_images.push_back(options_.pool + "/" + image);
    return scope;
  }

  RbdBackendOptions options_;
  testing::LeakSnapshot baseline_;
  bool have_baseline_ = false;
  std::shared_ptr<VolumeBackend> backend_;
  std::vector<std::string> volumes_;
  std::vector<std::string> snapshots_;
};

// Pure parsing, no cluster: runs without root too.
TEST(RbdIdsTest, OnlyWellFormedVolumeIdsParse) {
  auto ref = ParseRbdVolumeId("rbd.my-pool_1.csi-vol-0123456789abcdef0123456789abcdef");
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->pool, "my-pool_1");
  EXPECT_EQ(ref->image, "csi-vol-0123456789abcdef0123456789abcdef");
  for (const std::string& id : std::vector<std::string>{
           "", "rbd", "rbd..csi-vol-0123456789abcdef0123456789abcdef", "rbd.p.csi-vol-0123456789abcdef0123456789abcde",
           "rbd.p.csi-vol-0123456789abcdef0123456789abcdef0", "rbd.p.csi-snap-0123456789abcdef0123456789abcdef",
           "rbd.p/../x.csi-vol-0123456789abcdef0123456789abcdef", "RBD.p.csi-vol-0123456789abcdef0123456789abcdef",
           "rbd.p.csi-vol-0123456789abcdef0123456789abcdef@csi-snap-0123456789abcdef0123456789abcdef",
           "rbd." + std::string(41, 'p') + ".csi-vol-0123456789abcdef0123456789abcdef"}) {
    EXPECT_FALSE(ParseRbdVolumeId(id).has_value()) << id;
  }
}

TEST(RbdIdsTest, SecretsNeedBothKeysAndNeverEchoTheKey) {
  const std::string key = "AQDsecretsecretsecretsecretsecretsecret==";
  RbdBackendOptions options;
  options.keyring = "/etc/ceph/keyring";
  EXPECT_TRUE(ApplyRbdSecrets({}, &options).ok());
  EXPECT_EQ(options.keyring, "/etc/ceph/keyring") << "no secrets: options unchanged";
  Status st = ApplyRbdSecrets({{rbd_secret_keys::kUserKey, key}}, &options);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.ToString().find(key), std::string::npos);
  st = ApplyRbdSecrets({{rbd_secret_keys::kUserId, "client.admin"}, {rbd_secret_keys::kUserKey, key}}, &options);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.ToString().find(key), std::string::npos);
  ASSERT_TRUE(ApplyRbdSecrets({{rbd_secret_keys::kUserId, "csi"}, {rbd_secret_keys::kUserKey, key}}, &options).ok());
  EXPECT_EQ(options.ceph_user, "csi");
  EXPECT_EQ(options.key, key);
  EXPECT_TRUE(options.keyring.empty()) << "a key from a secret replaces the keyring";
}

TEST_F(RbdBackendTest, CreateIsIdempotentAndOtherSizeIsAlreadyExists) {
  const std::string name = Unique("pvc");
  auto first = Create(name, 8 * kMiB);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->id.starts_with("rbd." + options_.pool + ".csi-vol-")) << first->id;
  EXPECT_LE(first->id.size(), 128u);
  EXPECT_EQ(first->name, name);
  EXPECT_EQ(first->size_bytes, 8 * kMiB);
  EXPECT_EQ(first->transport, "rbd");
  EXPECT_EQ(first->parameters.at("fsType"), "ext4");
  EXPECT_EQ(first->topology, options_.topology);
  EXPECT_EQ(first->transport_params.at(rbd_params::kPool), options_.pool);
  EXPECT_FALSE(first->transport_params.at(rbd_params::kImageId).empty());
  EXPECT_FALSE(first->transport_params.at(rbd_params::kMonitors).empty());
  EXPECT_EQ(first->transport_params.at(rbd_params::kUser), options_.ceph_user);
  EXPECT_GT(first->created_unix_seconds, 0);

  auto again = Create(name, 8 * kMiB);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id, first->id);
  EXPECT_EQ(again->transport_params.at(rbd_params::kImageId), first->transport_params.at(rbd_params::kImageId));

  const testing::LeakSnapshot before_refusals = testing::TakeLeakSnapshot(PoolLeakScope());
  auto other = Create(name, 16 * kMiB);
  EXPECT_EQ(other.status().code(), StatusCode::kAlreadyExists) << other.status().ToString();

  CreateVolumeSpec odd;
  odd.name = Unique("odd");
  odd.size_bytes = kMiB + 1;
  EXPECT_EQ(backend_->CreateVolume(odd).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(testing::NothingLeftSince(before_refusals, PoolLeakScope(), "the refused creates"));

  auto got = backend_->GetVolume(first->id);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->name, name);

  ASSERT_TRUE(backend_->DeleteVolume(first->id).ok());
  EXPECT_TRUE(backend_->DeleteVolume(first->id).ok()) << "delete must be idempotent";
  EXPECT_EQ(backend_->GetVolume(first->id).status().code(), StatusCode::kNotFound);
  auto health = backend_->CheckVolume(first->id);
  ASSERT_TRUE(health.ok());
  EXPECT_TRUE(health->abnormal);
}

TEST_F(RbdBackendTest, MalformedIdsAreNotOurs) {
  for (const std::string id : {"", "rbd.", "rbd.rbd.", "rbd.rbd.csi-vol-../../etc", "rbd.rbd/x.csi-vol-0",
                               "rbd.r.b.csi-vol-0123456789abcdef0123456789abcdef",
                               "rbd.rbd.csi-vol-0123456789ABCDEF0123456789ABCDEF", "tgt.pool.vol"}) {
    EXPECT_FALSE(ParseRbdVolumeId(id).has_value()) << id;
    EXPECT_TRUE(backend_->DeleteVolume(id).ok()) << id;
    EXPECT_EQ(backend_->GetVolume(id).status().code(), StatusCode::kNotFound) << id;
    EXPECT_EQ(backend_->ExpandVolume(id, 8 * kMiB).status().code(), StatusCode::kNotFound) << id;
    EXPECT_TRUE(backend_->RevokeAccess(id, InitiatorIqnForNode("node-a")).ok()) << id;
    EXPECT_TRUE(backend_->DeleteSnapshot(id + "@csi-snap-0123456789abcdef0123456789abcdef").ok()) << id;
  }
  // Another pool's well-formed id is not ours either.
  EXPECT_EQ(backend_->GetVolume("rbd.otherpool.csi-vol-0123456789abcdef0123456789abcdef").status().code(),
            StatusCode::kNotFound);
}

TEST_F(RbdBackendTest, ExpandGrowsAndNeverShrinks) {
  auto vol = Create(Unique("pvc"), 8 * kMiB);
  ASSERT_TRUE(vol.ok()) << vol.status().ToString();
  auto grown = backend_->ExpandVolume(vol->id, 24 * kMiB);
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  EXPECT_EQ(grown->size_bytes, 24 * kMiB);
  auto same = backend_->ExpandVolume(vol->id, 24 * kMiB);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->size_bytes, 24 * kMiB);
  EXPECT_EQ(backend_->ExpandVolume(vol->id, 8 * kMiB).status().code(), StatusCode::kOutOfRange);
  auto got = backend_->GetVolume(vol->id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->size_bytes, 24 * kMiB);
  EXPECT_TRUE(backend_->DeleteVolume(vol->id).ok());
}

TEST_F(RbdBackendTest, ListVolumesPaginates) {
  std::set<std::string> mine;
  for (int i = 0; i < 3; ++i) {
    auto vol = Create(Unique("pvc" + std::to_string(i)), 4 * kMiB);
    ASSERT_TRUE(vol.ok()) << vol.status().ToString();
    mine.insert(vol->id);
  }
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    auto page = backend_->ListVolumes(token, 1);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    ASSERT_LE(page->items.size(), 1u);
    for (const auto& v : page->items) seen.push_back(v.id);
    token = page->next_token;
    ASSERT_LT(++pages, 1000) << "pagination does not end";
  } while (!token.empty());
  std::set<std::string> unique(seen.begin(), seen.end());
  EXPECT_EQ(unique.size(), seen.size()) << "a volume was listed twice";
  for (const auto& id : mine) EXPECT_TRUE(unique.contains(id)) << id;

  auto all = backend_->ListVolumes("", 0);
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->next_token.empty());
  EXPECT_GE(all->items.size(), 3u);

  EXPECT_EQ(backend_->ListVolumes("not-a-token", 1).status().code(), StatusCode::kAborted);
  EXPECT_EQ(backend_->ListVolumes("csi-vol-zz", 1).status().code(), StatusCode::kAborted);
  for (const auto& id : mine) EXPECT_TRUE(backend_->DeleteVolume(id).ok()) << id;
}

TEST_F(RbdBackendTest, SnapshotCreateListDelete) {
  auto vol = Create(Unique("pvc"), 8 * kMiB);
  ASSERT_TRUE(vol.ok()) << vol.status().ToString();
  auto other = Create(Unique("other"), 8 * kMiB);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  const std::string name = Unique("snap");

  auto snap = backend_->CreateSnapshot(vol->id, name);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  snapshots_.push_back(snap->id);
  EXPECT_TRUE(snap->id.starts_with(vol->id + "@csi-snap-")) << snap->id;
  EXPECT_LE(snap->id.size(), 128u);
  EXPECT_EQ(snap->name, name);
  EXPECT_EQ(snap->source_volume_id, vol->id);
  EXPECT_EQ(snap->size_bytes, 8 * kMiB);
  EXPECT_TRUE(snap->ready_to_use);
  EXPECT_GT(snap->created_unix_seconds, 0);

  auto again = backend_->CreateSnapshot(vol->id, name);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id, snap->id);
  const testing::LeakSnapshot before_refusals = testing::TakeLeakSnapshot(PoolLeakScope());
  EXPECT_EQ(backend_->CreateSnapshot(other->id, name).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(backend_->CreateSnapshot("rbd.rbd.csi-vol-0123456789abcdef0123456789abcdef", Unique("x")).status().code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(testing::NothingLeftSince(before_refusals, PoolLeakScope(), "the refused snapshots"));

  auto got = backend_->GetSnapshot(snap->id);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->name, name);

  auto listed = backend_->ListSnapshots(vol->id, "", 0);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->items.size(), 1u);
  EXPECT_EQ(listed->items[0].id, snap->id);
  auto everywhere = backend_->ListSnapshots("", "", 0);
  ASSERT_TRUE(everywhere.ok());
  EXPECT_TRUE(std::any_of(everywhere->items.begin(), everywhere->items.end(),
                          [&](const SnapshotRecord& s) { return s.id == snap->id; }));
  EXPECT_EQ(backend_->ListSnapshots("", "garbage", 1).status().code(), StatusCode::kAborted);

  Status refused = backend_->DeleteVolume(vol->id);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
  EXPECT_NE(refused.message().find(snap->id), std::string::npos) << refused.ToString();

  ASSERT_TRUE(backend_->DeleteSnapshot(snap->id).ok());
  EXPECT_TRUE(backend_->DeleteSnapshot(snap->id).ok()) << "delete must be idempotent";
  EXPECT_EQ(backend_->GetSnapshot(snap->id).status().code(), StatusCode::kNotFound);
  listed = backend_->ListSnapshots(vol->id, "", 0);
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->items.empty());
  // With the snapshot gone, the name is free for another volume.
  auto moved = backend_->CreateSnapshot(other->id, name);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  snapshots_.push_back(moved->id);
  EXPECT_TRUE(backend_->DeleteVolume(vol->id).ok());
  EXPECT_TRUE(backend_->DeleteSnapshot(moved->id).ok());
  EXPECT_TRUE(backend_->DeleteVolume(other->id).ok());
}

TEST_F(RbdBackendTest, RestoreFromSnapshotHasTheSnapshotsBytes) {
  auto vol = Create(Unique("pvc"), 8 * kMiB);
  ASSERT_TRUE(vol.ok()) << vol.status().ToString();
  const std::string image = vol->transport_params.at(rbd_params::kImage);
  const std::string before(64 * 1024, 'A');
  auto admin = AdminClient();
  ASSERT_EQ(admin->error(), 0);
  ASSERT_EQ(admin->OpenImage(image), 0);
  ASSERT_EQ(admin->Write(kMiB, before), 0);
  admin->CloseImage();

  auto snap = backend_->CreateSnapshot(vol->id, Unique("snap"));
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  snapshots_.push_back(snap->id);
  // Later writes to the source must not show through the restore.
  ASSERT_EQ(admin->OpenImage(image), 0);
  ASSERT_EQ(admin->Write(kMiB, std::string(64 * 1024, 'B')), 0);
  admin->CloseImage();

  const testing::LeakSnapshot before_refusals = testing::TakeLeakSnapshot(PoolLeakScope());
  auto small = Create(Unique("small"), 4 * kMiB, {ContentSource::Kind::kSnapshot, snap->id});
  EXPECT_EQ(small.status().code(), StatusCode::kOutOfRange);
  auto missing = Create(Unique("missing"), 8 * kMiB,
                        {ContentSource::Kind::kSnapshot, vol->id + "@csi-snap-0123456789abcdef0123456789abcdef"});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(testing::NothingLeftSince(before_refusals, PoolLeakScope(), "the refused restores"));

  const ContentSource source{ContentSource::Kind::kSnapshot, snap->id};
  const std::string name = Unique("restored");
  auto restored = Create(name, 16 * kMiB, source);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->size_bytes, 16 * kMiB);
  EXPECT_EQ(restored->source, source);
  auto again = Create(name, 16 * kMiB, source);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id, restored->id);
  EXPECT_EQ(Create(name, 16 * kMiB).status().code(), StatusCode::kAlreadyExists) << "other source";

  const std::string restored_image = restored->transport_params.at(rbd_params::kImage);
  ASSERT_EQ(admin->OpenImage(restored_image), 0);
  EXPECT_EQ(admin->Read(kMiB, before.size()), before);
  admin->CloseImage();

  // Deleting the snapshot flattens the restored volume first: its bytes stay.
  ASSERT_TRUE(backend_->DeleteSnapshot(snap->id).ok());
  ASSERT_EQ(admin->OpenImage(restored_image), 0);
  EXPECT_EQ(admin->Read(kMiB, before.size()), before);
  admin->CloseImage();
  EXPECT_TRUE(backend_->DeleteVolume(vol->id).ok());
  EXPECT_TRUE(backend_->DeleteVolume(restored->id).ok());
}

TEST_F(RbdBackendTest, CloneFromVolumeHasItsBytesAndLeavesNoSnapshot) {
  auto vol = Create(Unique("pvc"), 8 * kMiB);
  ASSERT_TRUE(vol.ok()) << vol.status().ToString();
  const std::string image = vol->transport_params.at(rbd_params::kImage);
  const std::string data(32 * 1024, 'C');
  auto admin = AdminClient();
  ASSERT_EQ(admin->error(), 0);
  ASSERT_EQ(admin->OpenImage(image), 0);
  ASSERT_EQ(admin->Write(3 * kMiB, data), 0);
  admin->CloseImage();

  auto clone = Create(Unique("clone"), 8 * kMiB, {ContentSource::Kind::kVolume, vol->id});
  ASSERT_TRUE(clone.ok()) << clone.status().ToString();
  EXPECT_EQ(clone->source.kind, ContentSource::Kind::kVolume);
  ASSERT_EQ(admin->OpenImage(clone->transport_params.at(rbd_params::kImage)), 0);
  EXPECT_EQ(admin->Read(3 * kMiB, data.size()), data);
  admin->CloseImage();
  EXPECT_EQ(admin->SnapCount(image), 0) << "the temporary snapshot must be gone";
  const testing::LeakSnapshot before_refusal = testing::TakeLeakSnapshot(PoolLeakScope());
  EXPECT_EQ(Create(Unique("nosrc"), 8 * kMiB,
                   {ContentSource::Kind::kVolume, "rbd.rbd.csi-vol-0123456789abcdef0123456789abcdef"})
                .status()
                .code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(testing::NothingLeftSince(before_refusal, PoolLeakScope(), "the refused clone"));
  // The clone is independent: the source can go first.
  EXPECT_TRUE(backend_->DeleteVolume(vol->id).ok());
  EXPECT_TRUE(backend_->DeleteVolume(clone->id).ok());
}

TEST_F(RbdBackendTest, DeleteIsRefusedWhileAClientWatchesTheImage) {
  auto vol = Create(Unique("pvc"), 8 * kMiB);
  ASSERT_TRUE(vol.ok()) << vol.status().ToString();
  auto node = AdminClient();
  ASSERT_EQ(node->error(), 0);
  ASSERT_EQ(node->OpenImage(vol->transport_params.at(rbd_params::kImage)), 0);
  auto watchers = node->Watchers();
  ASSERT_EQ(watchers.size(), 1u);

  Status refused = backend_->DeleteVolume(vol->id);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
  EXPECT_NE(refused.message().find(watchers[0]), std::string::npos)
      << "the watcher's address should be named: " << refused.ToString();
  ASSERT_TRUE(backend_->GetVolume(vol->id).ok()) << "the image must survive the refused delete";

  node->CloseImage();
  EXPECT_TRUE(backend_->DeleteVolume(vol->id).ok());
}

TEST_F(RbdBackendTest, GrantIsRecordedAndDeleteRefusedWhilePublished) {
  auto vol = Create(Unique("pvc"), 8 * kMiB);
  ASSERT_TRUE(vol.ok()) << vol.status().ToString();
  auto granted = backend_->GrantAccess(vol->id, GrantFor("node-a"));
  ASSERT_TRUE(granted.ok()) << granted.status().ToString();
  ASSERT_EQ(granted->grants.size(), 1u);
  EXPECT_EQ(granted->grants[0].node_id, "node-a");
  EXPECT_EQ(granted->grants[0].initiator_iqn, InitiatorIqnForNode("node-a"));
  EXPECT_EQ(granted->grants[0].capability, "SINGLE_NODE_WRITER/block");
  EXPECT_TRUE(backend_->GrantAccess(vol->id, GrantFor("node-a")).ok()) << "same grant again is OK";
  // Refused grants write no metadata key (no grant, no fence record).
  const auto scope = ScopeWithMetadataOf({vol->transport_params.at(rbd_params::kImage)});
  const testing::LeakSnapshot before_refusals = testing::TakeLeakSnapshot(scope);
  EXPECT_EQ(backend_->GrantAccess(vol->id, GrantFor("node-a", "MULTI_NODE_READER_ONLY/mount")).status().code(),
            StatusCode::kAlreadyExists);
  AccessGrant chap = GrantFor("node-c");
  chap.chap.username = "u";
  chap.chap.password = "p";
  EXPECT_EQ(backend_->GrantAccess(vol->id, chap).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->GrantAccess(vol->id, GrantFor("Not_A_Node")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(testing::NothingLeftSince(before_refusals, scope, "the refused grants"));

  Status refused = backend_->DeleteVolume(vol->id);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
  EXPECT_NE(refused.message().find("node-a"), std::string::npos) << refused.ToString();

  ASSERT_TRUE(backend_->RevokeAccess(vol->id, InitiatorIqnForNode("node-a")).ok());
  EXPECT_TRUE(backend_->RevokeAccess(vol->id, InitiatorIqnForNode("node-a")).ok()) << "revoke is idempotent";
  auto got = backend_->GetVolume(vol->id);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->grants.empty());
  EXPECT_TRUE(backend_->DeleteVolume(vol->id).ok());
}

TEST_F(RbdBackendTest, RevokeFencesTheNodeAndTheNextNodeCanWrite) {
  auto vol = Create(Unique("pvc"), 8 * kMiB);
  ASSERT_TRUE(vol.ok()) << vol.status().ToString();
  const std::string image = vol->transport_params.at(rbd_params::kImage);
  auto admin = AdminClient();
  ASSERT_EQ(admin->error(), 0);

  ASSERT_TRUE(backend_->GrantAccess(vol->id, GrantFor("node-a")).ok());
  auto node_a = AdminClient();
  ASSERT_EQ(node_a->error(), 0);
  ASSERT_EQ(node_a->OpenImage(image), 0);
  ASSERT_EQ(node_a->Write(0, std::string(4096, 'a')), 0) << "node-a should write while published";
  auto a_addrs = node_a->Watchers();
  ASSERT_EQ(a_addrs.size(), 1u);
  const std::string a_addr = a_addrs[0];

  ASSERT_TRUE(backend_->RevokeAccess(vol->id, InitiatorIqnForNode("node-a")).ok());
  EXPECT_TRUE(admin->Blocklist().contains(a_addr)) << a_addr << " not blocklisted: " << admin->last_mon_status();
  EXPECT_LT(node_a->Write(0, std::string(4096, 'x')), 0) << "a fenced node must not write";

  ASSERT_TRUE(backend_->GrantAccess(vol->id, GrantFor("node-b")).ok());
  auto node_b = AdminClient();
  ASSERT_EQ(node_b->error(), 0);
  ASSERT_EQ(node_b->OpenImage(image), 0);
  ASSERT_EQ(node_b->Write(0, std::string(4096, 'b')), 0) << "the next node must be able to write";
  EXPECT_EQ(node_b->Read(0, 4096), std::string(4096, 'b'));
  auto b_addrs = node_b->Watchers();
  ASSERT_FALSE(b_addrs.empty());
  std::string b_addr;
  for (const auto& w : b_addrs) {
    if (w != a_addr) b_addr = w;
  }
  ASSERT_FALSE(b_addr.empty());
  node_a.reset();  // the fenced client goes away, as its node would restart it

  // node-a comes back: its old fence is lifted (its watch is long gone).
  ASSERT_TRUE(backend_->RevokeAccess(vol->id, InitiatorIqnForNode("node-b")).ok());
  EXPECT_TRUE(admin->Blocklist().contains(b_addr));
  ASSERT_TRUE(backend_->GrantAccess(vol->id, GrantFor("node-a")).ok());
  EXPECT_FALSE(admin->Blocklist().contains(a_addr)) << "node-a's fence should be lifted on its next grant";
  auto node_a2 = AdminClient();
  ASSERT_EQ(node_a2->OpenImage(image), 0);
  EXPECT_EQ(node_a2->Write(4096, std::string(4096, 'c')), 0);
  node_a2->CloseImage();
  node_b.reset();

  ASSERT_TRUE(backend_->RevokeAccess(vol->id, InitiatorIqnForNode("node-a")).ok());
  ASSERT_TRUE(backend_->DeleteVolume(vol->id).ok());
  // The image is gone, so are the fences for it.
  auto left = admin->Blocklist();
  EXPECT_FALSE(left.contains(b_addr)) << "fence of node-b outlived its image";
}

TEST_F(RbdBackendTest, CapacityAndHealth) {
  auto available = backend_->AvailableBytes({});
  ASSERT_TRUE(available.ok()) << available.status().ToString();
  EXPECT_GT(*available, 0u);
  EXPECT_LE(*available, 64ULL << 30) << "the test OSD is a 10 GiB sparse file";
  EXPECT_TRUE(backend_->Healthy().ok());
  EXPECT_EQ(backend_->Name(), "rbd");
  EXPECT_EQ(backend_->AllocationGranularity() % 4096, 0u);
}

TEST_F(RbdBackendTest, BadOptionsAreRefused) {
  RbdBackendOptions bad = options_;
  bad.pool = "no-such-pool";
  EXPECT_EQ(MakeRbdBackend(bad).status().code(), StatusCode::kInvalidArgument);
  bad = options_;
  bad.pool = "../etc";
  EXPECT_EQ(MakeRbdBackend(bad).status().code(), StatusCode::kInvalidArgument);
  bad = options_;
  bad.ceph_user = "client.admin";
  EXPECT_EQ(MakeRbdBackend(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(RbdBackendTest, KeyFromSecretsWorksAndIsNeverLoggedOrReturned) {
  const std::string key = testing::KeyFromKeyring(options_.keyring);
  ASSERT_FALSE(key.empty());
  std::string logs;
  SetLogCaptureForTest(&logs);
  InitLogging("blockcsi-test", LogFormat::kJson, LogLevel::kDebug);
  std::vector<std::string> texts;  // every message and field we hand out

  RbdBackendOptions from_secret = options_;
  from_secret.keyring.clear();
  Status half = ApplyRbdSecrets({{rbd_secret_keys::kUserKey, key}}, &from_secret);
  EXPECT_EQ(half.code(), StatusCode::kInvalidArgument);
  texts.push_back(half.ToString());
  ASSERT_TRUE(
      ApplyRbdSecrets({{rbd_secret_keys::kUserId, options_.ceph_user}, {rbd_secret_keys::kUserKey, key}}, &from_secret)
          .ok());
  auto made = MakeRbdBackend(from_secret);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto backend = *made;

  RbdBackendOptions wrong = from_secret;
  wrong.key = "AQBzZXJldGtleXRoYXRpc3dyb25nAAAAAAAAAA==";
  wrong.op_timeout = std::chrono::seconds(10);
  auto refused = MakeRbdBackend(wrong);
  EXPECT_FALSE(refused.ok());
  texts.push_back(refused.status().ToString());

  CreateVolumeSpec spec;
  spec.name = Unique("pvc");
  spec.size_bytes = 8 * kMiB;
  auto vol = backend->CreateVolume(spec);
  ASSERT_TRUE(vol.ok()) << vol.status().ToString();
  volumes_.push_back(vol->id);
  auto granted = backend->GrantAccess(vol->id, GrantFor("node-a"));
  ASSERT_TRUE(granted.ok());
  for (const auto& [k, v] : granted->transport_params) texts.push_back(k + "=" + v);
  for (const auto& [k, v] : granted->parameters) texts.push_back(k + "=" + v);
  texts.push_back(backend->DeleteVolume(vol->id).ToString());
  EXPECT_TRUE(backend->RevokeAccess(vol->id, InitiatorIqnForNode("node-a")).ok());
  EXPECT_TRUE(backend->DeleteVolume(vol->id).ok());

  SetLogCaptureForTest(nullptr);
  EXPECT_FALSE(logs.empty()) << "expected the backend to log its actions";
  EXPECT_EQ(logs.find(key), std::string::npos) << "cephx key in the logs";
  for (const auto& text : texts) EXPECT_EQ(text.find(key), std::string::npos) << text;
}

}  // namespace
}  // namespace blockcsi
