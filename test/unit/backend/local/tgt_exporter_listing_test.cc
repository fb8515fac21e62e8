// TgtExporter's kept listing: which calls may skip reading tgtd's targets
// again, and which must not. tgtd's management socket is a plain file in a
// temp dir here (only its identity is looked at), the listings are the
// captured ones (test/testdata/tgtadm) and the strict FakeTgtd fails on any
// show a test does not expect, or a missing one.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/local/tgt_exporter.h"
#include "support/test_util.h"
#include "support/tgt_captured.h"

namespace blockcsi {
namespace {

using namespace tgt_captured;  // the captured listings and their exports

constexpr int kPort = 3262;

std::string Without(const std::string& text, const std::string& from) { return Edited(text, from, ""); }

const TgtdRequest kShowTargets = TgtdRequest::ShowTargets();

void ExpectNewTarget(FakeTgtd& tgtd, int tid) { ExpectExportMade(tgtd, tid, NewVolume()); }

class TgtExporterListingTest : public ::testing::Test {
 protected:
  TgtExporterListingTest() { MakeSocket(); }
  void TearDown() override {
    EXPECT_TRUE(tgtd_->Pending().empty()) << "expected tgtd requests never sent: " << tgtd_->Pending().front();
  }
  // What a (re)started tgtd does: a new socket file. Made beside the old one
  // and renamed over it, so that it cannot get the old one's inode number
  // (tgtd's may, which is why its change time counts too).
  void MakeSocket() {
    std::ofstream(socket_path() + ".new") << "";
    std::filesystem::rename(socket_path() + ".new", socket_path());
  }
  std::string socket_path() const { return dir_.Join("socket." + std::to_string(kPort)); }

  testing::TempDir dir_;
  std::shared_ptr<FakeTgtd> tgtd_ = std::make_shared<FakeTgtd>();
  TgtExporter exporter_{tgtd_, kPort, MachineHost(), dir_.path(), std::chrono::hours(1)};
};

TEST_F(TgtExporterListingTest, AnExportAlreadyInPlaceIsCheckedWithoutReadingTgtdAgain) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));  // once, for all three
  for (int i = 0; i < 3; ++i) {
    auto repairs = exporter_.Apply(Volume2());
    ASSERT_TRUE(repairs.ok()) << repairs.status().ToString();
    EXPECT_TRUE(repairs->empty());
  }
}

TEST_F(TgtExporterListingTest, ANewTargetIsMadeOnTheKeptListingAndKeptInStep) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  ASSERT_TRUE(exporter_.Apply(Volume2()).ok());
  ExpectNewTarget(*tgtd_, 6);  // the next tid after the listing's 5, no read
  auto made = exporter_.Apply(NewVolume());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(made->size(), 2u);  // target created, LUN added
  // The new target and its LUN are in the kept listing: nothing to do, no read.
  auto again = exporter_.Apply(NewVolume());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->empty()) << again->front();
}

TEST_F(TgtExporterListingTest, AnAclChangeIsDecidedOnAFreshReadAndReadBack) {
  const std::string listing = Captured("show_target_no_sessions.txt");
  tgtd_->ExpectOk(kShowTargets, listing);
  ASSERT_TRUE(exporter_.Apply(Volume2()).ok());
  // Revoking n2: a fresh read before the unbind, the read-back after.
  const std::string without_n2 = Without(listing, std::string("        ") + kN2 + "\n");
  tgtd_->ExpectOk(kShowTargets, listing);
  tgtd_->ExpectOk(TgtdRequest::UnbindInitiator(2, kN2));
  tgtd_->ExpectOk(kShowTargets, without_n2);
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1)};
  auto revoked = exporter_.Apply(d);
  ASSERT_TRUE(revoked.ok()) << revoked.status().ToString();
  // The read-back is kept: checking the same export again reads nothing.
  auto again = exporter_.Apply(d);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->empty());
}

// Calls that come while one is at tgtd are applied together next: one
// fresh read and one read-back for all of them, each result to its caller.
TEST_F(TgtExporterListingTest, CallsThatComeWhileOneIsAtTgtdShareTheNextReadAndReadBack) {
  // A third target, target 2's twin: volume 3 on c.img, both nodes allowed.
  const std::string listing = Captured("show_target_no_sessions.txt");
  const size_t begin = listing.find("Target 2: ");
  const size_t end = listing.find("Target 5: ");
  ASSERT_NE(begin, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  std::string target3 = listing.substr(begin, end - begin);
  target3 = Edited(target3, "Target 2: ", "Target 3: ");
  target3 = Edited(target3, "IET     00020000", "IET     00030000");
  target3 = Edited(target3, "/tmp/bk/b.img", "/tmp/bk/c.img");
  while (target3.find("1111111111111111") != std::string::npos) {
    target3 = Edited(target3, "1111111111111111", "3333333333333333");
  }
  const std::string n2_line = std::string("        ") + kN2 + "\n";
  DesiredExport volume3 = Volume2();
  volume3.iqn = "iqn.2026-11.io.blockcsi:vol-3333333333333333";
  volume3.volume_id = "vol-3333333333333333";
  volume3.image_path = "/tmp/bk/c.img";
  volume3.serial = "bcsi3333333333333333";
  ASSERT_NE(target3.find(volume3.serial), std::string::npos) << target3;

  // First: target 2 without n2, alone at tgtd. While it is there, target 3
  // without n2 and target 2 with n2 again queue behind it.
  DesiredExport first = Volume2();
  first.acls = {Allow(kN1)};
  DesiredExport second = volume3;
  second.acls = {Allow(kN1)};
  const DesiredExport third = Volume2();
  StatusOr<std::vector<std::string>> second_result = Internal("not run"), third_result = Internal("not run");
  std::thread second_call, third_call;
  auto wait_for_waiting = [&](size_t n) {
    for (int i = 0; i < 1000 && exporter_.WaitingApplies() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  tgtd_->ExpectOk(kShowTargets, listing + target3).Then([&] {
    second_call = std::thread([&] { second_result = exporter_.Apply(second); });
    wait_for_waiting(1);
    third_call = std::thread([&] { third_result = exporter_.Apply(third); });
    wait_for_waiting(2);
  });
  tgtd_->ExpectOk(TgtdRequest::UnbindInitiator(2, kN2));
  const std::string after_first = Without(listing, n2_line) + target3;
  tgtd_->ExpectOk(kShowTargets, after_first);  // the first call's read-back
  // The other two: one fresh read, both changes, one read-back.
  tgtd_->ExpectOk(kShowTargets, after_first);
  tgtd_->ExpectOk(TgtdRequest::UnbindInitiator(3, kN2));
  tgtd_->ExpectOk(TgtdRequest::BindInitiator(2, kN2));
  tgtd_->ExpectOk(kShowTargets, listing + Without(target3, n2_line));

  auto first_result = exporter_.Apply(first);
  if (second_call.joinable()) second_call.join();
  if (third_call.joinable()) third_call.join();
  ASSERT_TRUE(first_result.ok()) << first_result.status().ToString();
  ASSERT_TRUE(second_result.ok()) << second_result.status().ToString();
  ASSERT_TRUE(third_result.ok()) << third_result.status().ToString();
  EXPECT_EQ(*first_result, std::vector<std::string>{std::string("disallowed ") + kN2 + " on " + kIqn2});
  EXPECT_EQ(*second_result, std::vector<std::string>{std::string("disallowed ") + kN2 + " on " + volume3.iqn});
  EXPECT_EQ(*third_result, std::vector<std::string>{std::string("allowed ") + kN2 + " on " + kIqn2});
}

TEST_F(TgtExporterListingTest, ARestartedTgtdIsReadAgain) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  ASSERT_TRUE(exporter_.Apply(Volume2()).ok());
  MakeSocket();
  // The same export, in place on the kept listing, is read again from the
  // new tgtd, which has lost it: made again, at tid 1.
  tgtd_->ExpectOk(kShowTargets, "");
  ExpectExportMade(*tgtd_, 1, Volume2());
  tgtd_->ExpectOk(kShowTargets, "");  // the read-back: tgtd shows no target 1 (a fake tgtd)
  EXPECT_EQ(exporter_.Apply(Volume2()).status().code(), StatusCode::kInternal);
}

TEST_F(TgtExporterListingTest, ARefusedCommandMakesTheNextCallReadAgain) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  ASSERT_TRUE(exporter_.Apply(Volume2()).ok());
  // Someone else took tid 6 behind our back: tgtd refuses it, the call reads
  // again and makes the target at the tid the fresh listing leaves free.
  tgtd_->ExpectRefused(TgtdRequest::NewTarget(6, kNewIqn), TgtdError::kTargetExists);
  const std::string listing = Captured("show_target_no_sessions.txt");
  std::string other = listing.substr(listing.find("Target 5:"));
  other.replace(0, other.find('\n'), "Target 6: iqn.2003-01.org.example:other");
  const std::string taken = listing + other;
  tgtd_->ExpectOk(kShowTargets, taken);
  ExpectNewTarget(*tgtd_, 7);
  auto made = exporter_.Apply(NewVolume());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
}

TEST_F(TgtExporterListingTest, RemoveAndCloseSessionsReadFreshOutsideARevoke) {
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  ASSERT_TRUE(exporter_.Apply(Volume2()).ok());
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(2));
  EXPECT_TRUE(exporter_.CloseSessions(kIqn2, kN1).ok());
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectOk(TgtdRequest::DeleteTarget(2));
  EXPECT_TRUE(exporter_.Remove(kIqn2).ok());
}

// ControllerUnpublish: the revoke's ACL read-back, taken after the ACL was
// gone and with nothing sent since, is the first session read.
TEST_F(TgtExporterListingTest, CloseSessionsRightAfterARevokeUsesItsReadBack) {
  const std::string listing = Captured("show_target_no_sessions.txt");
  tgtd_->ExpectOk(kShowTargets, listing);
  ASSERT_TRUE(exporter_.Apply(Volume2()).ok());
  tgtd_->ExpectOk(kShowTargets, listing);
  tgtd_->ExpectOk(TgtdRequest::UnbindInitiator(2, kN2));
  tgtd_->ExpectOk(kShowTargets, Without(listing, std::string("        ") + kN2 + "\n"));
  DesiredExport d = Volume2();
  d.acls = {Allow(kN1)};
  ASSERT_TRUE(exporter_.Apply(d).ok());
  // The target's id from the read-back: only the connection listing is read.
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(2));
  EXPECT_TRUE(exporter_.CloseSessions(kIqn2, kN2).ok());
  // Another initiator (still in the ACL) is not covered by it, nor a call
  // after another read of the targets.
  tgtd_->ExpectOk(kShowTargets, listing);
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(2));
  EXPECT_TRUE(exporter_.CloseSessions(kIqn2, kN1).ok());
  tgtd_->ExpectOk(kShowTargets, listing);
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(2));
  EXPECT_TRUE(exporter_.CloseSessions(kIqn2, kN2).ok());
}

// A session of the revoked initiator is closed, and the next round reads its
// connections again.
TEST_F(TgtExporterListingTest, ASessionInTheRevokeReadBackIsClosedThenReadAgain) {
  const std::string listing = Captured("show_target_sessions.txt");
  auto sessions_checked = [&] {  // each target that shows a session, against tgtd's connection listing
    tgtd_->ExpectOk(TgtdRequest::ShowConnections(1), ConnectionListed(10, 0, kN1));
    tgtd_->ExpectOk(TgtdRequest::ShowConnections(2), ConnectionListed(9, 0, kN1));
  };
  tgtd_->ExpectOk(kShowTargets, listing);
  sessions_checked();
  tgtd_->ExpectOk(TgtdRequest::UnbindInitiator(2, kN1));
  tgtd_->ExpectOk(TgtdRequest::UnbindInitiator(2, kN2));
  const std::string no_acl = Without(listing, std::string("        ") + kN1 + "\n        " + kN2 + "\n");
  tgtd_->ExpectOk(kShowTargets, no_acl);
  sessions_checked();
  DesiredExport d = Volume2();
  d.acls = {};
  ASSERT_TRUE(exporter_.Apply(d).ok());
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(2), ConnectionListed(9, 0, kN1));
  tgtd_->ExpectOk(TgtdRequest::DeleteConnection(2, 9, 0));
  tgtd_->ExpectOk(TgtdRequest::ShowConnections(2));  // the second round: the session gone
  EXPECT_TRUE(exporter_.CloseSessions(kIqn2, kN1).ok());
}

TEST_F(TgtExporterListingTest, AListingOlderThanItsMaximumAgeIsReadAgain) {
  TgtExporter short_lived{tgtd_, kPort, MachineHost(), dir_.path(), std::chrono::milliseconds(0)};
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  ASSERT_TRUE(short_lived.Apply(Volume2()).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past an age of 0, whatever the clock's grain
  ASSERT_TRUE(short_lived.Apply(Volume2()).ok());
}

TEST_F(TgtExporterListingTest, WithoutASocketToIdentifyTgtdNothingIsKept) {
  std::filesystem::remove(socket_path());
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  tgtd_->ExpectOk(kShowTargets, Captured("show_target_no_sessions.txt"));
  ASSERT_TRUE(exporter_.Apply(Volume2()).ok());
  ASSERT_TRUE(exporter_.Apply(Volume2()).ok());
}

}  // namespace
}  // namespace blockcsi
