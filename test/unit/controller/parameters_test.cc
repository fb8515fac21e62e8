// StorageClass parameter parsing: the keys the driver accepts and where
// each one ends up (volume_context, backend record).
#include "controller/parameters.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace blockcsi {
namespace {

using ::testing::HasSubstr;

TEST(ParametersTest, AcceptsDriverBackendAndSidecarKeys) {
  auto parsed = ParseVolumeParameters({{"fsType", "xfs"},
                                       {"mkfsOptions", "-K"},
                                       {"chap", "true"},
                                       {"backend", "b1"},
                                       {"poolDir", "fast"},
                                       {"csi.storage.k8s.io/pv/name", "pv-1"}},
                                      {"poolDir"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->fs_type, "xfs");
  EXPECT_EQ(parsed->mkfs_options, "-K");
  EXPECT_TRUE(parsed->chap);
  EXPECT_EQ(parsed->persisted.count("poolDir"), 1u);
  EXPECT_EQ(parsed->persisted.count("csi.storage.k8s.io/pv/name"), 0u);
  auto context = VolumeContextFor(*parsed);
  EXPECT_EQ(context.at("fsType"), "xfs");
  EXPECT_EQ(context.at("mkfsOptions"), "-K");
  // The record round-trips to the same context.
  EXPECT_EQ(VolumeContextFor(VolumeParametersFromRecord(parsed->persisted)), context);
}

TEST(ParametersTest, UnknownKeyIsNamed) {
  auto parsed = ParseVolumeParameters({{"poolDirr", "x"}}, {"poolDir"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("poolDirr"));
}

TEST(ParametersTest, SidecarFsTypeFillsInAndMustAgree) {
  auto parsed = ParseVolumeParameters({{"csi.storage.k8s.io/fstype", "ext4"}}, {});
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->fs_type, "ext4");
  EXPECT_EQ(parsed->persisted.at("fsType"), "ext4");
  EXPECT_FALSE(ParseVolumeParameters({{"fsType", "xfs"}, {"csi.storage.k8s.io/fstype", "ext4"}}, {}).ok());
  EXPECT_TRUE(ParseVolumeParameters({{"fsType", "xfs"}, {"csi.storage.k8s.io/fstype", "xfs"}}, {}).ok());
  EXPECT_FALSE(ParseVolumeParameters({{"fsType", "vfat"}}, {}).ok());
  EXPECT_FALSE(ParseVolumeParameters({{"chap", "1"}}, {}).ok());
}

TEST(ParametersTest, SnapshotParametersAcceptOnlySidecarKeys) {
  EXPECT_TRUE(ValidateSnapshotParameters({{"csi.storage.k8s.io/volumesnapshot/name", "s"}}).ok());
  Status st = ValidateSnapshotParameters({{"tier", "gold"}});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("tier"));
}

TEST(ParametersTest, EncryptedIsABooleanThatReachesTheRecordAndTheVolumeContext) {
  auto parsed = ParseVolumeParameters({{"encrypted", "true"}}, {});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(parsed->encrypted);
  EXPECT_EQ(parsed->persisted.at("encrypted"), "true");
  EXPECT_EQ(VolumeContextFor(*parsed).at("encryption"), "luks2");
  EXPECT_EQ(VolumeContextFor(VolumeParametersFromRecord(parsed->persisted)).at("encryption"), "luks2");

  auto plain = ParseVolumeParameters({{"encrypted", "false"}}, {});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->encrypted);
  EXPECT_FALSE(VolumeContextFor(*plain).contains("encryption"));

  auto bad = ParseVolumeParameters({{"encrypted", "yes"}}, {});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("encrypted"));
}

}  // namespace
}  // namespace blockcsi
