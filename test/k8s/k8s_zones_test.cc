// Several storage hosts in zones under a real Kubernetes control plane
// (issue #20 item 3): the KubeTest environment with two zones — two storage
// hosts (each its own tgtd and pool, local backends `zone-a` and `zone-b`
// with `zone = a|b` in the controller's --backend-config) and two Nodes,
// k8s-node-a and k8s-node-b, whose plugins run with `--zone a|b` (the CO
// simulator is their kubelet). The project's ext4 class (WaitForFirstConsumer)
// with the provisioner's flags from the manifests (Topology,
// --enable-capacity). Zone b's pool is a 48 MiB tmpfs, so that a 64 MiB
// volume does not fit there while a small one does.
// Needs root, tgtd, etcd, kubectl and ../shared/peers; skips otherwise.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/executor.h"
#include "contract/initiator.h"
#include "k8s/k8s_test_base.h"

namespace blockcsi::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr char kZoneKey[] = "topology.blockcsi.io/zone";
constexpr int64_t kZoneBPoolBytes = 48LL << 20;

std::string Str(const Json& j, const char* pointer) {
  Json::json_pointer p(pointer);
  return j.contains(p) && j.at(p).is_string() ? j.at(p).get<std::string>() : "";
}

bool RunCommand(const std::vector<std::string>& argv, std::string* out) {
  Command c(argv[0]);
  for (size_t i = 1; i < argv.size(); ++i) c.Arg(argv[i]);
  c.Timeout(30s);
  auto r = MakeProcessExecutor()->Run(c);
  if (!r.ok()) {
    *out = r.status().message();
    return false;
  }
  *out = r->stdout_text + r->stderr_text;
  return r->exit_code == 0;
}

// A pod of one container using PVC `claim`, pinned to zone `zone` by a
// nodeSelector on the label kubelet puts on the Node from NodeGetInfo.
std::string PinnedPod(const std::string& ns, const std::string& name, const std::string& claim,
                      const std::string& zone) {
  return Fill(R"(apiVersion: v1
kind: Pod
metadata: {name: {{NAME}}, namespace: {{NS}}}
spec:
  nodeSelector: {topology.blockcsi.io/zone: {{ZONE}}}
  containers:
  - {name: app, image: registry.k8s.io/pause:3.9, volumeMounts: [{name: data, mountPath: /data}]}
  volumes:
  - {name: data, persistentVolumeClaim: {claimName: {{CLAIM}}}}
)",
              {{"NAME", name}, {"NS", ns}, {"CLAIM", claim}, {"ZONE", zone}});
}

class KubeZones : public KubeTest {
 protected:
  static void SetUpTestSuite() {
    if (!KubeEnvironment::MissingCapability().empty()) {
      StartEnvironment({});  // records the skip reason
      return;
    }
    pool_fs_ = std::make_unique<TempDir>();
    std::string out;
    if (!RunCommand(
            {"mount", "-t", "tmpfs", "-o", "size=" + std::to_string(kZoneBPoolBytes), "tmpfs", pool_fs_->path()},
            &out)) {
      start_error_ = "tmpfs for zone b's pool: " + out;
      return;
    }
    mounted_ = true;
    KubeEnvironmentOptions options;
    options.zones = {"a", "b"};
    options.zone_pools["b"] = pool_fs_->Join("pool");
    StartEnvironment(options);
  }
  static void TearDownTestSuite() {
    StopEnvironment();  // before its pool's tmpfs goes
    std::string out;
    if (mounted_ && !RunCommand({"umount", pool_fs_->path()}, &out)) ADD_FAILURE() << "umount zone b's tmpfs: " << out;
    mounted_ = false;
    pool_fs_.reset();
  }
  static KubeEnvironment::Host& zone(const std::string& name) { return env().zone(name); }

  // The PV's required node affinity as "key In [values]" terms.
  static std::vector<std::string> NodeAffinity(const Json& pv) {
    std::vector<std::string> terms;
    const Json::json_pointer p("/spec/nodeAffinity/required/nodeSelectorTerms");
    if (!pv.contains(p)) return terms;
    for (const Json& term : pv.at(p)) {
      for (const Json& e : term.value("matchExpressions", Json::array())) {
        std::string values;
        for (const Json& v : e.value("values", Json::array()))
          values += (values.empty() ? "" : ",") + v.get<std::string>();
        terms.push_back(e.value("key", "") + " " + e.value("operator", "") + " [" + values + "]");
      }
    }
    return terms;
  }

  // Runs pod ns/name on zone `z`'s Node and checks where its volume went:
  // its id names the zone's backend, the PV's node affinity is the zone,
  // the target is on that zone's tgtd (with the Node's initiator in its
  // ACL) and not on the other's; data goes through.
  void ExpectRunsOnZone(const std::string& ns, const std::string& name, const std::string& z, const std::string& other,
                        RunningPod* pod) {
    std::string error;
    ASSERT_TRUE(zone(z).kubelet->RunPod(ns, name, pod, &error)) << error << "\n" << env().Logs();
    EXPECT_TRUE(pod->volume_handle.starts_with("zone-" + z + "~")) << pod->volume_handle;
    auto pv = cluster().Get("pv", pod->pv);
    ASSERT_TRUE(pv.has_value());
    EXPECT_EQ(NodeAffinity(*pv), std::vector<std::string>{std::string(kZoneKey) + " In [" + z + "]"}) << pv->dump();
    const std::string target = pod->publish_context["targetIqn"];
    auto acl = AclOf(target, *zone(z).tgtd);
    EXPECT_EQ(acl, std::vector<std::string>{InitiatorIqnForNode(zone(z).kubelet->node_id())})
        << "the ACL of " << target << " on zone " << z << "'s tgtd";
    EXPECT_EQ(zone(other).tgtd->ShowTargets().find(target), std::string::npos)
        << "zone " << other << "'s tgtd exports " << target;
    EXPECT_EQ(pod->publish_context["portals"], zone(z).tgtd->portal());
    EXPECT_TRUE(WriteAndReadBack(pod->pod.volume_path + "/hello", "zone " + z + "\n", false));
  }

  // What DeletePodAndWaitDetached and DeletePvcAndWaitGone check, on zone
  // `z`'s kubelet and tgtd.
  void DeleteOnZone(const std::string& z, const RunningPod& pod) {
    std::string error;
    ASSERT_TRUE(zone(z).kubelet->DeletePod(pod, &error)) << error;
    ASSERT_TRUE(WaitFor([&] { return !cluster().Get("volumeattachment", pod.attachment).has_value(); }, 90s))
        << "VolumeAttachment " << pod.attachment << " was not detached\n"
        << env().Logs();
    const std::string target = pod.publish_context.count("targetIqn") ? pod.publish_context.at("targetIqn") : "";
    EXPECT_TRUE(AclOf(target, *zone(z).tgtd).empty()) << "the ACL of " << target << " after the detach";
    KubectlResult r = cluster().Kubectl({"delete", "pvc", pod.pvc, "-n", pod.ns, "--wait=false"});
    ASSERT_TRUE(r.ok()) << r.err;
    EXPECT_TRUE(WaitFor([&] { return !cluster().Get("pv", pod.pv).has_value(); }, 90s))
        << "PV " << pod.pv << " was not deleted\n"
        << env().Logs();
    EXPECT_EQ(zone(z).tgtd->ShowTargets().find(target), std::string::npos) << target << " still exported";
  }

  static std::unique_ptr<TempDir> pool_fs_;
  static bool mounted_;
};

std::unique_ptr<TempDir> KubeZones::pool_fs_;
bool KubeZones::mounted_ = false;

// A pod pinned to zone a gets its volume on zone a's host, one pinned to
// zone b on zone b's; each PV's node affinity is its zone.
TEST_F(KubeZones, PodPinnedToAZoneGetsItsVolumeOnThatZonesHost) {
  const std::string ns = "zones";
  MakeNamespace(ns);
  Apply(PvcManifest(ns, "data-a", "blockcsi-ext4", "64Mi", false));
  Apply(PinnedPod(ns, "app-a", "data-a", "a"));
  Apply(PvcManifest(ns, "data-b", "blockcsi-ext4", "16Mi", false));
  Apply(PinnedPod(ns, "app-b", "data-b", "b"));
  RunningPod on_a;
  ASSERT_NO_FATAL_FAILURE(ExpectRunsOnZone(ns, "app-a", "a", "b", &on_a));
  RunningPod on_b;
  ASSERT_NO_FATAL_FAILURE(ExpectRunsOnZone(ns, "app-b", "b", "a", &on_b));
  DeleteOnZone("a", on_a);
  DeleteOnZone("b", on_b);
}

// Zone b's host has less room than the PVC asks: its CSIStorageCapacity
// says so, the scheduler keeps the pod pinned to zone b pending with its
// capacity reason, and no volume is made anywhere.
TEST_F(KubeZones, PodWhoseZonesHostIsFullStaysPending) {
  const std::string ns = "full";
  MakeNamespace(ns);
  int64_t b_capacity = -1;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const Json& item : cluster().List("csistoragecapacities", "blockcsi")) {
          if (item.value("storageClassName", "") != "blockcsi-ext4" || !item.contains("capacity")) continue;
          if (Str(item, "/nodeTopology/matchLabels/topology.blockcsi.io~1zone") == "b") {
            b_capacity = QuantityBytes(item.value("capacity", ""));
            return true;
          }
        }
        return false;
      },
      60s))
      << "no CSIStorageCapacity for zone b\n"
      << env().Logs();
  EXPECT_GT(b_capacity, 0);
  EXPECT_LE(b_capacity, kZoneBPoolBytes) << "zone b's capacity is its own host's free space";

  Apply(PvcManifest(ns, "big", "blockcsi-ext4", "64Mi", false));
  Apply(PinnedPod(ns, "app", "big", "b"));
  std::string message;
  EXPECT_TRUE(WaitFor(
      [&] {
        auto pod = cluster().Get("pod", "app", ns);
        if (!pod.has_value()) return false;
        for (const Json& c : pod->value("/status/conditions"_json_pointer, Json::array())) {
          if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False") {
            message = c.value("message", "");
            return message.find("did not have enough free storage") != std::string::npos;
          }
        }
        return false;
      },
      60s))
      << "the scheduler's reason: " << message << "\n"
      << env().Logs();
  std::cout << "[ k8s      ] pod pinned to the full zone: " << message << "\n";
  auto pod = cluster().Get("pod", "app", ns);
  ASSERT_TRUE(pod.has_value());
  EXPECT_EQ(Str(*pod, "/spec/nodeName"), "");
  auto pvc = cluster().Get("pvc", "big", ns);
  ASSERT_TRUE(pvc.has_value());
  EXPECT_EQ(Str(*pvc, "/status/phase"), "Pending");
  EXPECT_EQ(Str(*pvc, "/spec/volumeName"), "");
  EXPECT_EQ(zone("b").tgtd->ShowTargets().find("Target "), std::string::npos) << "a target on zone b's host";
  EXPECT_EQ(zone("a").tgtd->ShowTargets().find("Target "), std::string::npos) << "a target on zone a's host";

  ASSERT_TRUE(cluster().Kubectl({"delete", "pod", "app", "-n", ns, "--wait=false"}).ok());
  ASSERT_TRUE(cluster().Kubectl({"delete", "pvc", "big", "-n", ns, "--wait=false"}).ok());
}

}  // namespace
}  // namespace blockcsi::testing
