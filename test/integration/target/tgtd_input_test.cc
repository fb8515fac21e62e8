// Issue #21, "Nothing from a request reaches tgtd unchecked": each case of
// the probe as a regression test against a real tgtd, through the
// backend the agent serves. After every refused call the test checks right
// away that nothing was left behind: no tgtd account, no ACL, no grant in
// the record, no file in the pool. Each case deletes what it made, and
// TearDown asserts with the shared leak checker, before it cleans, that tgtd
// and the pool hold nothing new (issue #22). Root and Debian tgt; skipped
// otherwise.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "backend/local/local_backend.h"
#include "backend/local/tgt_exporter.h"
#include "backend/local/tgtadm_parser.h"
#include "backend/local/tgtd_socket_control.h"
#include "common/executor.h"
#include "common/logging.h"
#include "support/leak_check.h"
#include "support/test_util.h"
#include "support/tgtd_backend.h"
#include "support/tgtd_harness.h"
#include "support/tgtd_test.h"

namespace blockcsi {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;
constexpr char kPrefix[] = "iqn.2026-11.io.blockcsi";
constexpr char kVictimNode[] = "iqn.2026-11.io.blockcsi:node:victim";
constexpr char kAttackerNode[] = "iqn.2026-11.io.blockcsi:node:attacker";
constexpr char kSecret[] = "s3cret-pass-12";

class TgtdInputTest : public testing::TgtdTest {
 protected:
  void SetUp() override {
    TgtdTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    SetLogCaptureForTest(&log_);
    LocalBackendOptions options;
    options.iqn_prefix = kPrefix;
    options.reconcile_interval = std::chrono::milliseconds(0);
    // Over tgtd's management socket, as blockcsi-target runs by default.
    auto backend = testing::OpenBackendOnTgtd(*tgtd_, pool_.path(), options, testing::TgtdDriven::kBySocket);
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = *backend;
    baseline_ = testing::TakeLeakSnapshot(Scope());
    have_baseline_ = true;
  }
  void TearDown() override {
    SetLogCaptureForTest(nullptr);
    // Asserted before the fallback below removes what a failed case left.
    if (have_baseline_) {
      EXPECT_TRUE(testing::NothingLeftSince(baseline_, Scope(), "the test's own deletes, before the fixture cleans"));
    }
    if (backend_) {
      for (const auto& id : made_) {
        if (auto record = backend_->GetVolume(id); record.ok()) {
          for (const auto& g : record->grants) (void)backend_->RevokeAccess(id, g.initiator_iqn);
        }
        (void)backend_->DeleteVolume(id);
      }
    }
  }

  // tgtd's targets, LUNs, ACLs and accounts (bound or not), the pool's files.
  testing::LeakScope Scope() const {
    testing::LeakScope scope;
    scope.pool_dir = pool_.path();
    scope.tgtd = tgtd_.get();
    return scope;
  }
  testing::LeakSnapshot Snapshot() const { return testing::TakeLeakSnapshot(Scope()); }
  // The case's own cleanup: every grant revoked, the volume deleted.
  void Retire(const VolumeRecord& v) {
    auto record = backend_->GetVolume(v.id);
    ASSERT_TRUE(record.ok()) << record.status().ToString();
    for (const auto& g : record->grants) EXPECT_TRUE(backend_->RevokeAccess(v.id, g.initiator_iqn).ok()) << v.id;
    Status st = backend_->DeleteVolume(v.id);
    EXPECT_TRUE(st.ok()) << v.id << ": " << st.ToString();
  }

  VolumeRecord Create(const std::string& name) {
    CreateVolumeSpec spec;
    spec.name = name;
    spec.size_bytes = 8 * kMiB;
    auto v = backend_->CreateVolume(spec);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    if (v.ok()) made_.push_back(v->id);
    return v.ok() ? *v : VolumeRecord{};
  }
  std::vector<TgtTarget> Live() {
    auto parsed = ParseTgtadmTargets(tgtd_->ShowTargets());
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    return parsed.ok() ? *parsed : std::vector<TgtTarget>{};
  }
  TgtTarget LiveTarget(const std::string& iqn) {
    for (auto& t : Live()) {
      if (t.iqn == iqn) return t;
    }
    ADD_FAILURE() << "no live target " << iqn;
    return {};
  }
  std::string RawAccounts() { return tgtd_->Tgtadm({"--op", "show", "--mode", "account"}); }
  // Every file under the pool, by path relative to it.
  std::set<std::string> PoolFiles() {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(pool_.path())) {
      if (e.is_regular_file()) out.insert(std::filesystem::relative(e.path(), pool_.path()).string());
    }
    return out;
  }
  // A grant that must be refused with INVALID_ARGUMENT, leaving tgtd and the
  // record of `v` exactly as they were.
  void ExpectGrantRefused(const VolumeRecord& v, const ChapCredentials& chap, const char* what) {
    SCOPED_TRACE(what);
    TgtTarget before = LiveTarget(v.target_iqn);
    std::string accounts_before = RawAccounts();
    testing::LeakSnapshot snapshot = Snapshot();
    auto r = backend_->GrantAccess(v.id, {kAttackerNode, "node-attacker", false, "rwo", chap});
    EXPECT_TRUE(testing::NothingLeftSince(snapshot, Scope(), "the refused grant"));
    ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find(v.id), std::string::npos) << r.status().message();
    EXPECT_LT(r.status().message().size(), 400u) << "the client must be able to receive the error";
    for (const std::string* s : {&chap.username, &chap.password}) {
      if (s->size() >= 4) {
        EXPECT_EQ(r.status().message().find(*s), std::string::npos) << "a credential echoed in the error";
      }
    }
    TgtTarget after = LiveTarget(v.target_iqn);
    EXPECT_EQ(after.acls, before.acls);
    EXPECT_EQ(after.incoming_accounts, before.incoming_accounts);
    EXPECT_EQ(RawAccounts(), accounts_before) << "a tgtd account was left behind";
    EXPECT_TRUE(backend_->GetVolume(v.id)->grants.empty()) << "a grant was recorded";
  }

  testing::TempDir pool_;
  std::shared_ptr<LocalBackend> backend_;
  std::string log_;
  testing::LeakSnapshot baseline_;
  bool have_baseline_ = false;
  std::vector<std::string> made_;  // the fallback cleanup's list
};

TEST_F(TgtdInputTest, AUserNameWithAForgedTargetBlockCannotCrossVolumes) {
  VolumeRecord victim = Create("pvc-victim");
  VolumeRecord attacker = Create("pvc-attacker");
  VolumeRecord third = Create("pvc-third");
  ASSERT_TRUE(backend_->GrantAccess(third.id, {kVictimNode, "node-victim", false, "rwo", {}}).ok());
  const int third_tid = LiveTarget(third.target_iqn).tid;
  std::string forged = "evil\nTarget " + std::to_string(third_tid) + ": " + attacker.target_iqn;
  ExpectGrantRefused(attacker, {forged, kSecret, "", ""}, "forged target block");
  // A later check of another volume binds nothing anywhere else.
  auto health = backend_->CheckVolume(victim.id);
  ASSERT_TRUE(health.ok());
  EXPECT_FALSE(health->abnormal) << health->message;
  EXPECT_EQ(LiveTarget(third.target_iqn).acls, std::vector<std::string>{kVictimNode});
  EXPECT_TRUE(LiveTarget(attacker.target_iqn).acls.empty());
  for (const auto* v : {&victim, &attacker, &third}) Retire(*v);
}

// tgtd state made before this fix (or by hand) that prints a forged block is
// refused whole: no bind on its strength, a clear error, other volumes intact.
TEST_F(TgtdInputTest, ForgedOutputAlreadyInTgtdIsRefusedNotActedOn) {
  VolumeRecord attacker = Create("pvc-attacker");
  VolumeRecord victim = Create("pvc-victim");
  ASSERT_TRUE(backend_->GrantAccess(victim.id, {kVictimNode, "node-victim", false, "rwo", {}}).ok());
  const TgtTarget victim_live = LiveTarget(victim.target_iqn);
  const int attacker_tid = LiveTarget(attacker.target_iqn).tid;
  std::string forged = "evil\nTarget " + std::to_string(victim_live.tid) + ": " + attacker.target_iqn;
  int code = -1;
  tgtd_->Tgtadm({"--op", "new", "--mode", "account", "--user", forged, "--password", "planted-pass-1"}, &code);
  ASSERT_EQ(code, 0);
  tgtd_->Tgtadm({"--op", "bind", "--mode", "account", "--tid", std::to_string(attacker_tid), "--user", forged}, &code);
  ASSERT_EQ(code, 0);

  testing::LeakSnapshot before_grant = Snapshot();
  auto granted = backend_->GrantAccess(attacker.id, {kAttackerNode, "node-attacker", false, "rwo", {}});
  EXPECT_TRUE(testing::NothingLeftSince(before_grant, Scope(), "the grant refused on forged tgtd output"));
  EXPECT_EQ(granted.status().code(), StatusCode::kInternal) << granted.status().ToString();
  EXPECT_NE(granted.status().message().find("cannot be trusted"), std::string::npos) << granted.status().message();
  auto health = backend_->CheckVolume(attacker.id);
  ASSERT_TRUE(health.ok());
  EXPECT_TRUE(health->abnormal);
  EXPECT_FALSE(backend_->ReconcileNow().ok());
  // The victim's ACL never got the attacker; the attacker's target got no one.
  tgtd_->Tgtadm({"--op", "delete", "--mode", "account", "--user", forged}, &code);
  ASSERT_EQ(code, 0);
  EXPECT_EQ(LiveTarget(victim.target_iqn).acls, std::vector<std::string>{kVictimNode});
  EXPECT_TRUE(LiveTarget(attacker.target_iqn).acls.empty());
  // Once the forged account is gone, the backend converges again. The refused
  // grant was final (INTERNAL), so it was rolled back whole (issue #15): the
  // reconcile restores nothing, and the attacher's retry grants it.
  EXPECT_TRUE(backend_->ReconcileNow().ok());
  EXPECT_TRUE(LiveTarget(attacker.target_iqn).acls.empty());
  ASSERT_TRUE(backend_->GrantAccess(attacker.id, {kAttackerNode, "node-attacker", false, "rwo", {}}).ok());
  EXPECT_EQ(LiveTarget(attacker.target_iqn).acls, std::vector<std::string>{kAttackerNode});
  Retire(attacker);
  Retire(victim);
}

TEST_F(TgtdInputTest, AUserNameWithAForgedAccountListCausesNoOutage) {
  VolumeRecord v = Create("pvc-outage");
  ExpectGrantRefused(v, {"user4\nAccount list:\n    ghost", kSecret, "", ""}, "forged account list");
  // Every operation the issue saw fail still works.
  VolumeRecord other = Create("pvc-after");
  ASSERT_TRUE(
      backend_->GrantAccess(other.id, {kVictimNode, "node-victim", false, "rwo", {"user4", kSecret, "", ""}}).ok());
  EXPECT_TRUE(backend_->RevokeAccess(other.id, kVictimNode).ok());
  EXPECT_TRUE(backend_->DeleteVolume(other.id).ok());
  EXPECT_TRUE(backend_->Healthy().ok());
  EXPECT_TRUE(backend_->ReconcileNow().ok());
  Retire(v);
}

TEST_F(TgtdInputTest, SeparatorsLengthsAndHalfPairsAreRefusedBeforeTgtd) {
  VolumeRecord v = Create("pvc-fields");
  ExpectGrantRefused(v, {"a,b", kSecret, "", ""}, "comma in user name (was INTERNAL + half-made account)");
  ExpectGrantRefused(v, {"a=b", kSecret, "", ""}, "'=' in user name");
  ExpectGrantRefused(v, {"", kSecret, "", ""}, "password without user (was granted with CHAP off)");
  ExpectGrantRefused(v, {"nodeuser1", std::string(10 * 1024, 'p'), "", ""}, "10 KB password (was Broken pipe)");
  ExpectGrantRefused(v, {std::string(10 * 1024, 'u'), kSecret, "", ""}, "10 KB user (was a 20 KB error)");
  ExpectGrantRefused(v, {"nodeuser1", "6bytes", "", ""}, "6-byte password (was accepted)");
  ExpectGrantRefused(v, {"nodeuser1", "has,comma-pass", "", ""}, "comma in password");
  ExpectGrantRefused(v, {"nodeuser1", kSecret, "tgt-user", ""}, "mutual user without password");
  // The initiator name reaches tgtadm's argv and its output too.
  testing::LeakSnapshot before_bad_iqn = Snapshot();
  auto bad_iqn = backend_->GrantAccess(v.id, {"iqn.2026-11.x:a\nTarget 9: y", "n", false, "rwo", {}});
  EXPECT_EQ(bad_iqn.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(testing::NothingLeftSince(before_bad_iqn, Scope(), "the refused initiator name"));
  EXPECT_TRUE(LiveTarget(v.target_iqn).acls.empty());
  // The same credentials, valid, work end to end.
  ASSERT_TRUE(
      backend_->GrantAccess(v.id, {kAttackerNode, "node-attacker", false, "rwo", {"nodeuser1", kSecret, "", ""}}).ok());
  EXPECT_EQ(LiveTarget(v.target_iqn).incoming_accounts, std::vector<std::string>{"nodeuser1"});
  // The revoke takes the CHAP account with it (the leak check sees unbound accounts too).
  Retire(v);
}

TEST_F(TgtdInputTest, SizesThePoolCannotHoldAreOutOfRangeAndLeaveNothing) {
  std::set<std::string> before = PoolFiles();
  const testing::LeakSnapshot snapshot = Snapshot();
  CreateVolumeSpec spec;
  spec.name = "pvc-2p44";
  spec.size_bytes = uint64_t{1} << 44;  // was INTERNAL "File too large" and a 0-byte tmp/vol-*.img
  auto r = backend_->CreateVolume(spec);
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange) << r.status().ToString();
  EXPECT_EQ(PoolFiles(), before);
  spec.name = "pvc-1pib";
  spec.size_bytes = uint64_t{1} << 50;
  EXPECT_EQ(backend_->CreateVolume(spec).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(PoolFiles(), before);
  // More than the free space (default ratio 1.0) but less than the file
  // system: RESOURCE_EXHAUSTED, a retry after deletes could succeed.
  auto free = backend_->AvailableBytes({});
  ASSERT_TRUE(free.ok());
  spec.name = "pvc-over";
  spec.size_bytes = (*free / kMiB + 1024) * kMiB;
  auto over = backend_->CreateVolume(spec);
  EXPECT_TRUE(over.status().code() == StatusCode::kResourceExhausted || over.status().code() == StatusCode::kOutOfRange)
      << over.status().ToString();
  EXPECT_EQ(PoolFiles(), before);
  EXPECT_TRUE(testing::NothingLeftSince(snapshot, Scope(), "the refused sizes"));
  for (const auto& t : Live()) EXPECT_NE(t.iqn.rfind(kPrefix, 0), 0u) << "a target was made for " << t.iqn;
}

TEST_F(TgtdInputTest, NamesAreBoundedAndPrintable) {
  std::set<std::string> before = PoolFiles();
  const testing::LeakSnapshot snapshot = Snapshot();
  CreateVolumeSpec spec;
  spec.size_bytes = 4 * kMiB;
  spec.name = std::string(100 * 1024, 'n');  // was a 100 KB record and ~500 KB of debug log
  auto r = backend_->CreateVolume(spec);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_LT(r.status().message().size(), 200u);
  spec.name = std::string("pvc-nul") + '\0' + "x";  // NUL bytes reached the log raw
  EXPECT_EQ(backend_->CreateVolume(spec).status().code(), StatusCode::kInvalidArgument);
  spec.name = "pvc-newline\nforged log line";
  EXPECT_EQ(backend_->CreateVolume(spec).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PoolFiles(), before);
  EXPECT_TRUE(testing::NothingLeftSince(snapshot, Scope(), "the refused names"));
  EXPECT_EQ(log_.find('\0'), std::string::npos);
  spec.name = std::string(128, 'n');  // CSI's limit for a string field
  auto longest = backend_->CreateVolume(spec);
  ASSERT_TRUE(longest.ok()) << longest.status().ToString();
  made_.push_back(longest->id);
  const testing::LeakSnapshot with_volume = Snapshot();
  EXPECT_EQ(backend_->CreateSnapshot(longest->id, std::string(129, 's')).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(testing::NothingLeftSince(with_volume, Scope(), "the refused snapshot name"));
  Retire(*longest);
}

TEST_F(TgtdInputTest, SecretsAppearInNoLogRecordOrError) {
  VolumeRecord v = Create("pvc-secret");
  const std::string one_way = "one-way-S3cret-xyz";
  const std::string mutual = "mutual-S3cret-uvw";
  ASSERT_TRUE(
      backend_->GrantAccess(v.id, {kVictimNode, "node-victim", false, "rwo", {"u1", one_way, "t1", mutual}}).ok());
  // Every line any level could write is looked at, not only info and up.
  ASSERT_TRUE(LogEnabled(LogLevel::kDebug)) << "the secret check would miss what is logged at debug";
  // Refused variants of the same secrets, and a revoke, also log nothing
  // secret, and their errors name none.
  const testing::LeakSnapshot granted = Snapshot();
  std::vector<Status> refused;
  refused.push_back(backend_->GrantAccess(v.id, {kAttackerNode, "n", false, "rwo", {"", one_way, "", ""}}).status());
  refused.push_back(backend_->GrantAccess(v.id, {kAttackerNode, "n", false, "rwo", {"u,2", one_way, "", ""}}).status());
  refused.push_back(
      backend_->GrantAccess(v.id, {kAttackerNode, "n", false, "rwo", {"u3", one_way, "t3", one_way}}).status());
  refused.push_back(backend_->GrantAccess(v.id, {kAttackerNode, "n", false, "rwo", {"u4", "short", "", ""}}).status());
  for (const Status& st : refused) EXPECT_FALSE(st.ok()) << "a grant with bad CHAP fields was accepted";
  EXPECT_TRUE(testing::NothingLeftSince(granted, Scope(), "the refused grants"));
  ASSERT_TRUE(backend_->ReconcileNow().ok());
  ASSERT_TRUE(backend_->RevokeAccess(v.id, kVictimNode).ok());
  for (const std::string& secret : {one_way, mutual}) {
    EXPECT_EQ(log_.find(secret), std::string::npos) << "a secret in the log";
    for (const Status& st : refused) EXPECT_EQ(st.message().find(secret), std::string::npos) << st.ToString();
    for (const auto& f : PoolFiles()) {
      if (f.rfind("images/", 0) == 0) continue;
      EXPECT_EQ(testing::ReadFileOrEmpty(pool_.Join(f)).find(secret), std::string::npos) << "a secret in " << f;
    }
  }
  Retire(v);
}

}  // namespace
}  // namespace blockcsi
