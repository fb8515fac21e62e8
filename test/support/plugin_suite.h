// The fixture every suite that drives the real plugin on a private tgtd
// opens and closes with (node e2e, blockctl's node verbs, metrics, plugin
// restarts), kept once so that their SetUp, teardown leak check and CSI
// helpers cannot drift apart. SetUp skips (reason printed) without root or
// /dev/fuse, starts tgtd and the plugin as node `node_id` and takes the leak
// baseline; TearDown asserts, on a passing test and before anything is
// cleaned, that nothing was left since that baseline, then stops the plugin
// and removes whatever is left under dir_. Not thread-safe.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "support/csi_calls.h"
#include "support/leak_check.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi::testing {

class PluginSuiteTest : public ::testing::Test {
 protected:
  // `secrets` go with CreateVolume, NodeStageVolume and DeleteVolume.
  explicit PluginSuiteTest(std::string node_id, std::map<std::string, std::string> secrets = {})
      : node_id_(node_id), calls_(std::move(node_id), "ext4", std::move(secrets)) {}

  // SetUpTgtdAndPlugin(dir_.path()), StartPlugin(""), the leak baseline.
  void SetUp() override;
  void TearDown() override;

  // For a SetUp of its own: the root/FUSE skip, tgtd, and plugin_ made in
  // `plugin_dir` (not started). Callers check IsSkipped()/HasFatalFailure().
  void SetUpTgtdAndPlugin(const std::string& plugin_dir);
  // What the plugin can leave (support/leak_check.h); suites with daemons
  // of their own widen it.
  virtual LeakScope Scope(const std::string& volume_id = "") { return plugin_->LeakScopeFor(volume_id); }
  // Stops what a suite started beside the plugin, after the plugin stopped
  // and before dir_ is cleaned.
  virtual void StopHelpers() {}
  void ExpectNothingLeftSince(const LeakSnapshot& before, const std::string& after, const std::string& volume_id = "") {
    EXPECT_TRUE(NothingLeftSince(before, Scope(volume_id), after));
  }

  // Starts the plugin as node_id_ (unless `options` names another node);
  // false, with the plugin's log as a failure, when it does not come up.
  bool StartPlugin(PluginOptions options);
  // With `fault_point` set the plugin kills itself there.
  bool StartPlugin(const std::string& fault_point);
  void StopPlugin() { plugin_->Stop(); }
  // Waits for the plugin to die by its own fault point; true when it did.
  bool PluginKilledItself() { return plugin_->WaitKilledByFaultPoint(); }
  std::string GrpcLogTail() { return plugin_->LogTail(); }

  // CreateVolume + ControllerPublishVolume to node_id_ with `calls` (its
  // filesystem and secrets), each expected to succeed.
  CsiVolume CreatePublished(const std::string& name, int64_t bytes, const CsiCalls& calls);
  CsiVolume CreatePublished(const std::string& name, int64_t bytes) { return CreatePublished(name, bytes, calls_); }
  // ControllerUnpublishVolume + DeleteVolume, each expected to succeed.
  void UnpublishAndDelete(const CsiVolume& v);

  std::string Staging(const std::string& id) const { return plugin_->staging_path(id); }
  std::string Target(const std::string& id) const { return plugin_->target_path(id); }

  const std::string node_id_;
  const CsiCalls calls_;  // ext4 volumes published to node_id_
  TempDir dir_;
  std::unique_ptr<TgtdHarness> tgtd_;
  std::unique_ptr<PluginUnderTest> plugin_;
  LeakSnapshot baseline_;  // at SetUp
};

}  // namespace blockcsi::testing
