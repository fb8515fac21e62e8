// blockctl cleanup --apply builds its attacher through the plugin's own
// factory, so a kernel RBD record (connector "iscsi", transport "rbd") is
// undone by krbd — `rbd device unmap` of the device its sysfs entry names —
// and never handed to open-iscsi. The kernel side is replayed: a fake sysfs
// tree (test/testdata/krbd/sysfs) and a FakeExecutor that fails on any argv
// it does not expect (an iscsiadm call would).
#include "cli/cleanup_steps.h"

#include <gtest/gtest.h>

#include "attach/attach_record_store.h"
#include "common/atomic_file.h"
#include "support/fake_executor.h"
#include "support/krbd_captured.h"
#include "support/test_util.h"

namespace blockcsi::cli {
namespace {

// A node whose state holds one record, "vol-rbd": a kernel RBD volume at
// /dev/rbd0 (the rbd0 sysfs scenario, installed under root_), made by the
// kernel connector family (connector "iscsi", whatever the transport).
class CleanupStepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    krbd_captured::Install("rbd0", root_);
    ASSERT_TRUE(store_.Init().ok());
    ASSERT_TRUE(store_.Put(Record()).ok());
  }

  static AttachRecord Record() {
    AttachRecord r = krbd_captured::ImageRecord("vol-rbd", "iscsi", "/dev/rbd0");
    r.size_bytes = 1 << 30;
    return r;
  }

  // blockctl cleanup --apply's step that detaches the record.
  Status ApplyDetach() {
    NodeSnapshot snapshot;
    snapshot.state_dir = state_;
    snapshot.records = {Record()};
    CleanupStep step{CleanupStep::Kind::kDetachRecord, "vol-rbd", "vol-rbd", "detach volume vol-rbd"};
    return ApplyCleanupStep(snapshot, step,
                            {.executor = executor_, .host_fs = HostRootedAt(root_), .state_files = MachineHost()});
  }

  testing::TempDir dir_;
  std::string root_ = dir_.Join("root");
  std::string state_ = dir_.Join("state");
  AttachRecordStore store_{state_, MachineHost()};
  std::shared_ptr<testing::FakeExecutor> executor_ = std::make_shared<testing::FakeExecutor>();
};

TEST_F(CleanupStepsTest, DetachOfAKrbdRecordTakesTheKrbdPath) {
  executor_->ExpectOk({"rbd", "device", "unmap", "--options", "noudev", "/dev/rbd0"});
  Status st = ApplyDetach();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(executor_->Pending().empty()) << "not run: " << executor_->Pending().front();
  EXPECT_EQ(store_.Get("vol-rbd").status().code(), StatusCode::kNotFound) << "the record outlived its detach";
}

TEST_F(CleanupStepsTest, AKrbdDeviceThatStaysBusyKeepsItsRecord) {
  auto busy = ReadFileToString(testing::TestDataPath("krbd/unmap_busy.stderr"));
  ASSERT_TRUE(busy.ok());
  executor_->ExpectFail({"rbd", "device", "unmap", "--options", "noudev", "/dev/rbd0"}, 16, *busy);
  Status st = ApplyDetach();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("/dev/rbd0"), std::string::npos) << st.message();
  EXPECT_TRUE(store_.Get("vol-rbd").ok()) << "a record whose device is still mapped must stay";
}

// An encrypted volume's open mapping is closed by name, through the same
// cryptsetup call the node makes; a mapping that is gone already is done.
TEST_F(CleanupStepsTest, CloseMappingRunsCryptsetupCloseOnlyWhenTheMappingIsThere) {
  std::shared_ptr<Host> host = HostRootedAt(root_);
  ASSERT_TRUE(host->MakeDirectory("/dev/mapper", 0755).ok());
  ASSERT_TRUE(host->MakeFile("/dev/mapper/blockcsi-vol-a").ok());
  NodeSnapshot snapshot;
  snapshot.state_dir = state_;
  CleanupStep step{CleanupStep::Kind::kCloseMapping, "vol-a", "blockcsi-vol-a", "close dm-crypt mapping"};
  executor_->ExpectOk({"cryptsetup", "close", "blockcsi-vol-a"});
  Status st = ApplyCleanupStep(snapshot, step, {.executor = executor_, .host_fs = host, .state_files = MachineHost()});
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(executor_->Pending().empty());
  ASSERT_TRUE(host->RemovePath("/dev/mapper/blockcsi-vol-a").ok());
  st = ApplyCleanupStep(snapshot, step, {.executor = executor_, .host_fs = host, .state_files = MachineHost()});
  EXPECT_TRUE(st.ok()) << "a mapping already gone is closed: " << st.ToString();
}

}  // namespace
}  // namespace blockcsi::cli
