// A dead node's StatefulSet pod moves by itself, and the dead node cannot
// write again, under the real control plane (kube-controller-manager with
// node lifecycle, pod GC and StatefulSet controllers, scheduler, attacher,
// provisioner) and two simulated kubelets A and B on one storage host. The
// pod web-0 runs on A and a sequence-numbered O_DIRECT|O_SYNC writer
// (test/vm/seq_writer.py) writes its raw block volume. A dies: its heartbeats
// stop, its node plugin is killed (its bridge, a process of its own, goes on
// serving), the writer is frozen with SIGSTOP in the middle of writing. Then,
// with nothing done by the test: node lifecycle marks A Unknown, the
// controller's watcher fences A and taints it out-of-service, pod GC
// force-deletes web-0, the attach-detach controller force-detaches, the
// StatefulSet controller makes web-0 again, the scheduler puts it on B, and
// B reads every record A's writer had acknowledged. The frozen writer is
// resumed: its next write fails, and nothing it wrote after the fence is on
// the volume (B's own records after A's last one are intact, byte for byte).
// A comes back: its plugin finds itself fenced, lets go of everything,
// reports; the watcher unfences A and lifts the taint. Timings are printed.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "contract/initiator.h"
#include "controller/fence_leases.h"
#include "k8s/k8s_test_base.h"

namespace blockcsi::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kBlock = 4096;
constexpr char kNs[] = "fence";
constexpr char kA[] = "k8s-node-a";
constexpr char kB[] = "k8s-node-b";
// Records B writes after A's last acknowledged one: A's writes after the
// fence, had any landed, would overwrite some of them.
constexpr int kBRecords = 16;

// The records seq_writer.py acknowledged ("ok N" lines), and its error line.
struct WriterLog {
  int last_ok = -1;
  std::string error;
};

WriterLog ReadWriterLog(const std::string& path) {
  WriterLog log;
  std::istringstream in(ReadFileOrEmpty(path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("ok ", 0) == 0) log.last_ok = std::max(log.last_ok, std::atoi(line.c_str() + 3));
    if (line.rfind("error ", 0) == 0) log.error = line;
  }
  return log;
}

// Block `index` of a block device, read with O_DIRECT (from the target, not
// a cache), up to its first NUL; "<error>" when it cannot be read.
std::string ReadRecord(int fd, int index) {
  void* buffer = nullptr;
  if (::posix_memalign(&buffer, kBlock, kBlock) != 0) return "<error>";
  std::unique_ptr<void, decltype(&std::free)> owned(buffer, &std::free);
  if (::pread(fd, buffer, kBlock, static_cast<off_t>(index) * kBlock) != static_cast<ssize_t>(kBlock)) {
    return "<error>";
  }
  return std::string(static_cast<const char*>(buffer), ::strnlen(static_cast<const char*>(buffer), kBlock));
}

bool WriteRecord(int fd, int index, const std::string& text) {
  void* buffer = nullptr;
  if (::posix_memalign(&buffer, kBlock, kBlock) != 0) return false;
  std::unique_ptr<void, decltype(&std::free)> owned(buffer, &std::free);
  std::memset(buffer, 0, kBlock);
  std::memcpy(buffer, text.data(), std::min(text.size(), kBlock));
  return ::pwrite(fd, buffer, kBlock, static_cast<off_t>(index) * kBlock) == static_cast<ssize_t>(kBlock);
}

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

bool HasOutOfServiceTaint(const Json& node) {
  for (const Json& taint : node.value(Json::json_pointer("/spec/taints"), Json::array())) {
    if (taint.value("key", "") == "node.kubernetes.io/out-of-service") return true;
  }
  return false;
}

class KubeFenceTest : public KubeTest {
 protected:
  static void SetUpTestSuite() {
    KubeEnvironmentOptions options;
    options.fencing = true;
    StartEnvironment(options);
  }
  static void TearDownTestSuite() { StopEnvironment(); }

  static KubeEnvironment::Host& Node(const char* name) { return env().node(name); }

  static std::optional<Json> FenceLease(const std::string& node) {
    return cluster().Get("lease", FenceLeaseName(node), "blockcsi");
  }

  // The nodes' plugins, the controller, the pool and tgtd, ignoring the
  // long-running programs.
  static std::vector<LeakScope> Scopes() {
    std::vector<LeakScope> scopes;
    for (const char* name : {kA, kB}) {
      LeakScope scope;
      scope.dir = env().dir();
      scope.state_dir = Node(name).node_plugin->state_dir();
      scope.pool_dir = env().controller().pool_dir();
      scope.tgtd = &env().tgtd();
      scope.ignore_pids = cluster().Pids();
      scope.ignore_pids.push_back(env().controller().pid());
      for (const char* n : {kA, kB}) scope.ignore_pids.push_back(Node(n).node_plugin->pid());
      scopes.push_back(scope);
    }
    return scopes;
  }
};

std::string StatefulSetManifest() {
  return Fill(R"(apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web, namespace: {{NS}}}
spec:
  serviceName: web
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - {name: writer, image: registry.k8s.io/pause:3.9, volumeDevices: [{name: data, devicePath: /dev/data}]}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: blockcsi-block
      volumeMode: Block
      resources: {requests: {storage: 64Mi}}
)",
              {{"NS", kNs}});
}

TEST_F(KubeFenceTest, ADeadNodesStatefulSetPodMovesByItselfAndTheDeadNodeCannotWriteAgain) {
  const LeakSnapshot baseline = TakeLeakSnapshot(Scopes());
  KubeEnvironment::Host& a = Node(kA);
  KubeEnvironment::Host& b = Node(kB);
  MakeNamespace(kNs);
  // web-0 starts on A: B is cordoned until it runs there.
  ASSERT_TRUE(cluster().Kubectl({"cordon", kB}).ok());
  Apply(StatefulSetManifest());
  RunningPod on_a;
  std::string error;
  ASSERT_TRUE(a.kubelet->RunPod(kNs, "web-0", &on_a, &error)) << error << "\n" << env().Logs();
  ASSERT_TRUE(on_a.block);
  ASSERT_TRUE(cluster().Kubectl({"uncordon", kB}).ok());
  const std::string target = on_a.publish_context["targetIqn"];

  // The pod's program: records until a write fails.
  const std::string writer_log = env().dir() + "/writer-a.log";
  ChildProcess writer({"/usr/bin/python3", SourceDir() + "/test/vm/seq_writer.py", on_a.pod.volume_path, writer_log},
                      env().dir() + "/writer-a.out");
  ASSERT_TRUE(WaitFor([&] { return ReadWriterLog(writer_log).last_ok >= 50 || !writer.running(); }, 60s));
  ASSERT_TRUE(writer.running()) << ReadFileOrEmpty(writer_log).substr(0, 2000);

  // A dies, its writer in the middle of writing.
  writer.Signal(SIGSTOP);
  a.kubelet->StopHeartbeat();
  a.node_plugin->Kill9();
  const Clock::time_point died = a.kubelet->last_heartbeat();
  const WriterLog frozen = ReadWriterLog(writer_log);
  ASSERT_TRUE(frozen.error.empty()) << frozen.error;
  std::cout << "[ fence    ] A's writer frozen after record " << frozen.last_ok << "\n";

  // Nothing more from the test until web-0 is on B.
  Clock::time_point fenced{}, tainted{}, scheduled_on_b{};
  std::string fence_id;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto now = Clock::now();
        if (fence_id.empty()) {
          if (auto lease = FenceLease(kA)) {
            if (fenced == Clock::time_point{}) fenced = now;
            fence_id = lease->value(Json::json_pointer("/metadata/annotations"), Json::object())
                           .value(fence_annotations::kFenceId, "");
          }
        }
        if (tainted == Clock::time_point{}) {
          if (auto node = cluster().Get("node", kA); node && HasOutOfServiceTaint(*node)) tainted = now;
        }
        auto pod = cluster().Get("pod", "web-0", kNs);
        if (pod && pod->value(Json::json_pointer("/spec/nodeName"), "") == kB) {
          scheduled_on_b = now;
          return true;
        }
        return false;
      },
      180s))
      << "web-0 did not move to B\n"
      << env().Logs();
  EXPECT_NE(fenced, Clock::time_point{}) << "web-0 moved, and no fence Lease was seen";
  EXPECT_NE(tainted, Clock::time_point{}) << "web-0 moved, and no out-of-service taint was seen";
  EXPECT_FALSE(fence_id.empty());
  RunningPod on_b;
  ASSERT_TRUE(b.kubelet->RunPod(kNs, "web-0", &on_b, &error)) << error << "\n" << env().Logs();
  ASSERT_EQ(on_b.volume_handle, on_a.volume_handle);

  // B has every record A's writer was told was written, and writes its own
  // after them.
  const int fd = ::open(on_b.pod.volume_path.c_str(), O_RDWR | O_DIRECT | O_SYNC);
  ASSERT_GE(fd, 0) << on_b.pod.volume_path << ": " << std::strerror(errno);
  for (int i = 0; i <= frozen.last_ok; ++i) {
    ASSERT_EQ(ReadRecord(fd, i), "seq " + std::to_string(i) + "\n") << "record " << i << " on B";
  }
  for (int i = 1; i <= kBRecords; ++i) {
    ASSERT_TRUE(WriteRecord(fd, frozen.last_ok + i, "b " + std::to_string(i) + "\n")) << std::strerror(errno);
  }
  const Clock::time_point b_wrote = Clock::now();
  std::cout << "[ fence    ] from A's last heartbeat: fenced " << Seconds(died, fenced) << " s, tainted "
            << Seconds(died, tainted) << " s, web-0 on B " << Seconds(died, scheduled_on_b)
            << " s, B wrote its first record " << Seconds(died, b_wrote) << " s\n";
  EXPECT_LE(Seconds(died, b_wrote), 90.0) << "the issue's bound for the test's shortened grace periods";
  // A fenced node no longer reaches the target.
  auto acl = AclOf(target);
  EXPECT_EQ(std::find(acl.begin(), acl.end(), InitiatorIqnForNode(kA)), acl.end()) << "A is still in the ACL";

  // A's frozen writer goes on: its next write fails, nothing it writes lands.
  const Clock::time_point resumed = Clock::now();
  writer.Signal(SIGCONT);
  EXPECT_GE(writer.Wait(120s), 0) << "A's writer still writes 120 s after it was resumed";
  const WriterLog after = ReadWriterLog(writer_log);
  EXPECT_FALSE(after.error.empty()) << "A's writer stopped with no failed write";
  // The write in flight when it froze may have been acknowledged since; no
  // later one.
  EXPECT_LE(after.last_ok, frozen.last_ok + 1) << "A wrote records after its fence";
  std::cout << "[ fence    ] A's writer resumed: " << after.error << " after " << Seconds(resumed, Clock::now())
            << " s\n";
  for (int i = 0; i <= frozen.last_ok; ++i) {
    EXPECT_EQ(ReadRecord(fd, i), "seq " + std::to_string(i) + "\n") << "record " << i << " on B after A resumed";
  }
  for (int i = 1; i <= kBRecords; ++i) {
    EXPECT_EQ(ReadRecord(fd, frozen.last_ok + i), "b " + std::to_string(i) + "\n")
        << "B's record " << i << " was overwritten after the fence";
  }
  ::close(fd);

  // A comes back: its plugin cleans up and reports, the watcher unfences
  // it and lifts the taint; A's kubelet lets go of the pod it had.
  const Clock::time_point back = Clock::now();
  ASSERT_TRUE(env().RestartNodePlugin(a, &error)) << error;
  ASSERT_TRUE(a.kubelet->StartHeartbeat(kHeartbeatEvery, &error)) << error;
  Clock::time_point reported{};
  EXPECT_TRUE(WaitFor(
      [&] {
        auto lease = FenceLease(kA);
        if (lease && reported == Clock::time_point{} &&
            lease->value(Json::json_pointer("/metadata/annotations"), Json::object())
                    .value(fence_annotations::kCleanedUp, "") == fence_id) {
          reported = Clock::now();
        }
        auto node = cluster().Get("node", kA);
        return !lease && node && !HasOutOfServiceTaint(*node);
      },
      120s))
      << "A was not unfenced and untainted\n"
      << env().Logs();
  EXPECT_NE(reported, Clock::time_point{}) << "A was unfenced before anyone saw its report";
  std::cout << "[ fence    ] A back: reported its cleanup " << Seconds(back, reported) << " s, unfenced and untainted "
            << Seconds(back, Clock::now()) << " s after its plugin restarted\n";
  std::vector<std::string> released = a.kubelet->ReleaseDeletedPods(&error);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_EQ(released, std::vector<std::string>{std::string(kNs) + "/web-0"});

  // The set goes, and its pod stays (no garbage collector runs here, so a
  // background delete leaves the pod to B's kubelet and nobody makes it
  // again), then the pod and the volume.
  KubectlResult deleted = cluster().Kubectl({"delete", "statefulset", "web", "-n", kNs, "--cascade=background"});
  ASSERT_TRUE(deleted.ok()) << deleted.err;
  ASSERT_TRUE(b.kubelet->DeletePod(on_b, &error)) << error;
  EXPECT_TRUE(WaitFor([&] { return !cluster().Get("volumeattachment", on_b.attachment).has_value(); }, 90s))
      << env().Logs();
  DeletePvcAndWaitGone(on_b);
  // The heartbeats' kubectl runs name the environment's directory: none may
  // be running while the leak checker looks for processes.
  a.kubelet->StopHeartbeat();
  b.kubelet->StopHeartbeat();
  std::vector<std::string> left = NewItemsAfterSettling(baseline, Scopes());
  EXPECT_TRUE(left.empty()) << "left behind:\n" << DescribeItems(left);
}

}  // namespace
}  // namespace blockcsi::testing
