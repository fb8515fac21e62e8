// The userspace connector's adoption at plugin start, on a fabricated /proc:
// a bridge is recognised by the pid and start time its record names, so a
// bridge that runs but does not answer its control socket (its I/O may be
// stuck) is still adopted, and a reused pid is not mistaken for it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "attach/attach_record_store.h"
#include "attach/userspace_connector.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

class UserspaceReconcileTest : public ::testing::Test {
 protected:
  // /proc/<pid>/stat of a process that started at `start` (field 22).
  void Process(int pid, uint64_t start) {
    std::string dir = root_.Join("proc/" + std::to_string(pid));
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/stat") << pid << " (blockcsi) S 1 " << pid << " " << pid
                                 << " 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 9 0 " << start << " 1000 200\n";
  }

  AttachRecord Record(const std::string& id, int bridge_pid, uint64_t bridge_start) {
    AttachRecord r;
    r.volume_id = id;
    r.connector = "userspace";
    r.transport = "iscsi";
    r.state = kAttachStateAttached;
    r.device_path = "/dev/loop9";
    std::string dir = state_.path() + "/bridges/" + id;
    r.connector_state = {{"bridge_dir", dir},
                         {"control_socket", dir + "/ctl.sock"},  // nothing listens: the bridge does not answer
                         {"mountpoint", dir + "/fuse"},
                         {kBridgePidKey, std::to_string(bridge_pid)},
                         {kBridgeStartTimeKey, std::to_string(bridge_start)},
                         {kPluginPidKey, "1"}};
    return r;
  }

  std::unique_ptr<Connector> MakeConnectorUnderTest() {
    UserspaceConnectorOptions o;
    o.state_dir = state_.path();
    o.host_fs = HostRootedAt(root_.path());
    o.state_files = MachineHost();
    return MakeUserspaceConnector(std::move(o));
  }

  testing::TempDir root_;
  testing::TempDir state_;
};

TEST_F(UserspaceReconcileTest, ARunningBridgeThatDoesNotAnswerIsStillAdopted) {
  Process(4242, 777);
  std::vector<AttachRecord> records = {Record("vol-stuck", 4242, 777)};
  ASSERT_TRUE(MakeConnectorUnderTest()->Reconcile(&records).ok());
  auto& cs = records[0].connector_state;
  EXPECT_EQ(cs[kPluginPidKey], std::to_string(::getpid())) << "this plugin owns the bridge now";
  EXPECT_EQ(cs[kAdoptedKey], "true");
  EXPECT_EQ(cs[kBridgePidKey], "4242");
  EXPECT_EQ(cs[kBridgeStartTimeKey], "777");
}

TEST_F(UserspaceReconcileTest, AReusedPidIsNotTheRecordedBridge) {
  Process(4243, 999);  // pid 4243 now belongs to a process started later
  std::vector<AttachRecord> records = {Record("vol-gone", 4243, 778)};
  ASSERT_TRUE(MakeConnectorUnderTest()->Reconcile(&records).ok());
  auto& cs = records[0].connector_state;
  EXPECT_EQ(cs[kPluginPidKey], "1") << "a dead bridge is not adopted";
  EXPECT_EQ(cs.count(kAdoptedKey), 0u);
}

}  // namespace
}  // namespace blockcsi
