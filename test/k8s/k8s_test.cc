// blockcsi under a real Kubernetes control plane (issue #20): the real
// apiserver, scheduler, binder and attach-detach controller, the real
// external-provisioner, -attacher and -resizer calling `blockcsi --mode
// controller`, and the project's CO simulator as the Node's kubelet (none
// runs here) driving `blockcsi --mode node` with the userspace connector.
// One cluster for the whole binary; each scenario in a namespace of its own.
// Needs root, tgtd, etcd, kubectl and ../shared/peers; skips otherwise.
#include <sys/statvfs.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "k8s/k8s_test_base.h"

namespace blockcsi::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

std::string Str(const Json& j, const char* pointer) {
  Json::json_pointer p(pointer);
  return j.contains(p) && j.at(p).is_string() ? j.at(p).get<std::string>() : "";
}

uint64_t FilesystemBytes(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
}

class KubeScenarios : public KubeTest {};

// Immediate binding: the PVC binds with no pod; the pod is scheduled onto
// the Node, attached (ACL granted), staged and published; data goes through;
// the resizer grows the volume (xfs: online grow works here); deleting the
// pod detaches (ACL revoked), deleting the PVC deletes the volume.
TEST_F(KubeScenarios, ImmediateClassProvisionAttachExpandDetachDelete) {
  const std::string ns = "immediate";
  MakeNamespace(ns);
  Apply(PvcManifest(ns, "data", "blockcsi-xfs-immediate", "320Mi", false));
  ASSERT_TRUE(WaitFor([&] { return Str(*cluster().Get("pvc", "data", ns), "/status/phase") == "Bound"; }, 60s))
      << "PVC not bound without a pod (Immediate)\n"
      << env().Logs();
  Apply(PodManifest(ns, "app", "data", false));
  RunningPod pod;
  std::string error;
  ASSERT_TRUE(kubelet().RunPod(ns, "app", &pod, &error)) << error << "\n" << env().Logs();

  const std::string target = pod.publish_context["targetIqn"];
  ASSERT_FALSE(target.empty()) << "no targetIqn in the VolumeAttachment's attachmentMetadata";
  auto acl = AclOf(target);
  EXPECT_NE(std::find(acl.begin(), acl.end(), NodeInitiator()), acl.end())
      << "the node's initiator is not in the ACL of " << target;
  EXPECT_EQ(acl.size(), 1u) << "only the attached node may log in";
  EXPECT_TRUE(WriteAndReadBack(pod.pod.volume_path + "/hello", "written through kubernetes\n", false));

  // Expansion through the resizer, then the node part (kubelet's).
  uint64_t before = FilesystemBytes(pod.pod.volume_path);
  KubectlResult r = cluster().Kubectl({"patch", "pvc", "data", "-n", ns, "--type=merge", "-p",
                                       R"({"spec":{"resources":{"requests":{"storage":"512Mi"}}}})"});
  ASSERT_TRUE(r.ok()) << r.err;
  ASSERT_TRUE(WaitFor(
      [&] { return QuantityBytes(Str(*cluster().Get("pv", pod.pv), "/spec/capacity/storage")) >= 512 << 20; }, 60s))
      << "the resizer did not grow the PV\n"
      << env().Logs();
  ASSERT_TRUE(kubelet().ExpandVolume(pod, &error)) << error;
  EXPECT_GT(FilesystemBytes(pod.pod.volume_path), before + (128u << 20)) << "the filesystem did not grow";
  EXPECT_TRUE(WriteAndReadBack(pod.pod.volume_path + "/hello", "still there after the grow\n", false));

  DeletePodAndWaitDetached(pod);
  DeletePvcAndWaitGone(pod);
}

}  // namespace
}  // namespace blockcsi::testing
