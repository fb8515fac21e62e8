// The gtest fixture of the `k8s` label: one KubeEnvironment per test
// binary (started by the first test, stopped after the last), shared by
// scenarios that each work in a namespace of their own. A second test file
// derives its fixture from KubeTest (or uses it directly) to get the same
// cluster. Each scenario leaves nothing behind it: pods, VolumeAttachments,
// ACLs and volumes are checked gone at its end.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "k8s/k8s_environment.h"
#include "support/leak_check.h"

namespace blockcsi::testing {

class KubeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  // What SetUpTestSuite does, with `options`: a fixture that needs another
  // environment (e.g. zones) calls it from its own SetUpTestSuite.
  static void StartEnvironment(const KubeEnvironmentOptions& options);
  // Skips (machine without what the label needs) or fails (it has it,
  // and the environment still did not start).
  void SetUp() override;

  static KubeEnvironment& env() { return *env_; }
  static KubeCluster& cluster() { return env_->cluster(); }
  static KubeletSimulator& kubelet() { return env_->kubelet(); }

  // Creates namespace `ns` (each scenario its own).
  void MakeNamespace(const std::string& ns);
  void Apply(const std::string& manifest);
  // Polls until `done` or `timeout`; the supervisor (sidecar restarts) runs meanwhile.
  static bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout);

  // The initiator names in target `target_iqn`'s ACL (tgtadm show).
  static std::vector<std::string> AclOf(const std::string& target_iqn);
  // The same on another storage host's tgtd (zones).
  static std::vector<std::string> AclOf(const std::string& target_iqn, TgtdHarness& tgtd);
  // Whether tgtd still has target `target_iqn`.
  static bool HasTarget(const std::string& target_iqn);
  // The initiator name the controller grants for this test's node.
  static std::string NodeInitiator();
  // Deletes the pod through the kubelet simulator, then waits for its
  // VolumeAttachment to go (the attach-detach controller and attacher
  // detach), then checks the node's initiator left the target's ACL.
  void DeletePodAndWaitDetached(const RunningPod& pod);
  // Deletes the PVC and waits for its PV and the target to go.
  void DeletePvcAndWaitGone(const RunningPod& pod);

  // Writes `data` at offset 0 of `path` (a file in the pod's mount, or its
  // block device file) with O_DIRECT|O_SYNC where `direct`, and reads it
  // back: the bytes through the whole stack.
  // What the node, the pool and tgtd hold that the plugins could have made
  // (the shared leak checker), ignoring the long-running programs.
  static LeakScope Scope();
  // Nothing new since `before`: no mount, loop device, bridge, attach
  // record, pool file, target, ACL or session.
  static void ExpectNothingLeftSince(const LeakSnapshot& before);

  static ::testing::AssertionResult WriteAndReadBack(const std::string& path, const std::string& data, bool direct);

  static std::unique_ptr<KubeEnvironment> env_;
  static std::string skip_reason_;
  static std::string start_error_;
};

}  // namespace blockcsi::testing
