#include "support/plugin_suite.h"

#include <unistd.h>

namespace blockcsi::testing {

void PluginSuiteTest::SetUpTgtdAndPlugin(const std::string& plugin_dir) {
  if (!IsRoot()) GTEST_SKIP() << "needs root: tgtd, FUSE, loop devices and mount";
  if (::access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "needs /dev/fuse";
  std::string error;
  tgtd_ = TgtdHarness::Start(&error);
  BLOCKCSI_REQUIRE_TGTD(tgtd_, error);
  plugin_ = std::make_unique<PluginUnderTest>(plugin_dir, tgtd_.get());
}

void PluginSuiteTest::SetUp() {
  SetUpTgtdAndPlugin(dir_.path());
  if (IsSkipped() || HasFatalFailure()) return;
  ASSERT_TRUE(StartPlugin(""));
  baseline_ = TakeLeakSnapshot(Scope());
}

void PluginSuiteTest::TearDown() {
  if (!plugin_) return;  // skipped before anything was started
  // Before anything is cleaned: a test that passed must have left nothing.
  if (!HasFailure()) ExpectNothingLeftSince(baseline_, "the test (before the fixture cleans)");
  plugin_->Stop();
  StopHelpers();
  // Everything left under our directory: mounts (publishes, staging, FUSE
  // bridge files), loop devices on bridge files, bridges.
  CleanUpUnder(dir_.path());
}

bool PluginSuiteTest::StartPlugin(PluginOptions options) {
  if (options.node_id == PluginOptions{}.node_id) options.node_id = node_id_;
  std::string error;
  if (!plugin_->Start(options, &error)) {
    ADD_FAILURE() << "plugin did not start: " << error;
    return false;
  }
  return true;
}

bool PluginSuiteTest::StartPlugin(const std::string& fault_point) {
  PluginOptions options;
  options.fault_point = fault_point;
  return StartPlugin(options);
}

CsiVolume PluginSuiteTest::CreatePublished(const std::string& name, int64_t bytes, const CsiCalls& calls) {
  CsiVolume v;
  EXPECT_TRUE(GrpcOk(calls.Create(*plugin_, name, bytes, &v), GrpcLogTail())) << "CreateVolume " << name;
  EXPECT_TRUE(GrpcOk(calls.ControllerPublish(*plugin_, &v), GrpcLogTail())) << "ControllerPublishVolume " << name;
  return v;
}

void PluginSuiteTest::UnpublishAndDelete(const CsiVolume& v) {
  EXPECT_TRUE(GrpcOk(calls_.ControllerUnpublish(*plugin_, v), GrpcLogTail())) << "ControllerUnpublishVolume " << v.id;
  EXPECT_TRUE(GrpcOk(calls_.Delete(*plugin_, v), GrpcLogTail())) << "DeleteVolume " << v.id;
}

}  // namespace blockcsi::testing
