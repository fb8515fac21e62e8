// TgtExporter against what tgtadm printed on a real tgtd (test/testdata/
// tgtadm), through the strict FakeExecutor: the exact tgtadm commands each
// change needs, the read-back of every ACL change, CHAP secrets kept out of
// what a log sees, and listings that cannot be trusted refused before any
// change.
#include "backend/local/tgt_exporter.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "support/fake_executor.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using testing::FakeExecutor;

constexpr int kPort = 3261;
constexpr char kN1[] = "iqn.2026-11.io.blockcsi:node:n1";
constexpr char kN2[] = "iqn.2026-11.io.blockcsi:node:n2";
// Target 2 of the captured listings, as its record describes it.
constexpr char kVol2[] = "vol-1111111111111111";
constexpr char kIqn2[] = "iqn.2026-11.io.blockcsi:vol-1111111111111111";

std::string Captured(const std::string& name) {
  return testing::ReadFileOrEmpty(testing::TestDataPath("tgtadm/" + name));
}

// `text` with the first occurrence of `from` replaced: a listing after a
// change, derived from the captured one.
std::string Edited(std::string text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "captured output lacks: " << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::vector<std::string> Tgtadm(std::vector<std::string> args) {
  std::vector<std::string> argv = {"/usr/sbin/tgtadm", "-C", std::to_string(kPort), "--lld", "iscsi"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

const std::vector<std::string> kShowTargets = Tgtadm({"--op", "show", "--mode", "target"});
const std::vector<std::string> kShowAccounts = Tgtadm({"--op", "show", "--mode", "account"});

// Target 2 as recorded: LUN 1 on b.img (34 MB as tgtd rounds), both nodes.
DesiredAcl Allow(const std::string& initiator, const std::string& chap_username = "") {
  DesiredAcl acl;
  acl.initiator_iqn = initiator;
  acl.chap = !chap_username.empty();
  acl.chap_username = chap_username;
  return acl;
}

DesiredExport Volume2() {
  DesiredExport d;
  d.iqn = kIqn2;
  d.volume_id = kVol2;
  d.image_path = "/tmp/bk/b.img";
  d.size_bytes = 34'000'000;
  d.serial = "bcsi1111111111111111";
  d.acls = {Allow(kN1), Allow(kN2)};
  return d;
}

class TgtExporterTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_TRUE(executor_->Pending().empty()) << "expected tgtadm commands never ran: " << executor_->Pending().front();
  }

  std::shared_ptr<FakeExecutor> executor_ = std::make_shared<FakeExecutor>();
  TgtExporter exporter_{executor_, kPort};
};

TEST_F(TgtExporterTest, AMatchingTargetIsLeftAlone) {
  executor_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  auto repairs = exporter_.Apply(Volume2());
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  EXPECT_TRUE(repairs->empty());
}

TEST_F(TgtExporterTest, RevokingAnInitiatorUnbindsItAndReadsTheAclBack) {
  const std::string listing = Captured("show_target_no_sessions.txt");
  executor_->ExpectOk(kShowTargets, listing);
  executor_->ExpectOk(Tgtadm({"--op", "unbind", "--mode", "target", "--tid", "2", "--initiator-name", kN2}));
  executor_->ExpectOk(kShowTargets, Edited(listing, std::string("        ") + kN2 + "\n", ""));
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1)};
  auto repairs = exporter_.Apply(d);
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  EXPECT_EQ(*repairs, std::vector<std::string>{std::string("disallowed ") + kN2 + " on " + kIqn2});
}

TEST_F(TgtExporterTest, AnAclThatReadsBackOtherwiseIsInternalNamingTheVolume) {
  const std::string listing = Captured("show_target_no_sessions.txt");
  executor_->ExpectOk(kShowTargets, listing);
  executor_->ExpectOk(Tgtadm({"--op", "unbind", "--mode", "target", "--tid", "2", "--initiator-name", kN2}));
  executor_->ExpectOk(kShowTargets, listing);  // tgtd still lets n2 in
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1)};
  auto repairs = exporter_.Apply(d);
  ASSERT_EQ(repairs.status().code(), StatusCode::kInternal);
  EXPECT_NE(repairs.status().message().find(kVol2), std::string::npos) << repairs.status().ToString();
}

TEST_F(TgtExporterTest, ANewVolumeGetsTheNextFreeTidItsLunIdentityAndItsAcl) {
  const std::string listing = Captured("show_target_no_sessions.txt");
  const std::string vol = "vol-2222222222222222";
  const std::string iqn = "iqn.2026-11.io.blockcsi:" + vol;
  // After the change tgtd lists target 6 like target 2, with n1 only.
  const std::string block2 =
      listing.substr(listing.find("Target 2:"), listing.find("Target 5:") - listing.find("Target 2:"));
  std::string block6 = Edited(Edited(block2, std::string("Target 2: ") + kIqn2, "Target 6: " + iqn),
                              std::string("        ") + kN2 + "\n", "");
  executor_->ExpectOk(kShowTargets, listing);
  executor_->ExpectOk(Tgtadm({"--op", "new", "--mode", "target", "--tid", "6", "-T", iqn}));
  executor_->ExpectOk(
      Tgtadm({"--op", "new", "--mode", "logicalunit", "--tid", "6", "--lun", "1", "-b", "/pool/v2.img"}));
  executor_->ExpectOk(Tgtadm({"--op", "update", "--mode", "logicalunit", "--tid", "6", "--lun", "1", "--params",
                              "scsi_sn=bcsi2222222222222222,scsi_id=" + TgtExporter::ScsiIdFor(vol)}));
  executor_->ExpectOk(Tgtadm({"--op", "bind", "--mode", "target", "--tid", "6", "--initiator-name", kN1}));
  executor_->ExpectOk(kShowTargets, listing + block6);
  DesiredExport d;
  d.iqn = iqn;
  d.volume_id = vol;
  d.image_path = "/pool/v2.img";
  d.size_bytes = 64 << 20;
  d.serial = "bcsi2222222222222222";
  d.acls = {Allow(kN1)};
  auto repairs = exporter_.Apply(d);
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  EXPECT_EQ(repairs->size(), 3u);  // target created, LUN added, n1 allowed
  EXPECT_EQ(TgtExporter::ScsiIdFor(vol), "b10cc5a12222222222222222");
  EXPECT_EQ(exporter_.IdentityFor(vol).wwn, "60000000b10cc5a12222222222222222");
}

TEST_F(TgtExporterTest, ChapAccountIsMadeWithItsSecretMarkedAndBoundToTheTarget) {
  executor_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  executor_->ExpectOk(kShowAccounts, Captured("show_account.txt"));
  executor_->ExpectOk(
      Tgtadm({"--op", "new", "--mode", "account", "--user", "bob", "--password", FakeExecutor::Secret("s3cret-pw")}));
  executor_->ExpectOk(Tgtadm({"--op", "bind", "--mode", "account", "--tid", "2", "--user", "bob"}));
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1, "bob"), Allow(kN2)};
  ChapCredentials bob;
  bob.username = "bob";
  bob.password = "s3cret-pw";
  d.chap = {bob};
  auto repairs = exporter_.Apply(d);
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  for (const auto& line : executor_->RedactedLog()) EXPECT_EQ(line.find("s3cret-pw"), std::string::npos) << line;
  for (const auto& line : *repairs) EXPECT_EQ(line.find("s3cret-pw"), std::string::npos) << line;
}

TEST_F(TgtExporterTest, AListingWithADuplicateTidChangesNothing) {
  executor_->ExpectOk(kShowTargets, Edited(Captured("show_target_no_sessions.txt"), "Target 5:", "Target 2:"));
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1)};
  auto repairs = exporter_.Apply(d);
  EXPECT_EQ(repairs.status().code(), StatusCode::kInternal) << repairs.status().ToString();
}

TEST_F(TgtExporterTest, ATgtdThatDoesNotAnswerIsUnavailable) {
  executor_->ExpectFail(kShowTargets, 107,
                        "tgtadm: failed to send request hdr to tgt daemon, Transport endpoint is not connected\n");
  EXPECT_EQ(exporter_.Apply(Volume2()).status().code(), StatusCode::kUnavailable);
}

TEST_F(TgtExporterTest, AFailedChangeIsInternalNamingTheVolume) {
  executor_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  executor_->ExpectFail(Tgtadm({"--op", "unbind", "--mode", "target", "--tid", "2", "--initiator-name", kN2}), 22,
                        "tgtadm: invalid request\n");
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1)};
  auto repairs = exporter_.Apply(d);
  ASSERT_EQ(repairs.status().code(), StatusCode::kInternal);
  EXPECT_NE(repairs.status().message().find(kVol2), std::string::npos) << repairs.status().ToString();
}

TEST_F(TgtExporterTest, CloseSessionsDeletesOnlyThatInitiatorsConnections) {
  executor_->ExpectOk(kShowTargets, Captured("show_target_sessions.txt"));
  executor_->ExpectOk(Tgtadm({"--op", "delete", "--mode", "conn", "--tid", "1", "--sid", "10", "--cid", "0"}));
  executor_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  EXPECT_TRUE(exporter_.CloseSessions("iqn.2026-11.io.blockcsi:vol-0123456789abcdef", kN1).ok());
}

TEST_F(TgtExporterTest, RemovingATargetDropsTheAccountNothingElseBinds) {
  executor_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  executor_->ExpectOk(Tgtadm({"--op", "delete", "--mode", "target", "--tid", "1", "--force"}));
  executor_->ExpectOk(Tgtadm({"--op", "delete", "--mode", "account", "--user", "alice"}));
  EXPECT_TRUE(exporter_.Remove("iqn.2026-11.io.blockcsi:vol-0123456789abcdef").ok());
}

TEST_F(TgtExporterTest, RemovingATargetThatIsGoneIsOk) {
  executor_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  EXPECT_TRUE(exporter_.Remove("iqn.2026-11.io.blockcsi:vol-9999999999999999").ok());
}

}  // namespace
}  // namespace blockcsi
