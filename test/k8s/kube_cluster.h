// A real Kubernetes control plane for the `k8s` tests: etcd (Debian's
// etcd-server), kube-apiserver, kube-controller-manager and kube-scheduler
// from the peer programs (../shared/peers/bin/*.xz, unpacked into the build
// tree), all on 127.0.0.1 with ports of their own, a serving certificate and
// tokens made here. Other programs a test needs beside it (the CSI
// sidecars) are started through it too, so that every one is stopped by its
// pid when the cluster goes, also when the test fails. Objects are made and
// read with kubectl against this apiserver. Not thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi::testing {

// What a test asks of the control plane beyond the storage flow's needs.
struct KubeClusterOptions {
  // Run kube-controller-manager's node lifecycle, pod GC and StatefulSet
  // controllers too, with grace periods short enough for a test: a Node
  // whose kubelet stops renewing its Lease is Unknown after ~10 s. Only
  // for kubelets that heartbeat (KubeletSimulator::StartHeartbeat): the
  // node lifecycle controller marks any other Node Unknown at once.
  bool node_lifecycle = false;
};

struct KubectlResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  bool ok() const { return exit_code == 0; }
};

class KubeCluster {
 public:
  // Where the packed peer programs are: $BLOCKCSI_PEERS_DIR, else
  // <source>/../shared/peers/bin.
  static std::string PeersDir();
  // Why this machine cannot run the cluster at all (not root, no peers
  // directory, no etcd/kubectl/openssl/xz), or "" when it can.
  static std::string MissingCapability();
  // Unpacks `name` (e.g. "kube-apiserver") from PeersDir() into
  // <build>/peers once; its path, or "" with `error` set.
  static std::string UnpackPeer(const std::string& name, std::string* error);

  // Starts etcd, apiserver (waits for /readyz), controller-manager and
  // scheduler under `dir` (a directory of the test's own). nullptr with
  // `error` set (and everything started so far stopped) when it cannot.
  static std::unique_ptr<KubeCluster> Start(const std::string& dir, std::string* error);
  static std::unique_ptr<KubeCluster> Start(const std::string& dir, const KubeClusterOptions& options,
                                            std::string* error);
  // Stops every program it started, newest first, by pid.
  ~KubeCluster();
  KubeCluster(const KubeCluster&) = delete;
  KubeCluster& operator=(const KubeCluster&) = delete;

  const std::string& dir() const { return dir_; }
  // The admin's kubeconfig (system:masters).
  const std::string& kubeconfig() const { return admin_kubeconfig_; }
  // A kubeconfig for the ServiceAccount blockcsi/blockcsi-controller (a
  // token the apiserver knows as that account), so a program run with it
  // has exactly the RBAC that deploy/kubernetes/base/rbac-controller.yaml
  // grants once applied.
  const std::string& controller_kubeconfig() const { return controller_kubeconfig_; }
  // The same for blockcsi/blockcsi-node (the node plugins' account; the
  // base manifests grant it nothing, the fencing overlay its Lease).
  const std::string& node_kubeconfig() const { return node_kubeconfig_; }

  // Starts a program kept by name (stdout+stderr to <dir>/<name>.log), with
  // `env` set for it only. Replaces a stopped one of the same name.
  bool StartProgram(const std::string& name, const std::vector<std::string>& argv,
                    const std::map<std::string, std::string>& env, std::string* error);
  // SIGTERM, then SIGKILL after `grace`.
  void StopProgram(const std::string& name, std::chrono::milliseconds grace = std::chrono::seconds(3));
  bool ProgramRunning(const std::string& name);
  // Starts again, with the same argv, every kept program that has exited
  // (as kubelet restarts a container); the names restarted.
  std::vector<std::string> RestartExitedPrograms();
  std::string ProgramLogTail(const std::string& name, size_t bytes = 3000) const;
  // The pids of the programs running now (for a leak check to ignore).
  std::vector<pid_t> Pids();

  // kubectl --kubeconfig <admin> <args>, with `stdin_text` on its stdin.
  KubectlResult Kubectl(const std::vector<std::string>& args, const std::string& stdin_text = "") const;
  // kubectl apply -f - of a YAML/JSON text; false with kubectl's error.
  bool Apply(const std::string& manifest, std::string* error) const;
  // kubectl create -f - (for objects whose status is set on create, as
  // kubelet creates its Node).
  bool Create(const std::string& manifest, std::string* error) const;
  // One object as JSON, or nullopt when it does not exist (or kubectl fails).
  std::optional<nlohmann::json> Get(const std::string& kind, const std::string& name, const std::string& ns = "") const;
  // The items of a list ("" namespace: cluster-scoped; "*": all namespaces).
  std::vector<nlohmann::json> List(const std::string& kind, const std::string& ns = "") const;
  // Polls `done` every 200 ms until it is true or `timeout` passes.
  static bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout);

 private:
  struct Program {
    std::vector<std::string> argv;
    std::map<std::string, std::string> env;
    std::unique_ptr<ChildProcess> process;
  };
  KubeCluster() = default;
  bool MakeCredentials(std::string* error);
  bool StartEtcd(std::string* error);
  bool StartApiserver(std::string* error);
  bool Launch(const std::string& name, Program& program, std::string* error);

  std::string dir_;
  std::string admin_kubeconfig_;
  std::string controller_kubeconfig_;
  std::string node_kubeconfig_;
  std::unique_ptr<ReservedPort> etcd_port_;
  std::unique_ptr<ReservedPort> etcd_peer_port_;
  std::unique_ptr<ReservedPort> apiserver_port_;
  std::map<std::string, Program> programs_;
  std::vector<std::string> start_order_;
};

// A resource quantity ("128Mi", "1Gi", "1000", "2k") in bytes; -1 when it
// cannot be read.
int64_t QuantityBytes(const std::string& quantity);

// `text` with every "{{KEY}}" replaced by values[KEY].
std::string Fill(std::string text, const std::map<std::string, std::string>& values);

}  // namespace blockcsi::testing
