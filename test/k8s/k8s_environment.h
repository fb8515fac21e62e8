// Everything a `k8s` scenario runs against, started once per test binary:
// a private tgtd, `blockcsi --mode controller` (local backend) and
// `blockcsi --mode node` (userspace connector), the Kubernetes control plane
// (KubeCluster), the project's own manifests applied (namespace, controller
// RBAC, CSIDriver, StorageClasses), the three CSI sidecars with the flags of
// deploy/kubernetes/base/controller.yaml, and one Node whose kubelet is the
// KubeletSimulator. A second test file gets the same by deriving its fixture
// from KubeTest (k8s_test_base.h). With zones (KubeEnvironmentOptions), one
// storage host per zone instead — its own tgtd and pool, a local backend
// `zone-<name>` with `zone = <name>` in the controller's --backend-config —
// and one Node per zone, k8s-node-<name>, whose plugin runs with --zone.
// With fencing, two Nodes on the one storage host, k8s-node-a and
// k8s-node-b, whose kubelets heartbeat, a control plane that notices a dead
// node (KubeClusterOptions::node_lifecycle), and the fencing overlay's
// RBAC, flags and node kubeconfig (deploy/kubernetes/overlays/fencing).
// Not thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "k8s/kube_cluster.h"
#include "k8s/kubelet_simulator.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi::testing {

struct KubeEnvironmentOptions {
  // Empty: one storage host (the controller's local backend) and one Node.
  // Else the zones' names; the first zone's backend is the default.
  std::vector<std::string> zones;
  // A zone's pool directory (e.g. a small filesystem the test can fill);
  // default: under the environment's directory.
  std::map<std::string, std::string> zone_pools;
  // Fencing of dead nodes (no zones): two Nodes, fencing turned on.
  bool fencing = false;
};

// The fencing environment's times: a dead node is Unknown ~10 s after its
// last heartbeat (kube_cluster.cc) and fenced kFenceDeadAfter later.
inline constexpr std::chrono::seconds kFenceDeadAfter{5};
inline constexpr std::chrono::seconds kHeartbeatEvery{2};

class KubeEnvironment {
 public:
  // One storage host and the Node whose plugin reaches it (its zone's).
  struct Host {
    std::string zone;                   // empty without zones
    std::string node_name;              // its Node (and node id)
    std::unique_ptr<TgtdHarness> tgtd;  // null for the second Node on the fencing environment's host
    std::unique_ptr<PluginUnderTest> node_plugin;
    PluginOptions node_options;  // how its plugin was started
    std::unique_ptr<KubeletSimulator> kubelet;
  };

  // "" when this machine can run it; else the reason to skip.
  static std::string MissingCapability() { return KubeCluster::MissingCapability(); }
  // nullptr with `error` set when something would not start.
  static std::unique_ptr<KubeEnvironment> Start(std::string* error);
  static std::unique_ptr<KubeEnvironment> Start(const KubeEnvironmentOptions& options, std::string* error);
  // Sidecars and control plane first, then the plugins and tgtd, then
  // whatever is left mounted under the directory.
  ~KubeEnvironment();
  KubeEnvironment(const KubeEnvironment&) = delete;
  KubeEnvironment& operator=(const KubeEnvironment&) = delete;

  KubeCluster& cluster() { return *cluster_; }
  // The first host's (the only one without zones).
  TgtdHarness& tgtd() { return *hosts_.front().tgtd; }
  PluginUnderTest& controller() { return *controller_; }
  PluginUnderTest& node_plugin() { return *hosts_.front().node_plugin; }
  KubeletSimulator& kubelet() { return *hosts_.front().kubelet; }
  // The host of zone `zone` (one of the options' zones).
  Host& zone(const std::string& zone);
  // The host whose Node is `node_name`.
  Host& node(const std::string& node_name);
  // Starts a Node's plugin again with its flags (after a kill), and points
  // its kubelet at the new plugin.
  bool RestartNodePlugin(Host& host, std::string* error);
  const std::string& dir() const { return dir_.path(); }

  // The blockcsi controller again (after a kill), with the same flags plus
  // `fault_point` (see PluginOptions); then the sidecars that exited with
  // it are restarted, as kubelet restarts a container.
  bool RestartController(const std::string& fault_point, std::string* error);
  // The sidecars' arguments: those of the container `container` in
  // deploy/kubernetes/base/controller.yaml, with only what needs a pod
  // changed (see the .cc).
  std::vector<std::string> SidecarArgs(const std::string& container, std::string* error);
  // The text of a file under the source tree's deploy/.
  static std::string DeployFile(const std::string& relative);
  // Diagnostics for a failure message: each program's log tail.
  std::string Logs();

 private:
  KubeEnvironment() = default;
  bool StartSidecars(std::string* error);
  PluginOptions ControllerOptions() const;

  // The --backend-config of the zones' hosts.
  bool WriteZonesConfig(std::string* error);

  KubeEnvironmentOptions options_;
  TempDir dir_;
  std::unique_ptr<PluginUnderTest> controller_;
  std::unique_ptr<KubeCluster> cluster_;
  std::vector<Host> hosts_;  // at least one
};

// A PVC of `bytes` in class `storage_class` (raw block when `block`).
std::string PvcManifest(const std::string& ns, const std::string& name, const std::string& storage_class,
                        const std::string& size, bool block);
// A pod of one container using PVC `claim` (as a device when `block`).
std::string PodManifest(const std::string& ns, const std::string& name, const std::string& claim, bool block);

}  // namespace blockcsi::testing
