#include "k8s/kube_cluster.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/executor.h"

namespace blockcsi::testing {
namespace {

using namespace std::chrono_literals;

const char* const kPeers[] = {
    "kube-apiserver", "kube-controller-manager", "kube-scheduler", "csi-provisioner", "csi-attacher", "csi-resizer"};

bool WriteFile(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return false;
  return ::chmod(path.c_str(), mode) == 0;
}

std::string RandomToken() {
  std::random_device rd;
  std::ostringstream out;
  for (int i = 0; i < 4; ++i) out << std::hex << rd();
  return out.str();
}

Executor& Exec() {
  static std::unique_ptr<Executor> executor = MakeProcessExecutor();
  return *executor;
}

// Runs a helper program (openssl, xz); "" or why it failed.
std::string RunTool(const Command& command) {
  auto result = Exec().Run(command);
  if (!result.ok()) return command.Redacted() + ": " + result.status().message();
  if (!result->ok()) return command.Redacted() + ": " + result->stderr_text;
  return "";
}

std::string Kubeconfig(const std::string& server, const std::string& ca, const std::string& user,
                       const std::string& token) {
  return Fill(R"(apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "{{SERVER}}", certificate-authority: "{{CA}}"}
users:
- name: {{USER}}
  user: {token: "{{TOKEN}}"}
contexts:
- name: test
  context: {cluster: test, user: {{USER}}}
current-context: test
)",
              {{"SERVER", server}, {"CA", ca}, {"USER", user}, {"TOKEN", token}});
}

}  // namespace

std::string Fill(std::string text, const std::map<std::string, std::string>& values) {
  for (const auto& [key, value] : values) {
    std::string pattern = "{{" + key + "}}";
    for (size_t at = text.find(pattern); at != std::string::npos; at = text.find(pattern, at + value.size())) {
      text.replace(at, pattern.size(), value);
    }
  }
  return text;
}

int64_t QuantityBytes(const std::string& quantity) {
  static const std::map<std::string, int64_t> kUnits{
      {"", 1},      {"k", 1000},         {"M", 1000 * 1000},         {"G", 1000 * 1000 * 1000},
      {"Ki", 1024}, {"Mi", 1024 * 1024}, {"Gi", 1024 * 1024 * 1024}, {"Ti", int64_t{1024} * 1024 * 1024 * 1024}};
  size_t digits = 0;
  while (digits < quantity.size() && std::isdigit(static_cast<unsigned char>(quantity[digits]))) ++digits;
  auto unit = kUnits.find(quantity.substr(digits));
  if (digits == 0 || unit == kUnits.end()) return -1;
  return std::stoll(quantity.substr(0, digits)) * unit->second;
}

std::string KubeCluster::PeersDir() {
  // A worktree of a clone is not beside ../shared: it names it.
  if (const char* dir = std::getenv("BLOCKCSI_PEERS_DIR"); dir != nullptr && *dir != '\0') return dir;
  return std::filesystem::weakly_canonical(SourceDir() + "/../shared/peers/bin").string();
}

std::string KubeCluster::MissingCapability() {
  if (!IsRoot()) return "requires root (the control plane and tgtd run as root here)";
  std::error_code ec;
  if (!std::filesystem::is_directory(PeersDir(), ec)) {
    return "no peer programs at " + PeersDir() + " (a clone without ../shared/peers cannot run the k8s label)";
  }
  for (const char* peer : kPeers) {
    if (!std::filesystem::exists(PeersDir() + "/" + peer + ".xz", ec)) {
      return std::string("peer program ") + peer + ".xz missing in " + PeersDir();
    }
  }
  for (const char* program : {"etcd", "kubectl", "openssl", "xz"}) {
    if (!HaveProgram(program)) {
      return std::string(program) + " is not installed (hack/install-deps.sh installs it)";
    }
  }
  return TgtdHarness::MissingCapability();
}

std::string KubeCluster::UnpackPeer(const std::string& name, std::string* error) {
  std::string dir = BuildDir() + "/peers";
  std::string path = dir + "/" + name;
  std::string packed = PeersDir() + "/" + name + ".xz";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (std::filesystem::exists(path, ec) &&
      std::filesystem::last_write_time(path, ec) >= std::filesystem::last_write_time(packed, ec)) {
    return path;
  }
  // Unpacked under a private name and renamed: two test binaries unpacking
  // at once each see a whole program or none.
  std::string partial = path + ".part." + std::to_string(::getpid());
  {
    ChildProcess xz({"/usr/bin/xz", "-dc", packed}, partial);
    if (xz.Wait(120s) != 0) {
      std::filesystem::remove(partial, ec);
      *error = "cannot unpack " + packed;
      return "";
    }
  }
  ::chmod(partial.c_str(), 0755);
  std::filesystem::rename(partial, path, ec);
  if (ec) {
    *error = "cannot rename " + partial + ": " + ec.message();
    return "";
  }
  return path;
}

std::unique_ptr<KubeCluster> KubeCluster::Start(const std::string& dir, std::string* error) {
  return Start(dir, KubeClusterOptions{}, error);
}

std::unique_ptr<KubeCluster> KubeCluster::Start(const std::string& dir, const KubeClusterOptions& options,
                                                std::string* error) {
  std::unique_ptr<KubeCluster> cluster(new KubeCluster());
  cluster->dir_ = dir;
  if (!cluster->MakeCredentials(error) || !cluster->StartEtcd(error) || !cluster->StartApiserver(error)) {
    return nullptr;
  }
  std::string kcm = UnpackPeer("kube-controller-manager", error);
  std::string scheduler = UnpackPeer("kube-scheduler", error);
  if (kcm.empty() || scheduler.empty()) return nullptr;
  // The controllers a storage flow needs: the binder (binds PVCs, waits
  // for the first consumer), the protection finalizers, and the
  // attach-detach controller (makes VolumeAttachments for scheduled pods).
  // No node lifecycle controller unless asked: it needs kubelet heartbeats.
  std::vector<std::string> kcm_argv{kcm,
                                    "--kubeconfig",
                                    cluster->admin_kubeconfig_,
                                    "--leader-elect=false",
                                    "--secure-port=0",
                                    "--use-service-account-credentials=false",
                                    "--v=2"};
  if (!options.node_lifecycle) {
    kcm_argv.push_back("--controllers=persistentvolume-binder,pvc-protection,pv-protection,attachdetach");
  } else {
    // A dead node as Kubernetes sees one, faster: Unknown 10 s after its
    // last heartbeat (default 40 s), looked at every 2 s (5 s). Its pods
    // are then evicted by the NoExecute taints (node lifecycle's taint
    // manager), force-deleted by pod GC once it also has the out-of-service
    // taint (NodeOutOfServiceVolumeDetach, on by default in 1.26), and the
    // StatefulSet controller makes the pod again elsewhere.
    kcm_argv.insert(kcm_argv.end(),
                    {"--controllers=persistentvolume-binder,pvc-protection,pv-protection,attachdetach,nodelifecycle,"
                     "podgc,statefulset",
                     "--node-monitor-period=2s", "--node-monitor-grace-period=10s", "--node-startup-grace-period=20s"});
  }
  if (!cluster->StartProgram("kube-controller-manager", kcm_argv, {}, error) ||
      !cluster->StartProgram(
          "kube-scheduler",
          {scheduler, "--kubeconfig", cluster->admin_kubeconfig_, "--leader-elect=false", "--secure-port=0", "--v=2"},
          {}, error)) {
    return nullptr;
  }
  return cluster;
}

bool KubeCluster::MakeCredentials(std::string* error) {
  const std::string d = dir_ + "/pki";
  std::filesystem::create_directories(d);
  std::string why;
  auto run = [&](Command c) {
    if (!why.empty()) return;
    why = RunTool(c.Timeout(60s));
  };
  run(Command("openssl").Args({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                               "-keyout", d + "/ca.key", "-out", d + "/ca.crt", "-days", "2", "-subj",
                               "/CN=blockcsi-k8s-test-ca"}));
  run(Command("openssl").Args({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                               d + "/apiserver.key", "-out", d + "/apiserver.csr", "-subj", "/CN=kube-apiserver"}));
  if (why.empty() && !WriteFile(d + "/san.ext", "subjectAltName=IP:127.0.0.1,DNS:localhost\n")) why = "san.ext";
  run(Command("openssl").Args({"x509", "-req", "-in", d + "/apiserver.csr", "-CA", d + "/ca.crt", "-CAkey",
                               d + "/ca.key", "-CAcreateserial", "-out", d + "/apiserver.crt", "-days", "2", "-extfile",
                               d + "/san.ext"}));
  // The service-account signing key (RSA: the apiserver's default issuer
  // algorithm).
  run(Command("openssl").Args({"genrsa", "-out", d + "/sa.key", "2048"}));
  run(Command("openssl").Args({"rsa", "-in", d + "/sa.key", "-pubout", "-out", d + "/sa.pub"}));
  if (!why.empty()) {
    *error = "cannot make the cluster's certificates: " + why;
    return false;
  }
  std::string admin_token = RandomToken();
  std::string controller_token = RandomToken();
  std::string node_token = RandomToken();
  // The second line is the controller's ServiceAccount by name: RBAC
  // matches a ServiceAccount subject by that user name, so the manifests'
  // bindings apply to it as they would to the real account's token.
  if (!WriteFile(d + "/tokens.csv", admin_token + ",admin,admin-uid,\"system:masters\"\n" + controller_token +
                                        ",system:serviceaccount:blockcsi:blockcsi-controller,blockcsi-controller-uid,"
                                        "\"system:serviceaccounts,system:serviceaccounts:blockcsi\"\n" +
                                        node_token +
                                        ",system:serviceaccount:blockcsi:blockcsi-node,blockcsi-node-uid,"
                                        "\"system:serviceaccounts,system:serviceaccounts:blockcsi\"\n")) {
    *error = "cannot write the token file";
    return false;
  }
  return true;
}

bool KubeCluster::StartEtcd(std::string* error) {
  etcd_port_ = std::make_unique<ReservedPort>(ReservedPort::Use::kForServer);
  etcd_peer_port_ = std::make_unique<ReservedPort>(ReservedPort::Use::kForServer);
  if (etcd_port_->port() == 0 || etcd_peer_port_->port() == 0) {
    *error = "no free port for etcd";
    return false;
  }
  std::string client = "http://127.0.0.1:" + std::to_string(etcd_port_->port());
  std::string peer = "http://127.0.0.1:" + std::to_string(etcd_peer_port_->port());
  if (!StartProgram(
          "etcd",
          {"/usr/bin/etcd", "--name", "k8s-test", "--data-dir", dir_ + "/etcd", "--listen-client-urls", client,
           "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
           "--initial-cluster", "k8s-test=" + peer, "--log-level", "warn"},
          {}, error)) {
    return false;
  }
  return true;
}

bool KubeCluster::StartApiserver(std::string* error) {
  std::string apiserver = UnpackPeer("kube-apiserver", error);
  if (apiserver.empty()) return false;
  const std::string d = dir_ + "/pki";
  std::string tokens = ReadFileOrEmpty(d + "/tokens.csv");
  std::string admin_token = tokens.substr(0, tokens.find(','));
  std::string second = tokens.substr(tokens.find('\n') + 1);
  std::string controller_token = second.substr(0, second.find(','));
  std::string third = second.substr(second.find('\n') + 1);
  std::string node_token = third.substr(0, third.find(','));
  // The apiserver cannot bind port 0 (it must know its port to advertise
  // it): a port held by ReservedPort, and another one when it still cannot
  // bind (another program that does not set SO_REUSEADDR took it).
  for (int attempt = 0; attempt < 3; ++attempt) {
    apiserver_port_ = std::make_unique<ReservedPort>(ReservedPort::Use::kForServer);
    std::string port = std::to_string(apiserver_port_->port());
    std::string server = "https://127.0.0.1:" + port;
    admin_kubeconfig_ = dir_ + "/admin.kubeconfig";
    controller_kubeconfig_ = dir_ + "/controller.kubeconfig";
    node_kubeconfig_ = dir_ + "/node.kubeconfig";
    if (!WriteFile(admin_kubeconfig_, Kubeconfig(server, d + "/ca.crt", "admin", admin_token)) ||
        !WriteFile(controller_kubeconfig_,
                   Kubeconfig(server, d + "/ca.crt", "blockcsi-controller", controller_token)) ||
        !WriteFile(node_kubeconfig_, Kubeconfig(server, d + "/ca.crt", "blockcsi-node", node_token))) {
      *error = "cannot write kubeconfigs";
      return false;
    }
    std::string log = dir_ + "/kube-apiserver.log";
    std::error_code ec;
    std::filesystem::remove(log, ec);
    // Admission: no ServiceAccount plugin (no token controller runs, and
    // no pod here needs a token), no TaintNodesByCondition (it taints a
    // new Node not-ready, and only the node lifecycle controller, which
    // needs kubelet heartbeats, would lift it).
    if (!StartProgram(
            "kube-apiserver",
            {apiserver, "--etcd-servers", "http://127.0.0.1:" + std::to_string(etcd_port_->port()),
             "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + port,
             "--tls-cert-file=" + d + "/apiserver.crt", "--tls-private-key-file=" + d + "/apiserver.key",
             "--service-account-key-file=" + d + "/sa.pub", "--service-account-signing-key-file=" + d + "/sa.key",
             "--service-account-issuer=https://kubernetes.default.svc", "--token-auth-file=" + d + "/tokens.csv",
             "--authorization-mode=RBAC", "--service-cluster-ip-range=10.96.0.0/24",
             "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition", "--enable-priority-and-fairness=false",
             "--profiling=false", "--endpoint-reconciler-type=none", "--v=1"},
            {}, error)) {
      return false;
    }
    bool ready = WaitFor(
        [&] {
          if (!ProgramRunning("kube-apiserver")) return true;
          return Kubectl({"get", "--raw", "/readyz", "--request-timeout=2s"}).ok();
        },
        60s);
    if (ready && ProgramRunning("kube-apiserver")) return true;
    std::string tail = ProgramLogTail("kube-apiserver");
    StopProgram("kube-apiserver");
    if (tail.find("address already in use") == std::string::npos) {
      *error = "kube-apiserver did not become ready; log:\n" + tail;
      return false;
    }
  }
  *error = "kube-apiserver: no port it could bind";
  return false;
}

KubeCluster::~KubeCluster() {
  for (auto it = start_order_.rbegin(); it != start_order_.rend(); ++it) StopProgram(*it, 2s);
}

bool KubeCluster::Launch(const std::string& name, Program& program, std::string* error) {
  std::vector<std::string> argv;
  if (!program.env.empty()) {
    // env(1) execs the program: the pid stays the program's.
    argv.push_back("/usr/bin/env");
    for (const auto& [k, v] : program.env) argv.push_back(k + "=" + v);
  }
  argv.insert(argv.end(), program.argv.begin(), program.argv.end());
  program.process = std::make_unique<ChildProcess>(argv, dir_ + "/" + name + ".log");
  std::this_thread::sleep_for(100ms);
  if (!program.process->running()) {
    if (error != nullptr) *error = name + " exited at start; log:\n" + ProgramLogTail(name);
    return false;
  }
  return true;
}

bool KubeCluster::StartProgram(const std::string& name, const std::vector<std::string>& argv,
                               const std::map<std::string, std::string>& env, std::string* error) {
  StopProgram(name);
  Program& program = programs_[name];
  program.argv = argv;
  program.env = env;
  if (std::find(start_order_.begin(), start_order_.end(), name) == start_order_.end()) start_order_.push_back(name);
  return Launch(name, program, error);
}

void KubeCluster::StopProgram(const std::string& name, std::chrono::milliseconds grace) {
  auto it = programs_.find(name);
  if (it == programs_.end() || !it->second.process) return;
  ChildProcess& process = *it->second.process;
  if (process.running()) {
    process.Signal(SIGTERM);
    if (process.Wait(grace) < 0) process.Signal(SIGKILL);
  }
  it->second.process.reset();  // SIGKILL and reap if still there
}

bool KubeCluster::ProgramRunning(const std::string& name) {
  auto it = programs_.find(name);
  return it != programs_.end() && it->second.process && it->second.process->running();
}

std::vector<std::string> KubeCluster::RestartExitedPrograms() {
  std::vector<std::string> restarted;
  for (const std::string& name : start_order_) {
    Program& program = programs_[name];
    if (!program.process || program.process->running()) continue;
    program.process.reset();
    if (Launch(name, program, nullptr)) restarted.push_back(name);
  }
  return restarted;
}

std::vector<pid_t> KubeCluster::Pids() {
  std::vector<pid_t> pids;
  for (auto& [name, program] : programs_) {
    if (program.process && program.process->running()) pids.push_back(program.process->pid());
  }
  return pids;
}

std::string KubeCluster::ProgramLogTail(const std::string& name, size_t bytes) const {
  std::string log = ReadFileOrEmpty(dir_ + "/" + name + ".log");
  return log.size() > bytes ? log.substr(log.size() - bytes) : log;
}

KubectlResult KubeCluster::Kubectl(const std::vector<std::string>& args, const std::string& stdin_text) const {
  Command command("kubectl");
  command.Arg("--kubeconfig=" + admin_kubeconfig_).Args(args).Timeout(60s);
  if (!stdin_text.empty()) command.Stdin(stdin_text);
  KubectlResult result;
  auto run = Exec().Run(command);
  if (!run.ok()) {
    result.err = run.status().message();
    return result;
  }
  result.exit_code = run->exit_code;
  result.out = run->stdout_text;
  result.err = run->stderr_text;
  return result;
}

bool KubeCluster::Apply(const std::string& manifest, std::string* error) const {
  KubectlResult r = Kubectl({"apply", "-f", "-"}, manifest);
  if (!r.ok() && error != nullptr) *error = "kubectl apply: " + r.err;
  return r.ok();
}

bool KubeCluster::Create(const std::string& manifest, std::string* error) const {
  KubectlResult r = Kubectl({"create", "-f", "-"}, manifest);
  if (!r.ok() && error != nullptr) *error = "kubectl create: " + r.err;
  return r.ok();
}

std::optional<nlohmann::json> KubeCluster::Get(const std::string& kind, const std::string& name,
                                               const std::string& ns) const {
  std::vector<std::string> args{"get", kind, name, "-o", "json"};
  if (!ns.empty()) args.insert(args.end(), {"-n", ns});
  KubectlResult r = Kubectl(args);
  if (!r.ok()) return std::nullopt;
  auto parsed = nlohmann::json::parse(r.out, nullptr, false);
  if (parsed.is_discarded()) return std::nullopt;
  return parsed;
}

std::vector<nlohmann::json> KubeCluster::List(const std::string& kind, const std::string& ns) const {
  std::vector<std::string> args{"get", kind, "-o", "json"};
  if (ns == "*") {
    args.push_back("--all-namespaces");
  } else if (!ns.empty()) {
    args.insert(args.end(), {"-n", ns});
  }
  KubectlResult r = Kubectl(args);
  std::vector<nlohmann::json> items;
  if (!r.ok()) return items;
  auto parsed = nlohmann::json::parse(r.out, nullptr, false);
  if (parsed.is_discarded() || !parsed.contains("items")) return items;
  for (const auto& item : parsed["items"]) items.push_back(item);
  return items;
}

bool KubeCluster::WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(200ms);
  }
}

}  // namespace blockcsi::testing
