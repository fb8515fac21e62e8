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
#include "support/test_util.h"

namespace blockcsi::cli {
namespace {

constexpr char kImage[] = "csi-vol-7f3a9c2e41d04b8e9a512c6e1f0b3d47";  // the rbd0 scenario
constexpr char kImageId[] = "1037e80f98be";

// Copies a sysfs scenario into `root`, keeping its symlinks.
void Install(const std::string& scenario, const std::string& root) {
  testing::MergeTreeInto(testing::TestDataPath("krbd/sysfs/" + scenario), root);
}

AttachRecord KrbdRecord() {
  AttachRecord r;
  r.volume_id = "vol-rbd";
  r.connector = "iscsi";  // the kernel connector family, whatever the transport
  r.transport = "rbd";
  r.rbd_pool = "rbd";
  r.rbd_image = kImage;
  r.rbd_user = "blockcsi";
  r.expected_serial = kImageId;
  r.state = "attached";
  r.device_path = "/dev/rbd0";
  r.size_bytes = 1 << 30;
  return r;
}

TEST(CleanupStepsTest, DetachOfAKrbdRecordTakesTheKrbdPath) {
  testing::TempDir dir;
  std::string root = dir.Join("root"), state = dir.Join("state");
  Install("rbd0", root);
  AttachRecordStore store(state);
  ASSERT_TRUE(store.Init().ok());
  ASSERT_TRUE(store.Put(KrbdRecord()).ok());

  auto executor = std::make_shared<testing::FakeExecutor>();
  executor->ExpectOk({"rbd", "device", "unmap", "--options", "noudev", "/dev/rbd0"});
  NodeSnapshot snapshot;
  snapshot.state_dir = state;
  snapshot.records = {KrbdRecord()};
  CleanupStep step{CleanupStep::Kind::kDetachRecord, "vol-rbd", "vol-rbd", "detach volume vol-rbd"};

  Status st = ApplyCleanupStep(snapshot, step, {.executor = executor, .host_fs = MakeRootedHost(root)});
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(executor->Pending().empty()) << "not run: " << executor->Pending().front();
  EXPECT_EQ(store.Get("vol-rbd").status().code(), StatusCode::kNotFound) << "the record outlived its detach";
}

TEST(CleanupStepsTest, AKrbdDeviceThatStaysBusyKeepsItsRecord) {
  testing::TempDir dir;
  std::string root = dir.Join("root"), state = dir.Join("state");
  Install("rbd0", root);
  AttachRecordStore store(state);
  ASSERT_TRUE(store.Init().ok());
  ASSERT_TRUE(store.Put(KrbdRecord()).ok());

  auto executor = std::make_shared<testing::FakeExecutor>();
  auto busy = ReadFileToString(testing::TestDataPath("krbd/unmap_busy.stderr"));
  ASSERT_TRUE(busy.ok());
  executor->ExpectFail({"rbd", "device", "unmap", "--options", "noudev", "/dev/rbd0"}, 16, *busy);
  NodeSnapshot snapshot;
  snapshot.state_dir = state;
  snapshot.records = {KrbdRecord()};
  CleanupStep step{CleanupStep::Kind::kDetachRecord, "vol-rbd", "vol-rbd", "detach volume vol-rbd"};

  Status st = ApplyCleanupStep(snapshot, step, {.executor = executor, .host_fs = MakeRootedHost(root)});
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("/dev/rbd0"), std::string::npos) << st.message();
  EXPECT_TRUE(store.Get("vol-rbd").ok()) << "a record whose device is still mapped must stay";
}

}  // namespace
}  // namespace blockcsi::cli
