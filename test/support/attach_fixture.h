// Shared setup for the attach integration tests: a real tgtd with targets
// whose LUNs sit on sparse files in a temp dir, a state dir for the
// attacher, and a teardown that removes every bridge, loop device and
// mount left under that state dir even when the test failed. Not
// thread-safe.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attach/attacher_factory.h"
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

class AttachIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // A target with LUN 1 on a new sparse file, serial set, ACL for `acl_node`
  // (empty: no ACL entry at all).
  TestTarget MakeTarget(const std::string& name, uint64_t size_bytes, const std::string& acl_node = kNodeId);
  void AddChap(const TestTarget& t, const std::string& user, const std::string& password);
  std::map<std::string, std::string> ContextFor(const TestTarget& t) const;
  // `bridge_dir` holds the bridge programs; default: this build's bin/.
  StatusOr<std::unique_ptr<VolumeAttacher>> NewAttacher(int bridge_sessions = 1, const std::string& bridge_dir = "");

  // What is left on the host for this test's state dir.
  std::vector<int> BridgePids() const;
  std::vector<std::string> LoopDevicesUnderState() const;
  std::vector<std::string> MountsUnderState() const;
  void ExpectNothingLeft();

  std::unique_ptr<TgtdHarness> tgtd_;
  std::unique_ptr<TempDir> tmp_;
  std::string state_dir_;
  int next_tid_ = 1;
};

// Pattern helpers: O_DIRECT I/O on a device, plain reads of a backing file.
bool WriteDirect(const std::string& device, uint64_t offset, const std::string& data);
std::string ReadDirect(const std::string& device, uint64_t offset, size_t len);
std::string ReadFileAt(const std::string& path, uint64_t offset, size_t len);
std::string Pattern(size_t len, char seed);
int RunProgram(const std::vector<std::string>& argv, std::string* output = nullptr);

}  // namespace blockcsi::testing
