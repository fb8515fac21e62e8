// A static PV under the real control plane (issue #24 item 5, its k8s
// half): a LUN made with tgtadm outside blockcsi, on an "array" tgtd of its
// own, with an ext4 filesystem and a file already on it and an ACL its
// admin wrote for the node's initiator; the PV of
// deploy/examples/static-pv.yaml names it, a PVC binds it by volumeName,
// and a pod uses it through the real attach-detach controller and
// external-attacher. The file reads back intact, nothing is formatted, the
// array's ACLs stay as the admin left them, and after the pod nothing is
// left on the node, in the controller's pool or on either tgtd. Shares the
// cluster of k8s_test.cc (same binary, KubeTest).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/executor.h"
#include "contract/initiator.h"
#include "k8s/k8s_test_base.h"

namespace blockcsi::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr char kArrayIqn[] = "iqn.2003-01.org.example:k8s-array.disk1";
constexpr char kArraySerial[] = "ARRAY0001";
constexpr char kContent[] = "written by the array's admin before Kubernetes ever saw this LUN\n";

std::string RunTool(const std::vector<std::string>& argv, int* code) {
  auto r = MakeProcessExecutor()->Run(Command(argv.front()).Args({argv.begin() + 1, argv.end()}).Timeout(60s));
  *code = r.ok() ? r->exit_code : -1;
  return r.ok() ? r->stdout_text + r->stderr_text : r.status().message();
}

// `text` with the first `from` replaced by `to` (the example must still
// hold `from`: a changed example fails here rather than silently).
std::string Patch(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  if (at == std::string::npos) return "";
  return text.replace(at, from.size(), to);
}

class KubeStaticPv : public KubeTest {};

TEST_F(KubeStaticPv, AnExistingLunIsUsedAsIsThroughTheRealAttacher) {
  std::string error;
  auto array = TgtdHarness::Start(&error);
  ASSERT_TRUE(array) << "cannot start the array's tgtd: " << error;
  // The admin's LUN: ext4 with a file, made without mounting (mkfs -d).
  const std::string dir = env().dir() + "/array";
  std::filesystem::create_directories(dir + "/seed");
  std::ofstream(dir + "/seed/hello.txt") << kContent;
  const std::string image = dir + "/disk1.img";
  int code = 0;
  std::string out = RunTool({"mkfs.ext4", "-q", "-F", "-d", dir + "/seed", image, "64M"}, &code);
  if (code != 0) {
    if (std::string why = testing::MissingProgramOption("mkfs.ext4", "-d"); !why.empty()) GTEST_SKIP() << why;
    FAIL() << "mkfs.ext4 -d failed although it has the option: " << out;
  }
  auto uuid = [&] { return RunTool({"blkid", "-p", "-o", "value", "-s", "UUID", image}, &code); };
  const std::string uuid_before = uuid();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--op", "new", "--mode", "target", "--tid", "7", "-T", kArrayIqn},
        {"--op", "new", "--mode", "logicalunit", "--tid", "7", "--lun", "1", "-b", image},
        {"--op", "update", "--mode", "logicalunit", "--tid", "7", "--lun", "1", "--params",
         std::string("scsi_sn=") + kArraySerial},
        {"--op", "bind", "--mode", "target", "--tid", "7", "--initiator-name", NodeInitiator()}}) {
    out = array->Tgtadm(args, &code);
    ASSERT_EQ(code, 0) << "tgtadm: " << out;
  }
  LeakScope array_scope;
  array_scope.tgtd = array.get();
  const LeakSnapshot array_before = TakeLeakSnapshot(array_scope);
  const LeakSnapshot before = TakeLeakSnapshot(Scope());

  // The project's example, patched only where it must name this array
  // (portal, IQN, LUN, one portal instead of two, the serial uncommented)
  // and this test's size; everything else as a user copies it.
  std::string manifest = KubeEnvironment::DeployFile("examples/static-pv.yaml");
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"targetPortal: \"10.0.0.5:3260\"", "targetPortal: \"" + array->portal() + "\""},
           {"      portals: \"10.0.0.6:3260,10.0.0.7:3260\"\n", ""},
           {"iqn: \"iqn.2001-04.com.example:storage.disk1\"", std::string("iqn: \"") + kArrayIqn + "\""},
           {"lun: \"0\"", "lun: \"1\""},
           {"# serial: \"ARRAY0001\"      # checked against VPD page 0x80 before use",
            std::string("serial: \"") + kArraySerial + "\""},
           {"storage: 100Gi", "storage: 64Mi"},
           {"storage: 100Gi", "storage: 64Mi"}}) {
    manifest = Patch(manifest, from, to);
    ASSERT_FALSE(manifest.empty()) << "deploy/examples/static-pv.yaml no longer has: " << from;
  }
  Apply(manifest);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto pvc = cluster().Get("pvc", "array-a-disk1", "default");
        return pvc && pvc->value(Json::json_pointer("/status/phase"), "") == "Bound";
      },
      60s))
      << "the static PV did not bind";

  Apply(PodManifest("default", "array-reader", "array-a-disk1", false));
  RunningPod pod;
  ASSERT_TRUE(kubelet().RunPod("default", "array-reader", &pod, &error)) << error << "\n" << env().Logs();
  EXPECT_EQ(pod.publish_context["targetIqn"], kArrayIqn);
  EXPECT_EQ(ReadFileOrEmpty(pod.pod.volume_path + "/hello.txt"), kContent) << "the admin's data, read through the pod";
  EXPECT_TRUE(NewItems(array_before, TakeLeakSnapshot(array_scope)).size() <= 2)
      << "only the node's session may be new on the array";
  for (const std::string& item : NewItems(array_before, TakeLeakSnapshot(array_scope))) {
    EXPECT_NE(item.find("session"), std::string::npos) << "the array changed beyond a session: " << item;
  }

  std::string va = pod.attachment;
  DeletePodAndWaitDetached(pod);
  KubectlResult r = cluster().Kubectl({"delete", "pvc", "array-a-disk1", "-n", "default"});
  EXPECT_TRUE(r.ok()) << r.err;
  // Retain: the PV stays Released; its admin deletes it (and blockcsi
  // never deletes the LUN).
  r = cluster().Kubectl({"delete", "pv", "array-a-disk1"});
  EXPECT_TRUE(r.ok()) << r.err;
  EXPECT_TRUE(WaitFor([&] { return !cluster().Get("pv", "array-a-disk1").has_value(); }, 60s));

  EXPECT_EQ(uuid(), uuid_before) << "the LUN was formatted";
  std::vector<std::string> array_changes = NewItemsAfterSettling(array_before, array_scope);
  EXPECT_TRUE(array_changes.empty()) << "the array is not as its admin left it:\n" << DescribeItems(array_changes);
  EXPECT_TRUE(array->ShowTargets().find(kArrayIqn) != std::string::npos) << "the LUN is no longer exported";
  ExpectNothingLeftSince(before);
}

}  // namespace
}  // namespace blockcsi::testing
