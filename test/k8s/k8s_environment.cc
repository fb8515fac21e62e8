#include "k8s/k8s_environment.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"

namespace blockcsi::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr char kNodeName[] = "k8s-node-1";

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

std::string KubeEnvironment::DeployFile(const std::string& relative) {
  return ReadFileOrEmpty(SourceDir() + "/deploy/" + relative);
}

PluginOptions KubeEnvironment::ControllerOptions() const {
  PluginOptions options;
  options.mode = "controller";
  options.node_id = "k8s-controller";
  // The controller's node check reads CSINode objects as its
  // ServiceAccount, with the RBAC of rbac-controller.yaml (item 4).
  options.extra_args = {"--kubeconfig", cluster_->controller_kubeconfig()};
  if (options_.fencing) {
    // The overlay's flags (controller-fencing.yaml) with the test's time.
    options.extra_args.insert(options.extra_args.end(),
                              {"--fence-dead-nodes-after=" + std::to_string(kFenceDeadAfter.count()) + "s",
                               "--taint-fenced-nodes", "--fence-namespace=blockcsi"});
  }
  if (!options_.zones.empty()) {
    options.backend = "";  // the file names them
    options.extra_args.push_back("--backend-config");
    options.extra_args.push_back(dir_.Join("controller/backends.conf"));
  }
  return options;
}

KubeEnvironment::Host& KubeEnvironment::zone(const std::string& zone) {
  for (auto& host : hosts_) {
    if (host.zone == zone) return host;
  }
  throw std::out_of_range("no zone " + zone + " in this environment");
}

bool KubeEnvironment::WriteZonesConfig(std::string* error) {
  std::string text;
  for (const auto& host : hosts_) {
    auto pool = options_.zone_pools.find(host.zone);
    text += "[backend zone-" + host.zone + "]\nkind = local\npool = " +
            (pool != options_.zone_pools.end() ? pool->second : dir_.Join("pool-" + host.zone)) +
            "\ntgt-control-port = " + std::to_string(host.tgtd->control_port()) + "\nportal = " + host.tgtd->portal() +
            "\nzone = " + host.zone + "\n" + (&host == &hosts_.front() ? "default = true\n" : "") + "\n";
  }
  Status st = WriteFileAtomically(dir_.Join("controller/backends.conf"), text);
  if (!st.ok()) *error = st.ToString();
  return st.ok();
}

KubeEnvironment::Host& KubeEnvironment::node(const std::string& node_name) {
  for (auto& host : hosts_) {
    if (host.node_name == node_name) return host;
  }
  throw std::out_of_range("no node " + node_name + " in this environment");
}

bool KubeEnvironment::RestartNodePlugin(Host& host, std::string* error) {
  if (!host.node_plugin->Start(host.node_options, error)) return false;
  host.kubelet->SetNodeStub(&host.node_plugin->node());
  return true;
}

std::unique_ptr<KubeEnvironment> KubeEnvironment::Start(std::string* error) { return Start({}, error); }

std::unique_ptr<KubeEnvironment> KubeEnvironment::Start(const KubeEnvironmentOptions& options, std::string* error) {
  std::unique_ptr<KubeEnvironment> env(new KubeEnvironment());
  env->options_ = options;
  const std::string& dir = env->dir_.path();
  if (options.fencing && !options.zones.empty()) {
    *error = "fencing runs two Nodes on one storage host, not zones";
    return nullptr;
  }
  for (const std::string& zone : options.zones.empty() ? std::vector<std::string>{""} : options.zones) {
    Host host;
    host.zone = zone;
    host.tgtd = TgtdHarness::Start(error);
    if (!host.tgtd) return nullptr;
    env->hosts_.push_back(std::move(host));
  }
  if (options.fencing) {
    env->hosts_.front().node_name = "k8s-node-a";
    env->hosts_.emplace_back().node_name = "k8s-node-b";  // the same tgtd
  }

  std::filesystem::create_directories(dir + "/cluster");
  env->cluster_ = KubeCluster::Start(dir + "/cluster", KubeClusterOptions{.node_lifecycle = options.fencing}, error);
  if (!env->cluster_) return nullptr;
  KubeCluster& cluster = *env->cluster_;
  std::filesystem::create_directories(dir + "/controller");
  env->controller_ = std::make_unique<PluginUnderTest>(
      dir + "/controller", options.zones.empty() ? env->hosts_.front().tgtd.get() : nullptr);
  if (!options.zones.empty() && !env->WriteZonesConfig(error)) return nullptr;
  if (!env->controller_->Start(env->ControllerOptions(), error)) return nullptr;
  for (auto& host : env->hosts_) {
    if (host.node_name.empty()) host.node_name = host.zone.empty() ? kNodeName : "k8s-node-" + host.zone;
    const std::string& name = host.node_name;
    std::filesystem::create_directories(dir + "/" + name);
    host.node_plugin = std::make_unique<PluginUnderTest>(dir + "/" + name, nullptr);
    PluginOptions& node = host.node_options;
    node.mode = "node";
    node.node_id = name;
    if (!host.zone.empty()) node.extra_args = {"--zone", host.zone};
    if (options.fencing) {
      // The overlay's node-fencing.yaml, with the node ServiceAccount's
      // token; a check every second (default 30 s) so that the test does
      // not wait, and a short bridge timeout so that a fenced node's I/O
      // fails within seconds once the target turned it away.
      node.extra_args = {"--kubeconfig",
                         cluster.node_kubeconfig(),
                         "--fence-namespace=blockcsi",
                         "--fence-check-interval",
                         "1s",
                         "--bridge-io-timeout",
                         "5s"};
    }
    if (!host.node_plugin->Start(node, error)) return nullptr;
  }

  // The project's manifests as a user applies them. Patched, and only
  // here: nothing (namespace, RBAC, CSIDriver are applied as they are).
  for (const char* file :
       {"kubernetes/base/namespace.yaml", "kubernetes/base/rbac-controller.yaml", "kubernetes/base/csidriver.yaml",
        "examples/storageclass-ext4.yaml", "examples/storageclass-xfs.yaml", "examples/storageclass-block.yaml"}) {
    if (!cluster.Apply(DeployFile(file), error)) {
      *error = std::string(file) + ": " + *error;
      return nullptr;
    }
  }
  // An Immediate class: the project's xfs class with its name and
  // volumeBindingMode changed (the project ships WaitForFirstConsumer only).
  std::string immediate = DeployFile("examples/storageclass-xfs.yaml");
  immediate.replace(immediate.find("name: blockcsi-xfs"), std::string("name: blockcsi-xfs").size(),
                    "name: blockcsi-xfs-immediate");
  immediate.replace(immediate.find("volumeBindingMode: WaitForFirstConsumer"),
                    std::string("volumeBindingMode: WaitForFirstConsumer").size(), "volumeBindingMode: Immediate");
  if (!cluster.Apply(immediate, error)) return nullptr;
  if (options.fencing && !cluster.Apply(DeployFile("kubernetes/overlays/fencing/rbac-fencing.yaml"), error)) {
    *error = "rbac-fencing.yaml: " + *error;
    return nullptr;
  }

  for (auto& host : env->hosts_) {
    const std::string& name = host.node_name;
    const std::string kubelet_dir = options.fencing     ? dir + "/kubelet-" + name
                                    : host.zone.empty() ? dir + "/kubelet"
                                                        : dir + "/kubelet-" + host.zone;
    std::filesystem::create_directories(kubelet_dir);
    host.kubelet = std::make_unique<KubeletSimulator>(&cluster, &host.node_plugin->node(), name, kubelet_dir);
    if (!host.kubelet->Register(error)) return nullptr;
    if (options.fencing && !host.kubelet->StartHeartbeat(kHeartbeatEvery, error)) return nullptr;
    host.kubelet->SetSupervisor([cluster = env->cluster_.get()] { cluster->RestartExitedPrograms(); });
  }
  if (!env->StartSidecars(error)) return nullptr;
  return env;
}

std::vector<std::string> KubeEnvironment::SidecarArgs(const std::string& container, std::string* error) {
  // kubectl reads the YAML (one document at a time: it prints several
  // objects as concatenated JSON texts).
  std::string manifest = DeployFile("kubernetes/base/controller.yaml");
  std::vector<Json> objects;
  for (size_t begin = 0; begin < manifest.size();) {
    size_t end = manifest.find("\n---", begin);
    if (end == std::string::npos) end = manifest.size();
    std::string document = manifest.substr(begin, end - begin);
    begin = end + 4;
    if (document.find("kind:") == std::string::npos) continue;
    KubectlResult r = cluster_->Kubectl({"create", "--dry-run=client", "-o", "json", "-f", "-"}, document);
    if (!r.ok()) {
      *error = "cannot read controller.yaml: " + r.err;
      return {};
    }
    objects.push_back(Json::parse(r.out, nullptr, false));
  }
  std::vector<std::string> args;
  for (const Json& item : objects) {
    if (!item.is_object() || item.value("kind", "") != "Deployment") continue;
    for (const Json& c : item.at("/spec/template/spec/containers"_json_pointer)) {
      if (c.value("name", "") != container) continue;
      for (const Json& a : c.value("args", Json::array())) {
        std::string arg = a.get<std::string>();
        // What needs the pod the manifest runs in: the socket is the test
        // controller's, there is one replica (no election), no port to
        // serve probes on, and no Deployment to own CSIStorageCapacity
        // objects (-1: no owner). Every other flag is the manifest's.
        if (StartsWith(arg, "--csi-address=")) {
          arg = "--csi-address=" + controller_->socket();
        } else if (arg == "--leader-election") {
          arg = "--leader-election=false";
        } else if (StartsWith(arg, "--leader-election-namespace=") || StartsWith(arg, "--http-endpoint=")) {
          continue;
        } else if (StartsWith(arg, "--capacity-ownerref-level=")) {
          arg = "--capacity-ownerref-level=-1";
        }
        args.push_back(arg);
      }
      args.push_back("--kubeconfig=" + cluster_->kubeconfig());
      return args;
    }
  }
  *error = "no container " + container + " in controller.yaml";
  return {};
}

bool KubeEnvironment::StartSidecars(std::string* error) {
  for (const char* sidecar : {"csi-provisioner", "csi-attacher", "csi-resizer"}) {
    std::string binary = KubeCluster::UnpackPeer(sidecar, error);
    if (binary.empty()) return false;
    std::vector<std::string> argv{binary};
    std::vector<std::string> args = SidecarArgs(sidecar, error);
    if (args.empty()) return false;
    argv.insert(argv.end(), args.begin(), args.end());
    // The provisioner names its CSIStorageCapacity objects' namespace and
    // owner after its pod (the downward API in the manifest).
    std::map<std::string, std::string> env;
    if (std::string(sidecar) == "csi-provisioner") env = {{"NAMESPACE", "blockcsi"}, {"POD_NAME", "blockcsi-test"}};
    if (!cluster_->StartProgram(sidecar, argv, env, error)) return false;
  }
  return true;
}

bool KubeEnvironment::RestartController(const std::string& fault_point, std::string* error) {
  PluginOptions options = ControllerOptions();
  options.fault_point = fault_point;
  if (!controller_->Start(options, error)) return false;
  cluster_->RestartExitedPrograms();
  return true;
}

std::string KubeEnvironment::Logs() {
  std::string logs;
  for (const char* name : {"csi-provisioner", "csi-attacher", "csi-resizer", "kube-controller-manager"}) {
    logs += std::string("---- ") + name + "\n" + cluster_->ProgramLogTail(name, 2000) + "\n";
  }
  logs += "---- blockcsi controller\n" + controller_->LogTail(2000) + "\n";
  for (auto& host : hosts_) {
    if (host.node_plugin) {
      logs += "---- blockcsi node " + host.node_name + "\n" + host.node_plugin->LogTail(2000) + "\n";
    }
  }
  return logs;
}

KubeEnvironment::~KubeEnvironment() {
  for (auto& host : hosts_) {
    if (host.kubelet) host.kubelet->StopHeartbeat();
  }
  cluster_.reset();
  for (auto& host : hosts_) {
    host.kubelet.reset();
    if (host.node_plugin) host.node_plugin->Stop(5s);
  }
  if (controller_) controller_->Stop(5s);
  CleanUpUnder(dir_.path());
  for (auto& host : hosts_) host.node_plugin.reset();
  controller_.reset();
  hosts_.clear();  // the tgtds
}

std::string PvcManifest(const std::string& ns, const std::string& name, const std::string& storage_class,
                        const std::string& size, bool block) {
  return Fill(
      R"(apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: {{NAME}}, namespace: {{NS}}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: {{CLASS}}
  volumeMode: {{MODE}}
  resources: {requests: {storage: {{SIZE}}}}
)",
      {{"NAME", name}, {"NS", ns}, {"CLASS", storage_class}, {"SIZE", size}, {"MODE", block ? "Block" : "Filesystem"}});
}

std::string PodManifest(const std::string& ns, const std::string& name, const std::string& claim, bool block) {
  std::string use =
      block ? "volumeDevices: [{name: data, devicePath: /dev/data}]" : "volumeMounts: [{name: data, mountPath: /data}]";
  return Fill(R"(apiVersion: v1
kind: Pod
metadata: {name: {{NAME}}, namespace: {{NS}}}
spec:
  containers:
  - {name: app, image: registry.k8s.io/pause:3.9, {{USE}}}
  volumes:
  - {name: data, persistentVolumeClaim: {claimName: {{CLAIM}}}}
)",
              {{"NAME", name}, {"NS", ns}, {"CLAIM", claim}, {"USE", use}});
}

}  // namespace blockcsi::testing
