// Starts the real `blockcsi` binary on a unix socket in a temp dir and
// talks CSI Identity to it, as kubelet and the sidecars would. No root needed.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "csi.grpc.pb.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;

class IdentityTest : public ::testing::Test {
 protected:
  std::unique_ptr<testing::ChildProcess> Start(const std::string& mode, const std::string& socket) {
    std::vector<std::string> argv{testing::BinDir() + "/blockcsi",
                                  "--mode",
                                  mode,
                                  "--endpoint",
                                  "unix://" + socket,
                                  "--node-id",
                                  "n1",
                                  "--state-dir",
                                  dir_.Join("state"),
                                  "--connector",
                                  "userspace"};
    if (mode != "node") {
      // The controller needs a backend; Identity does not need tgtd to answer.
      for (const char* arg : {"--backend", "local", "--portal", "127.0.0.1:3260"}) argv.push_back(arg);
      argv.push_back("--pool");
      argv.push_back(dir_.Join("pool"));
    }
    return std::make_unique<testing::ChildProcess>(argv, dir_.Join("plugin.log"));
  }
  std::unique_ptr<csi::v1::Identity::Stub> Connect(const std::string& socket) {
    return csi::v1::Identity::NewStub(grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  }
  bool HasService(const csi::v1::GetPluginCapabilitiesResponse& r, csi::v1::PluginCapability::Service::Type t) {
    for (const auto& c : r.capabilities()) {
      if (c.has_service() && c.service().type() == t) return true;
    }
    return false;
  }
  testing::TempDir dir_;
};

TEST_F(IdentityTest, NodeModeServesIdentity) {
  std::string socket = dir_.Join("x/csi.sock");
  auto plugin = Start("node", socket);
  ASSERT_TRUE(testing::WaitForSocket(socket, 10s)) << testing::ReadFileOrEmpty(dir_.Join("plugin.log"));
  auto stub = Connect(socket);

  grpc::ClientContext c1;
  csi::v1::GetPluginInfoResponse info;
  ASSERT_TRUE(stub->GetPluginInfo(&c1, {}, &info).ok());
  EXPECT_EQ(info.name(), "blockcsi.io");
  EXPECT_FALSE(info.vendor_version().empty());

  grpc::ClientContext c2;
  csi::v1::GetPluginCapabilitiesResponse caps;
  ASSERT_TRUE(stub->GetPluginCapabilities(&c2, {}, &caps).ok());
  EXPECT_FALSE(HasService(caps, csi::v1::PluginCapability::Service::CONTROLLER_SERVICE))
      << "a node-only plugin must not claim the controller service";
  EXPECT_TRUE(HasService(caps, csi::v1::PluginCapability::Service::VOLUME_ACCESSIBILITY_CONSTRAINTS));
  bool online_expansion = false;
  for (const auto& c : caps.capabilities()) {
    online_expansion |=
        c.has_volume_expansion() && c.volume_expansion().type() == csi::v1::PluginCapability::VolumeExpansion::ONLINE;
  }
  EXPECT_TRUE(online_expansion);

  grpc::ClientContext c3;
  csi::v1::ProbeResponse probe;
  ASSERT_TRUE(stub->Probe(&c3, {}, &probe).ok());
  EXPECT_TRUE(probe.has_ready());
  EXPECT_TRUE(probe.ready().value());

  // An idle C++ client answers the server's shutdown ping only on gRPC's
  // 5 s backup poll; dropping the connection first keeps the stop prompt.
  stub.reset();
  plugin->Signal(SIGTERM);
  EXPECT_EQ(plugin->Wait(15s), 0) << testing::ReadFileOrEmpty(dir_.Join("plugin.log"));
  EXPECT_NE(::access(socket.c_str(), F_OK), 0) << "socket left behind after a clean stop";
}

TEST_F(IdentityTest, AllModeAdvertisesController) {
  std::string socket = dir_.Join("csi.sock");
  auto plugin = Start("all", socket);
  ASSERT_TRUE(testing::WaitForSocket(socket, 10s)) << testing::ReadFileOrEmpty(dir_.Join("plugin.log"));
  grpc::ClientContext ctx;
  csi::v1::GetPluginCapabilitiesResponse caps;
  ASSERT_TRUE(Connect(socket)->GetPluginCapabilities(&ctx, {}, &caps).ok());
  EXPECT_TRUE(HasService(caps, csi::v1::PluginCapability::Service::CONTROLLER_SERVICE));
}

TEST_F(IdentityTest, ProbeReportsNotReadyWhenStateDirBecomesUnusable) {
  std::string socket = dir_.Join("csi.sock");
  auto plugin = Start("node", socket);
  ASSERT_TRUE(testing::WaitForSocket(socket, 10s)) << testing::ReadFileOrEmpty(dir_.Join("plugin.log"));
  auto probe_ready = [&] {
    grpc::ClientContext ctx;
    csi::v1::ProbeResponse probe;
    EXPECT_TRUE(Connect(socket)->Probe(&ctx, {}, &probe).ok());
    return probe.ready().value();
  };
  EXPECT_TRUE(probe_ready());
  // The state dir is replaced by a regular file: the node can no longer keep
  // attach records, so it must stop claiming to be ready.
  std::filesystem::remove_all(dir_.Join("state"));
  FILE* f = std::fopen(dir_.Join("state").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_FALSE(probe_ready());
}

TEST_F(IdentityTest, SecondServerOnALiveEndpointRefusesAndStaleSocketIsReplaced) {
  std::string socket = dir_.Join("csi.sock");
  auto first = Start("node", socket);
  ASSERT_TRUE(testing::WaitForSocket(socket, 10s));
  auto second = Start("node", socket);
  // Exactly 1 (cannot serve): -1 would be a hang, 128+n a crash.
  EXPECT_EQ(second->Wait(15s), 1) << "a second server took over a live endpoint";
  EXPECT_TRUE(testing::WaitForSocket(socket, 1s)) << "the first server lost its socket";

  // kill -9 leaves a stale socket file; the next start must take it over.
  first->Signal(SIGKILL);
  first->Wait(5s);
  ASSERT_EQ(::access(socket.c_str(), F_OK), 0);
  auto third = Start("node", socket);
  ASSERT_TRUE(testing::WaitForSocket(socket, 10s));
  grpc::ClientContext ctx;
  csi::v1::GetPluginInfoResponse info;
  EXPECT_TRUE(Connect(socket)->GetPluginInfo(&ctx, {}, &info).ok());
}

TEST_F(IdentityTest, BadFlagsExitWithUsageCode) {
  testing::ChildProcess bad({testing::BinDir() + "/blockcsi", "--mode", "sideways"}, dir_.Join("bad.log"));
  // A usage error is an exit of its own, non-zero: not a hang (-1), not a signal (128+n).
  int bad_code = bad.Wait(10s);
  EXPECT_GT(bad_code, 0) << testing::ReadFileOrEmpty(dir_.Join("bad.log"));
  EXPECT_LT(bad_code, 128) << testing::ReadFileOrEmpty(dir_.Join("bad.log"));
  testing::ChildProcess no_node_id(
      {testing::BinDir() + "/blockcsi", "--mode", "node", "--endpoint", "unix://" + dir_.Join("y.sock")},
      dir_.Join("bad2.log"));
  EXPECT_EQ(no_node_id.Wait(10s), 2);
  EXPECT_NE(testing::ReadFileOrEmpty(dir_.Join("bad2.log")).find("--node-id"), std::string::npos);
  testing::ChildProcess version({testing::BinDir() + "/blockcsi", "--version"}, dir_.Join("version.log"));
  EXPECT_EQ(version.Wait(10s), 0);
  EXPECT_NE(testing::ReadFileOrEmpty(dir_.Join("version.log")).find("blockcsi "), std::string::npos);
}

}  // namespace
}  // namespace blockcsi
