// How the bridge is reached over FUSE: over io_uring when the kernel offers
// it at INIT (the fuse module's enable_uring parameter on), over /dev/fuse
// when it does not; the same bytes reach the LUN either way, and the path
// shows in the bridge's status reply. The rest of this suite runs on
// whichever path the parameter gives (hack/test.sh runs it both ways).
#include <unistd.h>

#include <string>

#include "bridge/bridge_protocol.h"
#include "contract/initiator.h"
#include "support/attach_fixture.h"
#include "support/block_io.h"
#include "support/fuse_uring_param.h"

namespace blockcsi::testing {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

nlohmann::json BridgeStatus(const AttachRecord& record) {
  auto reply = CallBridge(record.connector_state.at("control_socket"), {{"op", "status"}}, std::chrono::seconds(5));
  EXPECT_TRUE(reply.ok()) << reply.status().ToString();
  return reply.ok() ? *reply : nlohmann::json::object();
}

class BridgeFusePathTest : public AttachIntegrationTest {
 protected:
  // Attaches a fresh LUN with the parameter at `uring`, writes and reads
  // back through the loop device, and returns the bridge's status.
  nlohmann::json AttachAndServe(bool uring) {
    if (!param_.Set(uring)) {
      ADD_FAILURE() << "cannot set " << FuseUringParameter::kPath;
      return {};
    }
    TestTarget t = MakeTarget("path", 16 * kMiB);
    auto attacher = NewAttacher(1, BinDir());
    EXPECT_TRUE(attacher.ok());
    if (!attacher.ok()) return {};
    auto spec = ParseAttachSpec("vol-p", ContextFor(t), {}, InitiatorIqnForNode(kNodeId));
    EXPECT_TRUE(spec.ok());
    auto record = (*attacher)->Attach(*spec);
    EXPECT_TRUE(record.ok()) << record.status().ToString();
    if (!record.ok()) return {};
    std::string data = Pattern(256 * 1024, 'u');
    EXPECT_EQ(WriteDirect(record->device_path, 3 * kMiB, data), 0);
    EXPECT_EQ(ReadDirect(record->device_path, 3 * kMiB, data.size()), data);
    EXPECT_EQ(ReadFileAt(t.backing_file, 3 * kMiB, data.size()), data);
    nlohmann::json status = BridgeStatus(*record);
    EXPECT_TRUE((*attacher)->Detach("vol-p").ok());
    ExpectNothingLeft();
    return status;
  }
  FuseUringParameter param_;
};

TEST_F(BridgeFusePathTest, ServesOverIoUringWhenTheKernelOffersIt) {
  if (::access(FuseUringParameter::kPath, W_OK) != 0) GTEST_SKIP() << "kernel without FUSE over io_uring";
  nlohmann::json status = AttachAndServe(true);
  EXPECT_EQ(status.value("fuse_path", ""), "io_uring") << status.dump();
  ASSERT_TRUE(status.contains("fuse_ring")) << status.dump();
  // The I/O above went through the ring, not /dev/fuse.
  EXPECT_GT(status["fuse_ring"].value("requests", uint64_t{0}), 4u) << status.dump();
}

TEST_F(BridgeFusePathTest, ServesOverDevFuseWhenTheKernelDoesNotOfferIt) {
  if (::access(FuseUringParameter::kPath, W_OK) != 0) GTEST_SKIP() << "kernel without FUSE over io_uring";
  nlohmann::json status = AttachAndServe(false);
  EXPECT_EQ(status.value("fuse_path", ""), "dev_fuse") << status.dump();
  EXPECT_FALSE(status.contains("fuse_ring"));
}

}  // namespace
}  // namespace blockcsi::testing
