// Static volumes (issue #24) on the node's side of the contract: the
// publish_context the controller makes from a PV's attributes parses into an
// AttachSpec; identity is optional only when static; the PV's initiatorName
// replaces the node's only when static; the attach record keeps "static".
#include "contract/static_volume.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "attach/attach_record_store.h"
#include "attach/attach_spec.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"

namespace blockcsi {
namespace {

using ::testing::HasSubstr;

const std::string kNodeInitiator = InitiatorIqnForNode("worker-1");

std::map<std::string, std::string> InTreeAttributes() {
  // An in-tree `iscsi` PV's fields, as volumeAttributes strings.
  return {{"targetPortal", "10.0.0.5:3260"},
          {"portals", "10.0.0.6:3260, 10.0.0.7"},
          {"iqn", "iqn.2001-04.com.example:storage.disk1"},
          {"lun", "0"},
          {"fsType", "xfs"},
          {"readOnly", "false"},
          {"chapAuthDiscovery", "true"},
          {"chapAuthSession", "false"}};
}

TEST(StaticVolumeTest, RecognisedByIqnOrTargetPortalOnly) {
  EXPECT_TRUE(IsStaticVolume(InTreeAttributes()));
  EXPECT_TRUE(IsStaticVolume({{"iqn", "x"}}));
  EXPECT_TRUE(IsStaticVolume({{"targetPortal", "x"}}));
  EXPECT_FALSE(IsStaticVolume({{"fsType", "ext4"}, {"mkfsOptions", "-m 0"}}));
  EXPECT_FALSE(IsStaticVolume({}));
}

TEST(StaticVolumeTest, AnInTreePvTranslatesAndParsesWithoutIdentity) {
  auto context = StaticPublishContext("pv-a", InTreeAttributes(), false);
  ASSERT_TRUE(context.ok()) << context.status().ToString();
  EXPECT_EQ(context->at(publish_context::kPortals), "10.0.0.5:3260,10.0.0.6:3260,10.0.0.7:3260");
  auto spec = ParseAttachSpec("pv-a", *context, {}, kNodeInitiator);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->static_volume);
  EXPECT_EQ(spec->target_iqn, "iqn.2001-04.com.example:storage.disk1");
  EXPECT_EQ(spec->lun, 0);
  EXPECT_TRUE(spec->expected_serial.empty());
  EXPECT_EQ(spec->initiator_iqn, kNodeInitiator);
}

TEST(StaticVolumeTest, LunDefaultsToZeroLikeTheInTreePlugin) {
  auto attributes = InTreeAttributes();
  attributes.erase("lun");
  auto context = StaticPublishContext("pv-a", attributes, false);
  ASSERT_TRUE(context.ok());
  EXPECT_EQ(context->at(publish_context::kLun), "0");
}

TEST(StaticVolumeTest, WithoutTheStaticMarkAnIdentityIsStillRequired) {
  auto context = StaticPublishContext("pv-a", InTreeAttributes(), false);
  ASSERT_TRUE(context.ok());
  context->erase(publish_context::kStatic);
  auto spec = ParseAttachSpec("pv-a", *context, {}, kNodeInitiator);
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("serial"));
}

TEST(StaticVolumeTest, InitiatorNameReplacesTheNodesOnlyForStaticVolumes) {
  auto attributes = InTreeAttributes();
  attributes["initiatorName"] = "iqn.1994-05.com.redhat:worker-1";
  auto context = StaticPublishContext("pv-a", attributes, false);
  ASSERT_TRUE(context.ok());
  auto spec = ParseAttachSpec("pv-a", *context, {}, kNodeInitiator);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->initiator_iqn, "iqn.1994-05.com.redhat:worker-1");

  // A provisioned volume's context cannot pick another initiator.
  std::map<std::string, std::string> provisioned = {{publish_context::kPortals, "10.0.0.5:3260"},
                                                    {publish_context::kTargetIqn, "iqn.2026-11.io.blockcsi:vol-1"},
                                                    {publish_context::kLun, "1"},
                                                    {publish_context::kSerial, "abc"},
                                                    {publish_context::kInitiatorName, "iqn.1994-05.com.redhat:x"}};
  auto refused = ParseAttachSpec("vol-1", provisioned, {}, kNodeInitiator);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("initiatorName"));
}

TEST(StaticVolumeTest, ChapSessionNeedsNodeStageSecrets) {
  auto attributes = InTreeAttributes();
  attributes["chapAuthSession"] = "true";
  auto context = StaticPublishContext("pv-a", attributes, false);
  ASSERT_TRUE(context.ok());
  auto spec = ParseAttachSpec("pv-a", *context, {}, kNodeInitiator);
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr(secret_keys::kChapUsername));
}

TEST(StaticVolumeTest, TheRecordKeepsTheStaticMark) {
  AttachRecord record;
  record.volume_id = "pv-a";
  record.static_volume = true;
  auto back = AttachRecordFromJson(AttachRecordToJson(record), "test");
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->static_volume);
  record.static_volume = false;
  EXPECT_EQ(AttachRecordToJson(record).find("static"), std::string::npos);
}

}  // namespace
}  // namespace blockcsi
