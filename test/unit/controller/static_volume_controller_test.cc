// Static PVs (issue #24) at the controller: a PV whose volumeAttributes name
// a LUN no backend made. ControllerPublish returns the attributes as a
// publish_context and grants nothing; Unpublish and DeleteVolume of such a
// handle are OK; none of the three touches the backend (the FakeBackend
// counts every call); bad attributes are INVALID_ARGUMENT naming the
// attribute and the volume.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "contract/publish_context.h"
#include "controller/controller_service.h"
#include "support/fake_backend.h"

namespace blockcsi {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Mode = csi::v1::VolumeCapability::AccessMode;

constexpr char kHandle[] = "array-a-lun-3";
constexpr char kIqn[] = "iqn.2003-01.org.example:array-a.disk3";

class StaticVolumeControllerTest : public ::testing::Test {
 protected:
  csi::v1::ControllerPublishVolumeRequest Request(std::map<std::string, std::string> attributes,
                                                  const std::string& handle = kHandle) {
    csi::v1::ControllerPublishVolumeRequest r;
    r.set_volume_id(handle);
    r.set_node_id("node-1");
    r.mutable_volume_capability()->mutable_mount()->set_fs_type("ext4");
    r.mutable_volume_capability()->mutable_access_mode()->set_mode(Mode::SINGLE_NODE_WRITER);
    for (const auto& [k, v] : attributes) (*r.mutable_volume_context())[k] = v;
    return r;
  }
  static std::map<std::string, std::string> Attributes() {
    return {{"targetPortal", "192.0.2.7"}, {"iqn", kIqn}, {"lun", "3"}, {"fsType", "ext4"}};
  }
  grpc::Status Publish(const csi::v1::ControllerPublishVolumeRequest& r,
                       csi::v1::ControllerPublishVolumeResponse* out) {
    grpc::ServerContext ctx;
    return service_.ControllerPublishVolume(&ctx, &r, out);
  }
  grpc::Status Publish(std::map<std::string, std::string> attributes) {
    csi::v1::ControllerPublishVolumeResponse out;
    return Publish(Request(std::move(attributes)), &out);
  }

  std::shared_ptr<testing::FakeBackend> backend_ = std::make_shared<testing::FakeBackend>();
  static ControllerOptions Options() {
    ControllerOptions options;
    options.max_volumes_per_node = 1;
    return options;
  }
  ControllerService service_{backend_, Options()};
};

TEST_F(StaticVolumeControllerTest, PublishReturnsTheAttributesAndTouchesNoBackend) {
  auto attributes = Attributes();
  attributes["portals"] = R"(["192.0.2.8:3260", "[2001:db8::9]:3261"])";
  attributes["chapAuthSession"] = "true";
  attributes["chapAuthDiscovery"] = "false";
  attributes["initiatorName"] = "iqn.2026-01.org.example:node-1";
  attributes["serial"] = "beaf31";
  csi::v1::ControllerPublishVolumeResponse out;
  grpc::Status st = Publish(Request(attributes), &out);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const auto& ctx = out.publish_context();
  EXPECT_EQ(ctx.at(publish_context::kPortals), "192.0.2.7:3260,192.0.2.8:3260,[2001:db8::9]:3261");
  EXPECT_EQ(ctx.at(publish_context::kTargetIqn), kIqn);
  EXPECT_EQ(ctx.at(publish_context::kLun), "3");
  EXPECT_EQ(ctx.at(publish_context::kSerial), "beaf31");
  EXPECT_EQ(ctx.count(publish_context::kWwn), 0u);
  EXPECT_EQ(ctx.at(publish_context::kChapRequired), "true");
  EXPECT_EQ(ctx.at(publish_context::kReadOnly), "false");
  EXPECT_EQ(ctx.at(publish_context::kStatic), "true");
  EXPECT_EQ(ctx.at(publish_context::kInitiatorName), "iqn.2026-01.org.example:node-1");
  // No grant, no lookup, no node-limit count: the array's admin owns ACLs.
  EXPECT_EQ(backend_->TotalCalls(), 0);
  // Twice: the same answer (idempotent), and no node limit applies (max 1).
  csi::v1::ControllerPublishVolumeResponse again;
  ASSERT_TRUE(Publish(Request(attributes, "array-a-lun-4"), &again).ok());
  EXPECT_EQ(again.publish_context().at(publish_context::kPortals), ctx.at(publish_context::kPortals));
  EXPECT_EQ(backend_->TotalCalls(), 0);
}

TEST_F(StaticVolumeControllerTest, ReadOnlyComesFromTheAttributeOrTheRequest) {
  auto attributes = Attributes();
  attributes["readOnly"] = "true";
  csi::v1::ControllerPublishVolumeResponse out;
  ASSERT_TRUE(Publish(Request(attributes), &out).ok());
  EXPECT_EQ(out.publish_context().at(publish_context::kReadOnly), "true");
  auto request = Request(Attributes());
  request.set_readonly(true);
  ASSERT_TRUE(Publish(request, &out).ok());
  EXPECT_EQ(out.publish_context().at(publish_context::kReadOnly), "true");
}

TEST_F(StaticVolumeControllerTest, UnpublishAndDeleteOfAStaticHandleAreOkWithoutTheBackend) {
  ASSERT_TRUE(Publish(Attributes()).ok());
  grpc::ServerContext ctx;
  csi::v1::ControllerUnpublishVolumeRequest unpublish;
  unpublish.set_volume_id(kHandle);
  unpublish.set_node_id("node-1");
  csi::v1::ControllerUnpublishVolumeResponse unpublished;
  EXPECT_TRUE(service_.ControllerUnpublishVolume(&ctx, &unpublish, &unpublished).ok());
  unpublish.clear_node_id();  // "from every node"
  EXPECT_TRUE(service_.ControllerUnpublishVolume(&ctx, &unpublish, &unpublished).ok());
  csi::v1::DeleteVolumeRequest del;
  del.set_volume_id(kHandle);
  csi::v1::DeleteVolumeResponse deleted;
  EXPECT_TRUE(service_.DeleteVolume(&ctx, &del, &deleted).ok());
  EXPECT_EQ(backend_->TotalCalls(), 0);
}

// A PVC resize of a static PV: the external-resizer calls ControllerExpand
// first. The array's admin grows the LUN, so the controller only passes the
// request on to the node (which checks the LUN and grows the filesystem),
// for a raw block volume too, and asks no backend.
TEST_F(StaticVolumeControllerTest, ExpandOfAStaticHandleLeavesItToTheNodeWithoutTheBackend) {
  for (bool block : {false, true}) {
    grpc::ServerContext ctx;
    csi::v1::ControllerExpandVolumeRequest req;
    req.set_volume_id(kHandle);
    req.mutable_capacity_range()->set_required_bytes(640LL << 20);
    if (block) {
      req.mutable_volume_capability()->mutable_block();
      req.mutable_volume_capability()->mutable_access_mode()->set_mode(Mode::SINGLE_NODE_WRITER);
    }
    csi::v1::ControllerExpandVolumeResponse resp;
    grpc::Status st = service_.ControllerExpandVolume(&ctx, &req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.capacity_bytes(), 640LL << 20);
    EXPECT_TRUE(resp.node_expansion_required()) << "block " << block;
  }
  EXPECT_EQ(backend_->TotalCalls(), 0);
  // A handle of our own form that names nothing is still NOT_FOUND.
  grpc::ServerContext ctx;
  csi::v1::ControllerExpandVolumeRequest req;
  req.set_volume_id("vol-404");
  req.mutable_capacity_range()->set_required_bytes(640LL << 20);
  csi::v1::ControllerExpandVolumeResponse resp;
  EXPECT_EQ(service_.ControllerExpandVolume(&ctx, &req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(StaticVolumeControllerTest, AHandleABackendCouldHaveMadeIsRefused) {
  // Else DeleteVolume of this PV would delete the backend's vol-1.
  csi::v1::ControllerPublishVolumeResponse out;
  grpc::Status st = Publish(Request(Attributes(), "vol-1"), &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), AllOf(HasSubstr("\"vol-1\""), HasSubstr("volumeHandle")));
  EXPECT_EQ(backend_->TotalCalls(), 0);
}

TEST_F(StaticVolumeControllerTest, BadAttributesAreInvalidArgumentNamingTheAttribute) {
  struct Case {
    std::string key;
    std::string value;  // "<erase>": the key is removed
    std::string named;  // what the message must name
  };
  const std::vector<Case> cases = {
      {"targetPortal", "<erase>", "targetPortal"},
      {"targetPortal", "192.0.2.7:99999", "targetPortal"},
      {"targetPortal", "bad host!", "targetPortal"},
      {"portals", "192.0.2.8:3260,,192.0.2.9:3260", "portals"},
      {"portals", "192.0.2.7:3260", "portals"},  // the targetPortal again
      {"iqn", "<erase>", "iqn"},
      {"iqn", "IQN.not-a-name", "iqn"},
      {"lun", "16384", "lun"},
      {"lun", "-1", "lun"},
      {"lun", "3x", "lun"},
      {"serial", std::string(300, 'a'), "serial"},
      {"wwn", "xyz", "wwn"},
      {"initiatorName", "node one", "initiatorName"},
      {"chapAuthSession", "yes", "chapAuthSession"},
      {"chapAuthDiscovery", "1", "chapAuthDiscovery"},
      {"readOnly", "TRUE", "readOnly"},
      {"iscsiInterface", "bnx2i", "iscsiInterface"},
      {"targetPortl", "192.0.2.7", "targetPortl"},  // a misspelt key
  };
  for (const auto& c : cases) {
    auto attributes = Attributes();
    if (c.value == "<erase>") {
      attributes.erase(c.key);  // the other of iqn/targetPortal keeps it static
    } else {
      attributes[c.key] = c.value;
    }
    grpc::Status st = Publish(attributes);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.key << "=" << c.value;
    EXPECT_THAT(st.error_message(), AllOf(HasSubstr(kHandle), HasSubstr(c.named))) << c.key << "=" << c.value;
  }
  EXPECT_EQ(backend_->TotalCalls(), 0);
}

TEST_F(StaticVolumeControllerTest, AnUnknownNodeIsNotFoundForAStaticVolumeToo) {
  ControllerOptions options;
  options.node_exists = [](const std::string& node) -> StatusOr<bool> { return node == "node-2"; };
  ControllerService service(backend_, options);
  grpc::ServerContext ctx;
  auto request = Request(Attributes());
  csi::v1::ControllerPublishVolumeResponse out;
  grpc::Status st = service.ControllerPublishVolume(&ctx, &request, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  EXPECT_THAT(st.error_message(), AllOf(HasSubstr("node-1"), HasSubstr(kHandle)));
  request.set_node_id("node-2");
  EXPECT_TRUE(service.ControllerPublishVolume(&ctx, &request, &out).ok());
  EXPECT_EQ(backend_->TotalCalls(), 0);
}

TEST_F(StaticVolumeControllerTest, AProvisionedVolumeContextStillGoesToTheBackend) {
  // fsType alone is what blockcsi's own volumes carry: not static.
  csi::v1::ControllerPublishVolumeResponse out;
  grpc::Status st = Publish(Request({{"fsType", "ext4"}}, "vol-42"), &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  EXPECT_GT(backend_->TotalCalls(), 0);
}

}  // namespace
}  // namespace blockcsi
