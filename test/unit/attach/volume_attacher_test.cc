// The VolumeAttacher facade with a scripted connector: record ordering,
// identity check, cleanup on every failure, idempotency, annotations.
#include <gtest/gtest.h>

#include "attach/attach_record_store.h"
#include "attach/volume_attacher_impl.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

struct Script {
  std::vector<std::string> calls;
  Status connect_status;
  LunIdentity identity;
  Status disconnect_status;
  AttachHealth health;
  std::string record_seen_at_connect;  // the record file's contents when Connect ran
  std::string record_path;
};

class FakeConnector final : public Connector {
 public:
  explicit FakeConnector(Script* s) : s_(s) {}
  std::string family() const override { return "fake"; }
  void Prepare(const AttachSpec&, AttachRecord* record) override {
    s_->calls.push_back("prepare");
    record->connector_state["cleanup_key"] = "x";
  }
  StatusOr<ConnectResult> Connect(const AttachSpec& spec, AttachRecord* record) override {
    s_->calls.push_back("connect");
    auto text = ReadFileToString(s_->record_path);
    s_->record_seen_at_connect = text.ok() ? *text : "";
    if (!s_->connect_status.ok()) return s_->connect_status;
    record->connector_state["session"] = "7";
    ConnectResult r;
    r.device_path = "/dev/fake0";
    r.size_bytes = 4096;
    r.identity = s_->identity;
    (void)spec;
    return r;
  }
  Status Disconnect(const AttachRecord& record) override {
    s_->calls.push_back("disconnect:" + record.state);
    return s_->disconnect_status;
  }
  StatusOr<LunIdentity> ReadIdentity(const AttachRecord&) override {
    s_->calls.push_back("identity");
    return s_->identity;
  }
  StatusOr<uint64_t> Rescan(AttachRecord*) override { return uint64_t{8192}; }
  AttachHealth Check(const AttachRecord&) override {
    s_->calls.push_back("check");
    return s_->health;
  }
  Status Reconcile(std::vector<AttachRecord>*) override {
    s_->calls.push_back("reconcile");
    return OkStatus();
  }

 private:
  Script* s_;
};

class VolumeAttacherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    script_.identity.serial = "sn1";
    script_.identity.naa = {"6000000000000000000000007f3a9c2e"};
    script_.record_path = AttachRecordPath(dir_.path(), "vol-1");
    attacher_ = std::make_unique<VolumeAttacherImpl>(
        dir_.path(), MachineHost(), std::make_unique<FakeConnector>(&script_), [this](std::string_view point) {
          steps_.push_back(std::string(point));
          return OkStatus();
        });
    ASSERT_TRUE(attacher_->Start().ok());
  }

  AttachSpec Spec(const std::string& serial = "sn1") {
    auto spec =
        ParseAttachSpec("vol-1",
                        {{publish_context::kPortals, "192.0.2.10:3260"},
                         {publish_context::kTargetIqn, "iqn.2026-11.io.blockcsi:vol-1"},
                         {publish_context::kLun, "1"},
                         {publish_context::kSerial, serial},
                         {publish_context::kChapRequired, "true"}},
                        {{secret_keys::kChapUsername, "alice"}, {secret_keys::kChapPassword, "pw-never-stored"}},
                        InitiatorIqnForNode("worker-1"));
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    return *spec;
  }

  testing::TempDir dir_;
  Script script_;
  std::vector<std::string> steps_;
  std::unique_ptr<VolumeAttacherImpl> attacher_;
};

TEST_F(VolumeAttacherTest, WritesAttachingBeforeConnectingThenAttached) {
  auto record = attacher_->Attach(Spec());
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_NE(script_.record_seen_at_connect.find("\"attaching\""), std::string::npos);
  EXPECT_NE(script_.record_seen_at_connect.find("cleanup_key"), std::string::npos);
  EXPECT_EQ(record->state, "attached");
  EXPECT_EQ(record->device_path, "/dev/fake0");
  EXPECT_EQ(record->connector_state.at("session"), "7");
  // The "attaching" record is durable before the connector runs (it names
  // what to clean up after any crash); the "attached" one skips the fsync of
  // the directory only (issue #18: its rename rolling back after a power
  // loss leaves the "attaching" record, which serves as well after a reboot).
  EXPECT_EQ(steps_,
            (std::vector<std::string>{"node.record.temp-written", "node.record.temp-synced", "node.record.renamed",
                                      "node.record.dir-synced", "node.stage.after-connect", "node.record.temp-written",
                                      "node.record.temp-synced", "node.record.renamed"}));
  auto stored = attacher_->Get("vol-1");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state, "attached");
  EXPECT_EQ(stored->device_path, "/dev/fake0");
  // The CHAP password reached the connector but no file.
  auto text = ReadFileToString(script_.record_path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->find("pw-never-stored"), std::string::npos);
  EXPECT_EQ(text->find("alice"), std::string::npos);
}

// The node service's facts go into the record in the write that marks it
// attached (one durable write per stage fewer, issue #18), not before the
// login: a record still "attaching" never claims a staging.
TEST_F(VolumeAttacherTest, SpecAnnotationsArriveWithTheAttachedWrite) {
  AttachSpec spec = Spec();
  spec.annotations["staged"] = "mount ext4 /staging/vol-1";
  auto record = attacher_->Attach(spec);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(script_.record_seen_at_connect.find("/staging/vol-1"), std::string::npos);
  EXPECT_EQ(record->annotations.at("staged"), "mount ext4 /staging/vol-1");
  auto text = ReadFileToString(script_.record_path);
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("/staging/vol-1"), std::string::npos) << *text;
}

TEST_F(VolumeAttacherTest, IdentityMismatchDetachesAndFailsLoudly) {
  std::string logs;
  SetLogCaptureForTest(&logs);
  auto record = attacher_->Attach(Spec("someone-else"));
  SetLogCaptureForTest(nullptr);
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(logs.find("WRONG LUN"), std::string::npos);
  EXPECT_EQ(script_.calls.back(), "disconnect:attaching");
  EXPECT_EQ(attacher_->Get("vol-1").status().code(), StatusCode::kNotFound);
}

TEST_F(VolumeAttacherTest, ConnectFailureCleansUpAndKeepsTheCode) {
  script_.connect_status = PermissionDenied("CHAP rejected");
  auto record = attacher_->Attach(Spec());
  EXPECT_EQ(record.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(script_.calls.back(), "disconnect:attaching");
  EXPECT_EQ(attacher_->Get("vol-1").status().code(), StatusCode::kNotFound);
}

TEST_F(VolumeAttacherTest, FailedCleanupKeepsTheRecordForUnstage) {
  script_.connect_status = Unavailable("target gone");
  script_.disconnect_status = Unavailable("still busy");
  EXPECT_EQ(attacher_->Attach(Spec()).status().code(), StatusCode::kUnavailable);
  auto stored = attacher_->Get("vol-1");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state, "attaching");
  // Detach retries the cleanup; it removes the record only once it worked.
  EXPECT_FALSE(attacher_->Detach("vol-1").ok());
  EXPECT_TRUE(attacher_->Get("vol-1").ok());
  script_.disconnect_status = OkStatus();
  EXPECT_TRUE(attacher_->Detach("vol-1").ok());
  EXPECT_EQ(attacher_->Get("vol-1").status().code(), StatusCode::kNotFound);
}

TEST_F(VolumeAttacherTest, HealthyAttachmentIsReused) {
  ASSERT_TRUE(attacher_->Attach(Spec()).ok());
  script_.calls.clear();
  auto again = attacher_->Attach(Spec());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(script_.calls, (std::vector<std::string>{"check", "identity"}));
}

TEST_F(VolumeAttacherTest, UnhealthyAttachmentIsRedone) {
  ASSERT_TRUE(attacher_->Attach(Spec()).ok());
  script_.calls.clear();
  script_.health = {true, "bridge gone"};
  ASSERT_TRUE(attacher_->Attach(Spec()).ok());
  EXPECT_EQ(script_.calls, (std::vector<std::string>{"check", "prepare", "connect"}));
}

TEST_F(VolumeAttacherTest, AttachedWithAnotherTargetIsRefused) {
  ASSERT_TRUE(attacher_->Attach(Spec()).ok());
  AttachSpec other = Spec();
  other.target_iqn = "iqn.2026-11.io.blockcsi:vol-2";
  EXPECT_EQ(attacher_->Attach(other).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(VolumeAttacherTest, DetachWithoutRecordIsOk) {
  EXPECT_TRUE(attacher_->Detach("never").ok());
  EXPECT_TRUE(script_.calls.empty() || script_.calls.back() == "reconcile");
}

TEST_F(VolumeAttacherTest, AnnotateSetsAndErases) {
  EXPECT_EQ(attacher_->Annotate("vol-1", "k", "v").code(), StatusCode::kNotFound);
  ASSERT_TRUE(attacher_->Attach(Spec()).ok());
  ASSERT_TRUE(attacher_->Annotate("vol-1", "staging_path", "/mnt/x").ok());
  EXPECT_EQ(attacher_->Get("vol-1")->annotations.at("staging_path"), "/mnt/x");
  ASSERT_TRUE(attacher_->Annotate("vol-1", "staging_path", "").ok());
  EXPECT_EQ(attacher_->Get("vol-1")->annotations.count("staging_path"), 0u);
}

TEST_F(VolumeAttacherTest, RescanUpdatesTheRecordedSize) {
  ASSERT_TRUE(attacher_->Attach(Spec()).ok());
  auto size = attacher_->Rescan("vol-1");
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 8192u);
  EXPECT_EQ(attacher_->Get("vol-1")->size_bytes, 8192u);
}

TEST_F(VolumeAttacherTest, CheckReportsIdentityChange) {
  ASSERT_TRUE(attacher_->Attach(Spec()).ok());
  EXPECT_FALSE(attacher_->Check("vol-1").abnormal);
  script_.identity.serial = "swapped";
  AttachHealth h = attacher_->Check("vol-1");
  EXPECT_TRUE(h.abnormal);
  EXPECT_NE(h.message.find("wrong LUN"), std::string::npos);
  EXPECT_TRUE(attacher_->Check("missing").abnormal);
}

TEST_F(VolumeAttacherTest, RestartFindsRecordsAndReconciles) {
  ASSERT_TRUE(attacher_->Attach(Spec()).ok());
  Script second = script_;
  second.calls.clear();
  VolumeAttacherImpl restarted(dir_.path(), MachineHost(), std::make_unique<FakeConnector>(&second));
  ASSERT_TRUE(restarted.Start().ok());
  EXPECT_EQ(second.calls, (std::vector<std::string>{"reconcile"}));
  auto list = restarted.List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].device_path, "/dev/fake0");
  ASSERT_TRUE(restarted.Detach("vol-1").ok());
  EXPECT_EQ(second.calls.back(), "disconnect:attached");
}

}  // namespace
}  // namespace blockcsi
