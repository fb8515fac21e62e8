#include "common/lun_identity.h"

#include <gtest/gtest.h>

#include "common/atomic_file.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

// Pages captured from tgtd (scsi_sn=bc7f3a9c2e41d08b, scsi_id=vol-7f3a9c2e,
// tid 3, LUN 1) with INQUIRY EVPD; the kernel's vpd_pg80/vpd_pg83 carry the
// same bytes.
std::string Page(const std::string& name) {
  auto text = ReadFileToString(
      testing::TestDataPath("sysfs/session1_lun1/sys/devices/platform/host3/session1/target3:0:0/3:0:0:1/" + name));
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : "";
}

TEST(LunIdentityTest, ParsesCapturedTgtPages) {
  auto id = ParseVpdPages(Page("vpd_pg80"), Page("vpd_pg83"));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->serial, "bc7f3a9c2e41d08b");  // right-aligned space padding trimmed
  EXPECT_EQ(id->naa, (std::vector<std::string>{"3000000300000001", "6000000000000000000000007f3a9c2e"}));
  EXPECT_EQ(id->wwn(), "6000000000000000000000007f3a9c2e");  // NAA 6 preferred over tgt's tid-based NAA 3
  ASSERT_EQ(id->other.size(), 1u);
  EXPECT_EQ(id->other[0], "t10:vol-7f3a9c2e");
}

TEST(LunIdentityTest, RejectsTruncatedOrForeignPages) {
  std::string p83 = Page("vpd_pg83");
  EXPECT_FALSE(ParseVpdPages("", p83.substr(0, 3)).ok());
  EXPECT_FALSE(ParseVpdPages("", p83.substr(0, 20)).ok());
  std::string p80 = Page("vpd_pg80");
  EXPECT_FALSE(ParseVpdPage80(p83).ok());
  EXPECT_FALSE(ParseVpdPage80(p80.substr(0, 10)).ok());
}

TEST(LunIdentityTest, IgnoresTargetPortDesignators) {
  // One NAA of the LUN (association 0) and one of the target port (1).
  std::string page = {0x00, static_cast<char>(0x83), 0x00, 24};
  page += std::string{0x01, 0x03, 0x00, 0x08} + std::string("\x50\x01\x40\x50\x00\x00\x00\x01", 8);
  page += std::string{0x01, 0x13, 0x00, 0x08} + std::string("\x50\x01\x40\x50\x99\x99\x99\x99", 8);
  LunIdentity id;
  ASSERT_TRUE(ParseVpdPage83(page, &id).ok());
  EXPECT_EQ(id.naa, (std::vector<std::string>{"5001405000000001"}));
}

TEST(LunIdentityTest, VerifyComparesSerialAndAnyNaa) {
  LunIdentity id;
  id.serial = "sn1";
  id.naa = {"3000000300000001", "6000000000000000000000007f3a9c2e"};
  EXPECT_TRUE(VerifyLunIdentity("v", "sn1", "", id).ok());
  EXPECT_TRUE(VerifyLunIdentity("v", "", "3000000300000001", id).ok());
  EXPECT_TRUE(VerifyLunIdentity("v", "sn1", "6000000000000000000000007f3a9c2e", id).ok());
  Status st = VerifyLunIdentity("v", "sn2", "", id);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("wrong LUN"), std::string::npos);
  EXPECT_NE(st.message().find("serial=sn1"), std::string::npos);
  EXPECT_NE(st.message().find("serial=sn2"), std::string::npos);
  EXPECT_EQ(VerifyLunIdentity("v", "sn1", "6000000000000000000000000000beef", id).code(),
            StatusCode::kFailedPrecondition);
  // A device without any identity never matches.
  EXPECT_FALSE(VerifyLunIdentity("v", "sn1", "", LunIdentity{}).ok());
}

}  // namespace
}  // namespace blockcsi
