// TgtExporter against what tgtadm printed on a real tgtd (test/testdata/
// tgtadm), through the strict FakeTgtd: the exact tgtd requests each change
// needs, the read-back of every ACL change, which of tgtd's error numbers
// count as "already so" and which fail, CHAP secrets kept out of what the
// caller sees, and listings that cannot be trusted refused before any change.
#include "backend/local/tgt_exporter.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "support/test_util.h"
#include "support/tgt_captured.h"

namespace blockcsi {
namespace {

using namespace tgt_captured;  // the captured listings and their exports

constexpr int kPort = 3261;

const TgtdRequest kShowTargets = TgtdRequest::ShowTargets();
const TgtdRequest kShowAccounts = TgtdRequest::ShowAccounts();

class TgtExporterTest : public ::testing::Test {
 protected:
  // show_target_sessions.txt parsed: each target that shows a session is
  // checked against tgtd's connection listing.
  void ExpectSessionsChecked() {
    tgtd_->ExpectOk(TgtdRequest::ShowConnections(1), ConnectionListed(10, 0, kN1));
    tgtd_->ExpectOk(TgtdRequest::ShowConnections(2), ConnectionListed(9, 0, kN1));
  }
  void TearDown() override {
    EXPECT_TRUE(tgtd_->Pending().empty()) << "expected tgtd requests never sent: " << tgtd_->Pending().front();
  }

  std::shared_ptr<FakeTgtd> tgtd_ = std::make_shared<FakeTgtd>();
  TgtExporter exporter_{tgtd_, kPort, MachineHost()};
};

TEST_F(TgtExporterTest, AMatchingTargetIsLeftAlone) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  auto repairs = exporter_.Apply(Volume2());
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  EXPECT_TRUE(repairs->empty());
}

TEST_F(TgtExporterTest, RevokingAnInitiatorUnbindsItAndReadsTheAclBack) {
  const std::string listing = Captured("show_target_no_sessions.txt");
  tgtd_->ExpectOk(kShowTargets, listing);
  tgtd_->ExpectOk(TgtdRequest::UnbindInitiator(2, kN2));
  tgtd_->ExpectOk(kShowTargets, Edited(listing, std::string("        ") + kN2 + "\n", ""));
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1)};
  auto repairs = exporter_.Apply(d);
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  EXPECT_EQ(*repairs, std::vector<std::string>{std::string("disallowed ") + kN2 + " on " + kIqn2});
}

TEST_F(TgtExporterTest, AnAclThatReadsBackOtherwiseIsInternalNamingTheVolume) {
  const std::string listing = Captured("show_target_no_sessions.txt");
  tgtd_->ExpectOk(kShowTargets, listing);
  tgtd_->ExpectOk(TgtdRequest::UnbindInitiator(2, kN2));
  tgtd_->ExpectOk(kShowTargets, listing);  // tgtd still lets n2 in
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
  tgtd_->ExpectOk(kShowTargets, listing);
  ExpectExportMade(*tgtd_, 6, d);
  tgtd_->ExpectOk(kShowTargets, listing + block6);
  auto repairs = exporter_.Apply(d);
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  EXPECT_EQ(repairs->size(), 3u);  // target created, LUN added, n1 allowed
  EXPECT_EQ(TgtExporter::ScsiIdFor(kNewVol), "b10cc5a12222222222222222");
  EXPECT_EQ(exporter_.IdentityFor(kNewVol).wwn, "60000000b10cc5a12222222222222222");
}

// A LUN an older blockcsi made thick: one update switches it, in place; the
// LUN is neither deleted nor added again (its sessions stay).
TEST_F(TgtExporterTest, AThickLunIsMadeThinInPlace) {
  const std::string listing = Captured("show_target_no_sessions.txt");
  const std::string block2 = listing.substr(listing.find("Target 2:"));
  const std::string thick =
      listing.substr(0, listing.find("Target 2:")) + Edited(block2, "Thin-provisioning: Yes", "Thin-provisioning: No");
  tgtd_->ExpectOk(kShowTargets, thick);
  tgtd_->ExpectOk(TgtdRequest::SetLunThin(2, 1));
  auto repairs = exporter_.Apply(Volume2());
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  EXPECT_EQ(*repairs, std::vector<std::string>{std::string("made LUN 1 of ") + kIqn2 + " thin"});

  // A switch tgtd refuses is the volume's failure, not taken for done.
  tgtd_->ExpectOk(kShowTargets, thick);
  tgtd_->ExpectRefused(TgtdRequest::SetLunThin(2, 1), TgtdError::kUnknownParameter);
  repairs = exporter_.Apply(Volume2());
  ASSERT_EQ(repairs.status().code(), StatusCode::kInternal);
  EXPECT_NE(repairs.status().message().find(kVol2), std::string::npos) << repairs.status().ToString();
}

TEST_F(TgtExporterTest, ChapAccountIsMadeAndBoundToTheTargetWithItsSecretInNoRepair) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectOk(kShowAccounts, Captured("show_account.txt"));
  tgtd_->ExpectOk(TgtdRequest::NewAccount("bob", "s3cret-pw"));
  tgtd_->ExpectOk(TgtdRequest::BindAccount(2, "bob", false));
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1, "bob"), Allow(kN2)};
  ChapCredentials bob;
  bob.username = "bob";
  bob.password = "s3cret-pw";
  d.chap = {bob};
  auto repairs = exporter_.Apply(d);
  ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
  for (const auto& line : *repairs) EXPECT_EQ(line.find("s3cret-pw"), std::string::npos) << line;
}

ChapCredentials Chap(const std::string& user, const std::string& password) {
  ChapCredentials c;
  c.username = user;
  c.password = password;
  return c;
}

// tgtd's accounts are global by user name: volume 2 asking for "alice",
// which target 1 (another volume) binds, would reset target 1's account to
// volume 2's password. Refused before any change, naming the other target
// and no secret.
TEST_F(TgtExporterTest, AUserNameAnotherVolumeBindsIsRefusedBeforeAnyChange) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectOk(kShowAccounts, Captured("show_account.txt"));
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1, "alice"), Allow(kN2)};
  d.chap = {Chap("alice", "volume-two-pw")};
  auto applied = exporter_.Apply(d);
  ASSERT_EQ(applied.status().code(), StatusCode::kFailedPrecondition) << applied.status().ToString();
  EXPECT_NE(applied.status().message().find("iqn.2026-11.io.blockcsi:vol-0123456789abcdef"), std::string::npos)
      << applied.status().message();
  EXPECT_EQ(applied.status().message().find("volume-two-pw"), std::string::npos);
}

// The same name with the very password it already has is one account for
// both volumes: bound, never replaced. With another password: refused.
TEST_F(TgtExporterTest, AUserNameSharedWithTheSamePasswordIsOneAccount) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectOk(kShowAccounts, Captured("show_account.txt"));
  tgtd_->ExpectOk(TgtdRequest::NewAccount("bob", "shared-secret-pw"));
  tgtd_->ExpectOk(TgtdRequest::BindAccount(2, "bob", false));
  DesiredExport two = Volume2();
  two.acls = {Allow(kN1, "bob"), Allow(kN2)};
  two.chap = {Chap("bob", "shared-secret-pw")};
  ASSERT_TRUE(exporter_.Apply(two).ok());

  const std::string listing = Edited(Captured("show_target_no_sessions.txt"),
                                     "    Account information:\n    ACL information:\n        "
                                     "iqn.2026-11.io.blockcsi:node:n1\n        iqn.2026-11.io.blockcsi:node:n2",
                                     "    Account information:\n        bob\n    ACL information:\n        "
                                     "iqn.2026-11.io.blockcsi:node:n1\n        iqn.2026-11.io.blockcsi:node:n2");
  const std::string accounts = Captured("show_account.txt") + "    bob\n";
  tgtd_->ExpectOk(kShowTargets, listing);
  tgtd_->ExpectOk(kShowAccounts, accounts);
  ExpectExportMade(*tgtd_, 6, NewVolume());
  tgtd_->ExpectOk(TgtdRequest::BindAccount(6, "bob", false));
  DesiredExport other = NewVolume();
  other.chap = {Chap("bob", "shared-secret-pw")};
  auto shared = exporter_.Apply(other);
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();

  tgtd_->ExpectOk(kShowTargets, listing);
  tgtd_->ExpectOk(kShowAccounts, accounts);
  other.chap = {Chap("bob", "another-secret")};
  EXPECT_EQ(exporter_.Apply(other).status().code(), StatusCode::kFailedPrecondition);
}

// Two grants of one volume giving one name two passwords: one account
// cannot hold both.
TEST_F(TgtExporterTest, OneUserNameWithTwoPasswordsInOneVolumeIsRefused) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectOk(kShowAccounts, Captured("show_account.txt"));
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1, "bob"), Allow(kN2, "bob")};
  d.chap = {Chap("bob", "first-secret-pw"), Chap("bob", "other-secret-pw")};
  EXPECT_EQ(exporter_.Apply(d).status().code(), StatusCode::kFailedPrecondition);
}

// Rotation, or the first grant after an agent restart (the password is not
// known): tgtd has no password update, so the account is deleted and made
// again; meanwhile a hold account with a random secret keeps the target
// from letting anyone in without CHAP.
TEST_F(TgtExporterTest, AnAccountIsReplacedWhileAHoldAccountKeepsTheTargetClosed) {
  const std::string listing = Edited(Captured("show_target_no_sessions.txt"),
                                     "    Account information:\n    ACL information:\n        "
                                     "iqn.2026-11.io.blockcsi:node:n1\n        iqn.2026-11.io.blockcsi:node:n2",
                                     "    Account information:\n        bob\n    ACL information:\n        "
                                     "iqn.2026-11.io.blockcsi:node:n1\n        iqn.2026-11.io.blockcsi:node:n2");
  tgtd_->ExpectOk(kShowTargets, listing);
  tgtd_->ExpectOk(kShowAccounts, Captured("show_account.txt") + "    bob\n");
  tgtd_->ExpectHold(TgtdRequest::NewAccount(FakeTgtd::kHold, ""));
  tgtd_->ExpectHold(TgtdRequest::BindAccount(2, FakeTgtd::kHold, false));
  tgtd_->ExpectOk(TgtdRequest::DeleteAccount("bob"));
  tgtd_->ExpectOk(TgtdRequest::NewAccount("bob", "rotated-secret"));
  tgtd_->ExpectOk(TgtdRequest::BindAccount(2, "bob", false));
  tgtd_->ExpectHold(TgtdRequest::UnbindAccount(2, FakeTgtd::kHold, false));
  tgtd_->ExpectHold(TgtdRequest::DeleteAccount(FakeTgtd::kHold));
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1, "bob"), Allow(kN2)};
  d.chap = {Chap("bob", "rotated-secret")};
  auto applied = exporter_.Apply(d);
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
}

TEST_F(TgtExporterTest, AListingWithADuplicateTidChangesNothing) {
  tgtd_->ExpectOk(kShowTargets, Edited(Captured("show_target_no_sessions.txt"), "Target 5:", "Target 2:"));
  // No session there could have forged it: refused, nothing closed.
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(1));
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(2));
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1)};
  auto repairs = exporter_.Apply(d);
  EXPECT_EQ(repairs.status().code(), StatusCode::kInternal) << repairs.status().ToString();
}

TEST_F(TgtExporterTest, ATgtdThatDoesNotAnswerIsUnavailable) {
  tgtd_->ExpectError(kShowTargets, Unavailable("tgtd on control port 3261 does not answer"));
  EXPECT_EQ(exporter_.Apply(Volume2()).status().code(), StatusCode::kUnavailable);
}

TEST_F(TgtExporterTest, ATgtdThatRefusesToListIsUnavailable) {
  tgtd_->ExpectRefused(kShowTargets, TgtdError::kNoDriver);
  EXPECT_EQ(exporter_.Apply(Volume2()).status().code(), StatusCode::kUnavailable);
}

TEST_F(TgtExporterTest, AFailedChangeIsInternalNamingTheVolume) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectRefused(TgtdRequest::UnbindInitiator(2, kN2), TgtdError::kInvalidRequest);
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1)};
  auto repairs = exporter_.Apply(d);
  ASSERT_EQ(repairs.status().code(), StatusCode::kInternal);
  EXPECT_NE(repairs.status().message().find(kVol2), std::string::npos) << repairs.status().ToString();
}

TEST_F(TgtExporterTest, CloseSessionsDeletesOnlyThatInitiatorsConnections) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_sessions.txt"));
  ExpectSessionsChecked();
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(1), ConnectionListed(10, 0, kN1) + ConnectionListed(11, 0, kN2));
  tgtd_->ExpectOk(TgtdRequest::DeleteConnection(1, 10, 0));
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(1), ConnectionListed(11, 0, kN2));
  EXPECT_TRUE(exporter_.CloseSessions("iqn.2026-11.io.blockcsi:vol-0123456789abcdef", kN1).ok());
}

// An alias that steals the real session's connection lines into a forged
// I_T nexus block of another initiator: the listing parses, but target 1
// shows a session tgtd's connection listing does not have, so its sessions
// are closed (the hostile one among them) and tgtd read again. Nothing the
// target listing says about sessions decides what CloseSessions closes.
TEST_F(TgtExporterTest, AnAliasThatForgesASecondNexusDoesNotHideTheSession) {
  const std::string nexus = std::string("            Initiator: ") + kN1 + " alias: none\n";
  const std::string forged =
      std::string("            Initiator: ") + kN1 +
      " alias: none\n        I_T nexus: 77\n            Initiator: iqn.2026-11.x:ghost alias: y\n";
  tgtd_->ExpectOk(kShowTargets, Edited(Captured("show_target_sessions.txt"), nexus, forged));
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(1), ConnectionListed(10, 0, kN1));
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(2), ConnectionListed(9, 0, kN1));
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(1), ConnectionListed(10, 0, kN1));
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(2), ConnectionListed(9, 0, kN1));  // shown plainly: left alone
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(5));
  tgtd_->ExpectOk(TgtdRequest::DeleteConnection(1, 10, 0));
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(1));
  EXPECT_TRUE(exporter_.CloseSessions("iqn.2026-11.io.blockcsi:vol-0123456789abcdef", kN1).ok());
}

// An alias with a line break and a forged target heading makes the listing
// unparseable: the session whose alias did it (not shown plainly) is closed
// and tgtd read again, so the call still succeeds; the other session, shown
// plainly, is left alone.
TEST_F(TgtExporterTest, ASessionWhoseAliasBreaksTheListingIsClosedAndTgtdReadAgain) {
  const std::string listing = Captured("show_target_sessions.txt");
  const std::string plain = std::string("            Initiator: ") + kN1 + " alias: none\n";
  std::string hostile = Edited(listing, plain,
                               std::string("            Initiator: ") + kN1 +
                                   " alias: \nTarget 999: iqn.2026-11.io.blockcsi:vol-9999999999999999\n");
  tgtd_->ExpectOk(kShowTargets, hostile);
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(1), ConnectionListed(10, 0, kN1));
  tgtd_->ExpectRefused(TgtdRequest::ShowConnections(999), TgtdError::kNoTarget);
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(2), ConnectionListed(9, 0, kN1));
  tgtd_->ExpectRefused(TgtdRequest::ShowConnections(5), TgtdError::kNoTarget);
  tgtd_->ExpectOk(TgtdRequest::DeleteConnection(1, 10, 0));
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));  // read again: the hostile session is gone
  EXPECT_TRUE(exporter_.Apply(Volume2()).ok());
}

// An alias cut short by tgtd's 1,024-byte limit can end in a line that
// passes, so that its session looks plain while the listing does not parse
// (here: a second LUN 0 in target 1). The sessions of the target whose
// heading comes last before the refused line are closed.
TEST_F(TgtExporterTest, WhenNoSessionLooksForgedTheTargetHoldingTheRefusedLineIsSuspect) {
  const std::string listing = Captured("show_target_sessions.txt");
  std::string hostile = Edited(listing, "    LUN information:\n", "    LUN information:\n        LUN: 0\n");
  tgtd_->ExpectOk(kShowTargets, hostile);
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(1), ConnectionListed(10, 0, kN1));
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(2), ConnectionListed(9, 0, kN1));
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(5));
  tgtd_->ExpectOk(TgtdRequest::DeleteConnection(1, 10, 0));  // not target 2's session
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  EXPECT_TRUE(exporter_.Apply(Volume2()).ok());
}

// The initiator that broke the listing logs in again at once (a new
// session each time): the first round only closes its session, the second
// takes it out of the target's ACL before closing, so the third read is
// clean; its ACL entry is put back right after that read and the listing
// the call goes on with shows it.
TEST_F(TgtExporterTest, AnInitiatorThatLogsInAgainIsKeptOutForOneReadAndLetBackIn) {
  std::string hostile = Edited(Captured("show_target_no_sessions.txt"), "    I_T nexus information:\n",
                               std::string("    I_T nexus information:\n        I_T nexus: 10\n") +
                                   "            Initiator: " + kN1 + " alias: \nTarget 999: iqn.x\n");
  for (int round = 0; round < 2; ++round) {
    tgtd_->ExpectOk(kShowTargets, hostile);
    tgtd_->ExpectOk(TgtdRequest::ShowConnections(1), ConnectionListed(10 + round, 0, kN1));
    tgtd_->ExpectRefused(TgtdRequest::ShowConnections(999), TgtdError::kNoTarget);
    tgtd_->ExpectOk(TgtdRequest::ShowConnections(2));
    tgtd_->ExpectOk(TgtdRequest::ShowConnections(5));
    if (round == 1) tgtd_->ExpectOk(TgtdRequest::UnbindInitiator(1, kN1));  // before its session closes
    tgtd_->ExpectOk(TgtdRequest::DeleteConnection(1, 10 + round, 0));
  }
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectOk(TgtdRequest::BindInitiator(1, kN1));
  EXPECT_TRUE(exporter_.Apply(Volume2()).ok());
}

// A listing that stays broken after the sessions that broke it are closed
// and their initiators kept out (others log in and forge it again each
// time) is refused after a few rounds, with every ACL entry taken out put
// back.
TEST_F(TgtExporterTest, AListingThatStaysBrokenIsRefusedAfterAFewRecoveries) {
  std::string hostile = Edited(Captured("show_target_no_sessions.txt"), "    I_T nexus information:\n",
                               std::string("    I_T nexus information:\n        I_T nexus: 10\n") +
                                   "            Initiator: " + kN1 + " alias: \nTarget 999: iqn.x\n");
  for (int round = 0; round < 4; ++round) {
    tgtd_->ExpectOk(kShowTargets, hostile);
    if (round == 3) break;
    tgtd_->ExpectOk(TgtdRequest::ShowConnections(1), ConnectionListed(10 + round, 0, kN1));
    tgtd_->ExpectRefused(TgtdRequest::ShowConnections(999), TgtdError::kNoTarget);
    tgtd_->ExpectOk(TgtdRequest::ShowConnections(2));
    tgtd_->ExpectOk(TgtdRequest::ShowConnections(5));
    if (round == 1) tgtd_->ExpectOk(TgtdRequest::UnbindInitiator(1, kN1));  // once: it is out from then on
    tgtd_->ExpectOk(TgtdRequest::DeleteConnection(1, 10 + round, 0));
  }
  tgtd_->ExpectOk(TgtdRequest::BindInitiator(1, kN1));
  EXPECT_EQ(exporter_.Apply(Volume2()).status().code(), StatusCode::kInternal);
}

TEST_F(TgtExporterTest, RemovingATargetDropsTheAccountNothingElseBinds) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectOk(TgtdRequest::DeleteTarget(1));
  tgtd_->ExpectOk(TgtdRequest::DeleteAccount("alice"));
  EXPECT_TRUE(exporter_.Remove("iqn.2026-11.io.blockcsi:vol-0123456789abcdef").ok());
}

TEST_F(TgtExporterTest, RemovingATargetThatIsGoneIsOk) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  EXPECT_TRUE(exporter_.Remove("iqn.2026-11.io.blockcsi:vol-9999999999999999").ok());
}

// tgtd's "already so" answers to the change a step asked for count as done;
// the same error number for another step does not.
TEST_F(TgtExporterTest, AnAclRuleTgtdAlreadyHasOrAlreadyLacksIsTolerated) {
  const std::string listing = Captured("show_target_no_sessions.txt");
  const std::string without_n2 = Edited(listing, std::string("        ") + kN2 + "\n", "");
  tgtd_->ExpectOk(kShowTargets, listing);
  tgtd_->ExpectRefused(TgtdRequest::UnbindInitiator(2, kN2), TgtdError::kAclDoesNotExist);
  tgtd_->ExpectOk(kShowTargets, without_n2);
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1)};
  auto revoked = exporter_.Apply(d);
  ASSERT_TRUE(revoked.ok()) << revoked.status().ToString();

  tgtd_->ExpectOk(kShowTargets, without_n2);
  tgtd_->ExpectRefused(TgtdRequest::BindInitiator(2, kN2), TgtdError::kAclExists);
  tgtd_->ExpectOk(kShowTargets, listing);
  auto granted = exporter_.Apply(Volume2());
  ASSERT_TRUE(granted.ok()) << granted.status().ToString();
}

TEST_F(TgtExporterTest, AnErrorNumberToleratedElsewhereFailsAnotherStep) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  // "already exists" for a rule that was to be removed: not "already so".
  tgtd_->ExpectRefused(TgtdRequest::UnbindInitiator(2, kN2), TgtdError::kAclExists);
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1)};
  EXPECT_EQ(exporter_.Apply(d).status().code(), StatusCode::kInternal);
}

// tgtd refuses an outgoing bind while any account holds the target's one
// outgoing slot: after the listing showed it empty, that is someone else's
// account, and the grant fails instead of passing for mutual CHAP.
TEST_F(TgtExporterTest, AnOutgoingSlotTgtdSaysIsTakenFailsTheGrant) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectOk(kShowAccounts, Captured("show_account.txt"));
  tgtd_->ExpectOk(TgtdRequest::NewAccount("bob", "s3cret-pw"));
  tgtd_->ExpectOk(TgtdRequest::NewAccount("tgt-bob", "mutual-pw-123"));
  tgtd_->ExpectOk(TgtdRequest::BindAccount(2, "bob", false));
  tgtd_->ExpectRefused(TgtdRequest::BindAccount(2, "tgt-bob", true), TgtdError::kOutgoingAccountExists);
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1, "bob")};
  ChapCredentials bob;
  bob.username = "bob";
  bob.password = "s3cret-pw";
  bob.mutual_username = "tgt-bob";
  bob.mutual_password = "mutual-pw-123";
  d.chap = {bob};
  EXPECT_EQ(exporter_.Apply(d).status().code(), StatusCode::kInternal);
}

TEST_F(TgtExporterTest, ANewTargetWhoseTidTgtdAlreadyHasFails) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectRefused(TgtdRequest::NewTarget(6, kNewIqn), TgtdError::kTargetExists);
  EXPECT_EQ(exporter_.Apply(NewVolume()).status().code(), StatusCode::kInternal);
}

TEST_F(TgtExporterTest, RemovingATargetTgtdNoLongerHasIsOk) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectRefused(TgtdRequest::DeleteTarget(1), TgtdError::kNoTarget);
  tgtd_->ExpectRefused(TgtdRequest::DeleteAccount("alice"), TgtdError::kNoUser);
  EXPECT_TRUE(exporter_.Remove("iqn.2026-11.io.blockcsi:vol-0123456789abcdef").ok());
}

}  // namespace
}  // namespace blockcsi
