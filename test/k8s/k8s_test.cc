// blockcsi under a real Kubernetes control plane (issue #20): the real
// apiserver, scheduler, binder and attach-detach controller, the real
// external-provisioner, -attacher and -resizer calling `blockcsi --mode
// controller`, and the project's CO simulator as the Node's kubelet (none
// runs here) driving `blockcsi --mode node` with the userspace connector.
// One cluster for the whole binary; each scenario in a namespace of its own.
// Needs root, tgtd, etcd, kubectl and ../shared/peers; skips otherwise.
#include <gmock/gmock.h>
#include <sys/statvfs.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "contract/initiator.h"
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
  const LeakSnapshot before = TakeLeakSnapshot(Scope());
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
  uint64_t size_before = FilesystemBytes(pod.pod.volume_path);
  KubectlResult r = cluster().Kubectl({"patch", "pvc", "data", "-n", ns, "--type=merge", "-p",
                                       R"({"spec":{"resources":{"requests":{"storage":"512Mi"}}}})"});
  ASSERT_TRUE(r.ok()) << r.err;
  ASSERT_TRUE(WaitFor(
      [&] { return QuantityBytes(Str(*cluster().Get("pv", pod.pv), "/spec/capacity/storage")) >= 512 << 20; }, 60s))
      << "the resizer did not grow the PV\n"
      << env().Logs();
  ASSERT_TRUE(kubelet().ExpandVolume(pod, &error)) << error;
  EXPECT_GT(FilesystemBytes(pod.pod.volume_path), size_before + (128u << 20)) << "the filesystem did not grow";
  EXPECT_TRUE(WriteAndReadBack(pod.pod.volume_path + "/hello", "still there after the grow\n", false));

  DeletePodAndWaitDetached(pod);
  DeletePvcAndWaitGone(pod);
  ExpectNothingLeftSince(before);
}

// The project's own settings as a user applies them: its CSIDriver
// (storageCapacity: true), the provisioner with --enable-capacity and
// Topology, and its ext4 class (WaitForFirstConsumer). The provisioner
// (v3.4.1 asks GetCapacity with `mount {}` and access mode UNKNOWN) must
// publish the pool's real free space, or the scheduler strands the pod
// ("did not have enough free storage").
TEST_F(KubeScenarios, WaitForFirstConsumerSchedulesWithStorageCapacity) {
  const std::string ns = "wffc";
  MakeNamespace(ns);
  const LeakSnapshot before = TakeLeakSnapshot(Scope());
  Json capacity;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const Json& item : cluster().List("csistoragecapacities", "blockcsi")) {
          if (item.value("storageClassName", "") == "blockcsi-ext4" && item.contains("capacity")) {
            capacity = item;
            return true;
          }
        }
        return false;
      },
      60s))
      << "no CSIStorageCapacity for blockcsi-ext4\n"
      << env().Logs();
  // The controller's own answer for the class's parameters (what the
  // provisioner passes on: the csi.storage.k8s.io/ keys are its own).
  csi::v1::GetCapacityRequest req;
  (*req.mutable_parameters())["chap"] = "false";
  (*req.mutable_parameters())["mkfsOptions"] = "-m 0";
  csi::v1::GetCapacityResponse resp;
  auto ctx = Deadline(30s);
  ASSERT_TRUE(GrpcOk(env().controller().controller().GetCapacity(ctx.get(), req, &resp)));
  int64_t published = QuantityBytes(capacity.value("capacity", ""));
  ASSERT_GT(resp.available_capacity(), 0);
  // The pool is sparse files on the test's filesystem, whose free space
  // moves with everything else on this machine: within 5%.
  EXPECT_GT(published, resp.available_capacity() / 100 * 95) << capacity.dump();
  EXPECT_LT(published, resp.available_capacity() / 100 * 105) << capacity.dump();

  Apply(PvcManifest(ns, "data", "blockcsi-ext4", "64Mi", false));
  Apply(PodManifest(ns, "app", "data", false));
  RunningPod pod;
  std::string error;
  ASSERT_TRUE(kubelet().RunPod(ns, "app", &pod, &error)) << error << "\n" << env().Logs();
  auto pvc = cluster().Get("pvc", "data", ns);
  ASSERT_TRUE(pvc.has_value());
  EXPECT_EQ(Str(*pvc, "/metadata/annotations/volume.kubernetes.io~1selected-node"), kubelet().node_name())
      << "bound through the scheduler's choice (WaitForFirstConsumer)";
  EXPECT_TRUE(WriteAndReadBack(pod.pod.volume_path + "/hello", "ext4 through the scheduler\n", false));
  DeletePodAndWaitDetached(pod);
  DeletePvcAndWaitGone(pod);
  ExpectNothingLeftSince(before);
}

// volumeMode: Block with the project's block class: the pod gets the LUN
// as a device; bytes written with O_DIRECT read back.
TEST_F(KubeScenarios, RawBlockPvc) {
  const std::string ns = "block";
  MakeNamespace(ns);
  const LeakSnapshot before = TakeLeakSnapshot(Scope());
  Apply(PvcManifest(ns, "raw", "blockcsi-block", "64Mi", true));
  Apply(PodManifest(ns, "app", "raw", true));
  RunningPod pod;
  std::string error;
  ASSERT_TRUE(kubelet().RunPod(ns, "app", &pod, &error)) << error << "\n" << env().Logs();
  ASSERT_TRUE(pod.block);
  auto acl = AclOf(pod.publish_context["targetIqn"]);
  EXPECT_NE(std::find(acl.begin(), acl.end(), NodeInitiator()), acl.end());
  EXPECT_TRUE(WriteAndReadBack(pod.pod.volume_path, "raw bytes through kubernetes", true));
  DeletePodAndWaitDetached(pod);
  DeletePvcAndWaitGone(pod);
  ExpectNothingLeftSince(before);
}

// The controller dies (kill -9, at the fault point right after the ACL is
// written) in the middle of the attacher's ControllerPublishVolume; it and
// the sidecars that lost their connection are started again, as kubelet
// restarts containers; the attacher's retry converges: attached, the ACL
// holds the node once, the pod runs.
TEST_F(KubeScenarios, ControllerKilledDuringAttachConverges) {
  const std::string ns = "restart";
  MakeNamespace(ns);
  const LeakSnapshot before = TakeLeakSnapshot(Scope());
  Apply(PvcManifest(ns, "data", "blockcsi-xfs-immediate", "320Mi", false));
  ASSERT_TRUE(WaitFor([&] { return Str(*cluster().Get("pvc", "data", ns), "/status/phase") == "Bound"; }, 60s))
      << env().Logs();
  std::string error;
  ASSERT_TRUE(env().RestartController("controller.publish.after-acl", &error)) << error;
  Apply(PodManifest(ns, "app", "data", false));
  // Waited for with the supervisor on: the attacher exits when the first
  // restart drops its connection, and must come back to call at all.
  WaitFor([&] { return !env().controller().running(); }, 60s);
  ASSERT_TRUE(env().controller().WaitKilledByFaultPoint(1s)) << "the controller did not reach the publish fault point\n"
                                                             << env().Logs();
  ASSERT_TRUE(env().RestartController("", &error)) << error;
  RunningPod pod;
  ASSERT_TRUE(kubelet().RunPod(ns, "app", &pod, &error)) << error << "\n" << env().Logs();
  auto acl = AclOf(pod.publish_context["targetIqn"]);
  EXPECT_EQ(std::count(acl.begin(), acl.end(), NodeInitiator()), 1) << "the ACL after the retry";
  EXPECT_TRUE(WriteAndReadBack(pod.pod.volume_path + "/hello", "after the restart\n", false));
  DeletePodAndWaitDetached(pod);
  DeletePvcAndWaitGone(pod);
  ExpectNothingLeftSince(before);
}

// A VolumeAttachment for a node whose CSINode gives this driver a node id
// that no CSINode of the cluster lists (a node reinstalled under another
// id, say): the external-attacher calls ControllerPublishVolume with that
// id, and the controller, asking the API server as its ServiceAccount
// (--kubeconfig, the RBAC of rbac-controller.yaml), answers NOT_FOUND; the
// attachment stays unattached with that error, and no ACL for that id's
// initiator is ever written (issue #20 item 4). The attacher itself never
// calls for a node without a CSINode entry of this driver (it fails first).
TEST_F(KubeScenarios, AttachToANodeIdWithoutCsiNodeIsNotFoundAndGrantsNothing) {
  const std::string ns = "ghost";
  const std::string ghost = "ghost-node";
  const std::string stale_id = "ghost-node-reinstalled";
  MakeNamespace(ns);
  const LeakSnapshot before = TakeLeakSnapshot(Scope());
  Apply(PvcManifest(ns, "data", "blockcsi-xfs-immediate", "320Mi", false));
  ASSERT_TRUE(WaitFor([&] { return Str(*cluster().Get("pvc", "data", ns), "/status/phase") == "Bound"; }, 60s))
      << env().Logs();
  std::string pv = Str(*cluster().Get("pvc", "data", ns), "/spec/volumeName");
  Json node{{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", ghost}}}};
  Apply(node.dump());
  Json csinode{{"apiVersion", "storage.k8s.io/v1"},
               {"kind", "CSINode"},
               {"metadata", {{"name", ghost}}},
               {"spec", {{"drivers", Json::array({{{"name", "blockcsi.io"}, {"nodeID", stale_id}}})}}}};
  Apply(csinode.dump());
  Json va{{"apiVersion", "storage.k8s.io/v1"},
          {"kind", "VolumeAttachment"},
          {"metadata", {{"name", "ghost-attachment"}}},
          {"spec", {{"attacher", "blockcsi.io"}, {"nodeName", ghost}, {"source", {{"persistentVolumeName", pv}}}}}};
  Apply(va.dump());
  Json seen;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto got = cluster().Get("volumeattachment", "ghost-attachment");
        if (!got) return false;
        seen = *got;
        return Str(seen, "/status/attachError/message").find("NotFound") != std::string::npos;
      },
      60s))
      << "no NOT_FOUND in the VolumeAttachment's attachError: " << seen.dump() << "\n"
      << env().Logs();
  EXPECT_THAT(Str(seen, "/status/attachError/message"), ::testing::HasSubstr(stale_id));
  EXPECT_FALSE(seen.value(Json::json_pointer("/status/attached"), false));
  EXPECT_EQ(env().tgtd().ShowTargets().find(InitiatorIqnForNode(stale_id)), std::string::npos)
      << "an ACL was written for a node the cluster does not have";

  KubectlResult r = cluster().Kubectl({"delete", "volumeattachment", "ghost-attachment", "--wait=false"});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_TRUE(WaitFor([&] { return !cluster().Get("volumeattachment", "ghost-attachment").has_value(); }, 60s))
      << cluster().Kubectl({"get", "volumeattachment", "ghost-attachment", "-o", "yaml"}).out << env().Logs();
  cluster().Kubectl({"delete", "csinode", ghost});
  cluster().Kubectl({"delete", "node", ghost});
  RunningPod gone;
  gone.ns = ns;
  gone.pvc = "data";
  gone.pv = pv;
  DeletePvcAndWaitGone(gone);
  ExpectNothingLeftSince(before);
}

}  // namespace
}  // namespace blockcsi::testing
