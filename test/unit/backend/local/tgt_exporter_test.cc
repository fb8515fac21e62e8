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
#include "support/tgt_captured.h"

namespace blockcsi {
namespace {

using testing::FakeExecutor;
using namespace tgt_captured;  // the captured listings and their exports

constexpr int kPort = 3261;

std::vector<std::string> Tgtadm(std::vector<std::string> args) { return TgtadmArgv(kPort, std::move(args)); }

const std::vector<std::string> kShowTargets = Tgtadm({"--op", "show", "--mode", "target"});
const std::vector<std::string> kShowAccounts = Tgtadm({"--op", "show", "--mode", "account"});

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
  // After the change tgtd lists target 6 like target 2, with n1 only.
  const std::string block2 =
      listing.substr(listing.find("Target 2:"), listing.find("Target 5:") - listing.find("Target 2:"));
  std::string block6 = Edited(Edited(block2, std::string("Target 2: ") + kIqn2, std::string("Target 6: ") + kNewIqn),
                              std::string("        ") + kN2 + "\n", "");
  DesiredExport d = NewVolume();
  d.acls = {Allow(kN1)};
  executor_->ExpectOk(kShowTargets, listing);
  ExpectExportMade(*executor_, kPort, 6, d);
  executor_->ExpectOk(kShowTargets, listing + block6);
  auto repairs = exporter_.Apply(d);
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  EXPECT_EQ(repairs->size(), 3u);  // target created, LUN added, n1 allowed
  EXPECT_EQ(TgtExporter::ScsiIdFor(kNewVol), "b10cc5a12222222222222222");
  EXPECT_EQ(exporter_.IdentityFor(kNewVol).wwn, "60000000b10cc5a12222222222222222");
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
