// Shared setup for the attach integration tests: a real tgtd with targets
// whose LUNs sit on sparse files in a temp dir, a state dir for the
// attacher, and a teardown that removes every bridge, loop device and
// mount left under that state dir even when the test failed. Not
// thread-safe.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attach/attacher_factory.h"
#include "support/block_io.h"
#include "support/fuse_uring_param.h"
#include "support/leak_check.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi::testing {

// The test-only attach_tool program (attach_tool_main.cc) of this build.
inline std::string AttachToolPath() { return TestsDir() + "/attach_tool"; }

inline constexpr char kNodeId[] = "node-a";

struct TestTarget {
  int tid = 0;
  std::string iqn;
  std::string backing_file;
  std::string serial;
  std::string wwn;  // NAA 6, from the LU's scsi_id (see LunIdentity::wwn)
  uint64_t size_bytes = 0;
};

// A change to a publish_context (AttachIntegrationTest::AttachEdited).
using ContextEdit = std::function<void(std::map<std::string, std::string>&)>;

class AttachIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // A target with LUN 1 on a new sparse file, serial set, ACL for `acl_node`
  // (empty: no ACL entry at all).
  TestTarget MakeTarget(const std::string& name, uint64_t size_bytes, const std::string& acl_node = kNodeId);
  // LUN 1 of target `t` on its backing file, with its serial and scsi_id.
  ::testing::AssertionResult AddLun(const TestTarget& t);
  void AddChap(const TestTarget& t, const std::string& user, const std::string& password);
  std::map<std::string, std::string> ContextFor(const TestTarget& t) const;
  // `bridge_dir` holds the bridge programs; default: this build's bin/.
  StatusOr<std::unique_ptr<VolumeAttacher>> NewAttacher(int bridge_sessions = 1, const std::string& bridge_dir = "");
  // `t` attached as "vol-a" by a new attacher (kept in attacher_ for the
  // test's later calls) with its publish_context first changed by `edit`:
  // the shape of every test that one kind of context is refused or served.
  // An attacher that cannot be made fails the test.
  StatusOr<AttachRecord> AttachEdited(const TestTarget& t, const ContextEdit& edit,
                                      const std::map<std::string, std::string>& secrets = {});

  // What is left on the host for this test's state dir.
  std::vector<int> BridgePids() const;
  std::vector<std::string> LoopDevicesUnderState() const;
  std::vector<std::string> MountsUnderState() const;
  // The one leak checker (support/leak_check.h) against the state at SetUp:
  // bridges, FUSE mounts, loop devices (also those whose FUSE file is gone),
  // attach records, bridge dirs and iSCSI sessions. Called by tests right
  // after a failing call and by TearDown before it cleans.
  void ExpectNothingLeft();
  LeakScope Scope() const;

  std::unique_ptr<TgtdHarness> tgtd_;
  std::unique_ptr<TempDir> tmp_;
  std::string state_dir_;
  int next_tid_ = 1;
  // The bridges of these tests serve FUSE over io_uring where the kernel
  // has it (put back after each test); BLOCKCSI_TEST_FUSE_PATH=dev_fuse runs
  // them over /dev/fuse (ctest's attach_integration_tests_dev_fuse).
  FuseUringParameter fuse_uring_;
  LeakSnapshot baseline_;                     // at SetUp
  std::unique_ptr<VolumeAttacher> attacher_;  // AttachEdited's
};

}  // namespace blockcsi::testing
