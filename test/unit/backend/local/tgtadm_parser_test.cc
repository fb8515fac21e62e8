#include "backend/local/tgtadm_parser.h"

#include <gtest/gtest.h>

#include "support/test_util.h"

namespace blockcsi {
namespace {

using testing::ReadFileOrEmpty;
using testing::TestDataPath;

TEST(TgtadmParserTest, ParsesTargetsWithSessionsLunsAccountsAndAcls) {
  std::string text = ReadFileOrEmpty(TestDataPath("tgtadm/show_target_sessions.txt"));
  ASSERT_FALSE(text.empty());
  auto targets = ParseTgtadmTargets(text);
  ASSERT_TRUE(targets.ok()) << targets.status().ToString();
  ASSERT_EQ(targets->size(), 3u);

  const TgtTarget& t1 = (*targets)[0];
  EXPECT_EQ(t1.tid, 1);
  EXPECT_EQ(t1.iqn, "iqn.2026-11.io.blockcsi:vol-0123456789abcdef");
  ASSERT_EQ(t1.sessions.size(), 1u);
  EXPECT_EQ(t1.sessions[0].sid, 10);
  EXPECT_EQ(t1.sessions[0].initiator, "iqn.2026-11.io.blockcsi:node:n1");
  ASSERT_EQ(t1.sessions[0].connections.size(), 1u);
  EXPECT_EQ(t1.sessions[0].connections[0].cid, 0);
  EXPECT_EQ(t1.sessions[0].connections[0].address, "127.0.0.1");
  ASSERT_EQ(t1.luns.size(), 2u);
  const TgtLun* lun = t1.FindLun(1);
  ASSERT_NE(lun, nullptr);
  EXPECT_EQ(lun->type, "disk");
  EXPECT_EQ(lun->scsi_sn, "bc0123456789abcdef");
  EXPECT_EQ(lun->size_mb, 67u);  // 64 MiB in tgtd's decimal megabytes
  EXPECT_EQ(lun->backing_path, "/tmp/bk/a.img");
  EXPECT_TRUE(lun->thin_provisioning);
  EXPECT_EQ(t1.FindLun(0)->backing_path, "");
  EXPECT_FALSE(t1.FindLun(0)->thin_provisioning);
  EXPECT_EQ(t1.incoming_accounts, std::vector<std::string>{"alice"});
  EXPECT_TRUE(t1.outgoing_accounts.empty());
  EXPECT_EQ(t1.acls, std::vector<std::string>{"iqn.2026-11.io.blockcsi:node:n1"});

  const TgtTarget& t2 = (*targets)[1];
  EXPECT_EQ(t2.FindLun(1)->scsi_id, "b10cc5a11111111111111111");
  EXPECT_EQ(t2.acls.size(), 2u);

  const TgtTarget& t5 = (*targets)[2];
  EXPECT_EQ(t5.tid, 5);
  EXPECT_EQ(t5.iqn, "iqn.2003-01.org.example:foreign");
  EXPECT_EQ(t5.FindLun(1), nullptr);
  EXPECT_TRUE(t5.acls.empty());
  EXPECT_TRUE(t5.sessions.empty());
}

TEST(TgtadmParserTest, ParsesOutgoingAccounts) {
  auto targets = ParseTgtadmTargets(ReadFileOrEmpty(TestDataPath("tgtadm/show_target_mutual.txt")));
  ASSERT_TRUE(targets.ok()) << targets.status().ToString();
  ASSERT_FALSE(targets->empty());
  EXPECT_EQ((*targets)[0].incoming_accounts, std::vector<std::string>{"alice"});
  EXPECT_EQ((*targets)[0].outgoing_accounts, std::vector<std::string>{"tgtmutual"});
}

TEST(TgtadmParserTest, TargetsWithoutSessionsHaveNone) {
  auto targets = ParseTgtadmTargets(ReadFileOrEmpty(TestDataPath("tgtadm/show_target_no_sessions.txt")));
  ASSERT_TRUE(targets.ok()) << targets.status().ToString();
  ASSERT_EQ(targets->size(), 3u);
  for (const auto& t : *targets) EXPECT_TRUE(t.sessions.empty()) << t.iqn;
  EXPECT_EQ((*targets)[1].acls,
            (std::vector<std::string>{"iqn.2026-11.io.blockcsi:node:n1", "iqn.2026-11.io.blockcsi:node:n2"}));
}

TEST(TgtadmParserTest, EmptyOutputIsNoTargets) {
  auto targets = ParseTgtadmTargets("");
  ASSERT_TRUE(targets.ok());
  EXPECT_TRUE(targets->empty());
}

TEST(TgtadmParserTest, RejectsTextItCannotPlace) {
  EXPECT_EQ(ParseTgtadmTargets("garbage\n").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTgtadmTargets("Target x: iqn.a:b\n").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTgtadmTargets("Target 1: iqn.a:b\n    Mystery section:\n").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTgtadmTargets("Target 1: iqn.a:b\n    LUN information:\n            Type: disk\n").status().code(),
            StatusCode::kInvalidArgument);
}

// A reconcile switches a LUN on this line: a value tgtd does not print is
// not guessed at.
TEST(TgtadmParserTest, ReadsThinProvisioningAndRefusesAnyOtherValue) {
  const std::string text = ReadFileOrEmpty(TestDataPath("tgtadm/show_target_no_sessions.txt"));
  const std::string thin = "            Thin-provisioning: Yes\n";
  ASSERT_NE(text.find(thin), std::string::npos);
  std::string thick = text;
  thick.replace(thick.find(thin), thin.size(), "            Thin-provisioning: No\n");
  auto targets = ParseTgtadmTargets(thick);
  ASSERT_TRUE(targets.ok()) << targets.status().ToString();
  EXPECT_FALSE((*targets)[0].FindLun(1)->thin_provisioning);
  EXPECT_TRUE((*targets)[1].FindLun(1)->thin_provisioning);

  std::string odd = text;
  odd.replace(odd.find(thin), thin.size(), "            Thin-provisioning: Maybe\n");
  int line = 0;
  EXPECT_EQ(ParseTgtadmTargets(odd, &line).status().code(), StatusCode::kInvalidArgument);
  EXPECT_GT(line, 0);
}

TEST(TgtadmParserTest, ParsesAccountList) {
  auto accounts = ParseTgtadmAccounts(ReadFileOrEmpty(TestDataPath("tgtadm/show_account.txt")));
  ASSERT_TRUE(accounts.ok()) << accounts.status().ToString();
  EXPECT_EQ(*accounts, (std::vector<std::string>{"tgtmutual", "alice"}));
  EXPECT_TRUE(ParseTgtadmAccounts("Account list:\n")->empty());
  EXPECT_FALSE(ParseTgtadmAccounts("alice\n").ok());
}

// One target as tgtd 1.0.85 lists it (every section, in order); `account`
// and `acl` are printed raw, as tgtd does.
std::string Block(int tid, const std::string& name, const std::string& account = "", const std::string& acl = "") {
  std::string out = "Target " + std::to_string(tid) + ": " + name + "\n";
  out += "    System information:\n        Driver: iscsi\n        State: ready\n";
  out += "    I_T nexus information:\n    LUN information:\n        LUN: 0\n            Type: controller\n";
  out += "    Account information:\n";
  if (!account.empty()) out += "        " + account + "\n";
  out += "    ACL information:\n";
  if (!acl.empty()) out += "        " + acl + "\n";
  return out;
}

// Issue #21: tgtd printed a CHAP user name with newlines raw, and the
// parser took the forged lines for a real target (whose tid then got an
// attacker's ACL) or a second account list. Such output is refused whole.
TEST(TgtadmParserTest, RefusesForgedTargetBlocksAndDuplicates) {
  std::string text = ReadFileOrEmpty(TestDataPath("tgtadm/show_target_mutual.txt"));
  ASSERT_FALSE(text.empty());
  ASSERT_TRUE(ParseTgtadmTargets(text).ok());
  // A forged block inside the foreign target's (empty) account section,
  // naming volume 0123's IQN with volume 1111's tid.
  std::string forged = text;
  const std::string anchor = "Target 5: iqn.2003-01.org.example:foreign\n";
  size_t at = forged.find("    Account information:\n", forged.find(anchor));
  ASSERT_NE(at, std::string::npos);
  forged.insert(at + std::string("    Account information:\n").size(),
                "        evil\nTarget 2: iqn.2026-11.io.blockcsi:vol-0123456789abcdef\n    ACL information:\n"
                "        iqn.2026-11.io.blockcsi:node:attacker\n");
  auto parsed = ParseTgtadmTargets(forged);
  ASSERT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("target 5"), std::string::npos) << parsed.status().message();

  ASSERT_TRUE(ParseTgtadmTargets(Block(1, "iqn.a:b") + Block(2, "iqn.a:c", "alice", "iqn.x:n1")).ok());
  EXPECT_FALSE(ParseTgtadmTargets(Block(1, "iqn.a:b") + Block(1, "iqn.a:c")).ok()) << "duplicate tid";
  EXPECT_FALSE(ParseTgtadmTargets(Block(1, "iqn.a:b") + Block(2, "iqn.a:b")).ok()) << "duplicate name";
  EXPECT_FALSE(ParseTgtadmTargets(Block(0, "iqn.a:b")).ok()) << "tid 0 is tgtd's own";
  EXPECT_FALSE(ParseTgtadmTargets(Block(1, "iqn.a:b c")).ok()) << "a name with a space";
  EXPECT_FALSE(ParseTgtadmTargets(Block(1, "iqn.a:b", "bad,user")).ok());
  EXPECT_FALSE(ParseTgtadmTargets(Block(1, "iqn.a:b", "", "two words")).ok());
  EXPECT_FALSE(ParseTgtadmTargets("Target 1: iqn.a:b\n").ok()) << "a target without its sections";
}

// Found by the agent_acl fuzzer: a forged block with a new tid and a new
// name, inside an account section, took the real target's ACL lines for
// its own, so a revoke saw no ACL to remove. Sections out of order or
// missing now refuse the listing.
TEST(TgtadmParserTest, RefusesAForgedBlockThatStealsTheNextSections) {
  std::string real = Block(1, "iqn.2026-11.io.blockcsi:vol-1", "u\nTarget 9: x", "iqn.x:node-c");
  ASSERT_NE(real.find("\nTarget 9: x\n    ACL information:\n        iqn.x:node-c"), std::string::npos) << real;
  auto parsed = ParseTgtadmTargets(real);
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  // A whole forged block (every section) still leaves the real block's
  // ACL section following the forged one's.
  std::string whole = Block(1, "iqn.2026-11.io.blockcsi:vol-1",
                            "u\nTarget 9: x\n    System information:\n    I_T nexus information:\n"
                            "    LUN information:\n    Account information:\n    ACL information:",
                            "iqn.x:node-c");
  EXPECT_FALSE(ParseTgtadmTargets(whole).ok());
  EXPECT_FALSE(ParseTgtadmTargets(Block(1, "iqn.a:b") + "    ACL information:\n").ok()) << "a section twice";
}

TEST(TgtadmParserTest, RefusesAForgedOrDuplicatedAccountList) {
  // The "user4\nAccount list:\n    ghost".
  EXPECT_FALSE(ParseTgtadmAccounts("Account list:\n    user4\nAccount list:\n    ghost\n").ok());
  EXPECT_FALSE(ParseTgtadmAccounts("Account list:\n    alice\n    alice\n").ok());
  EXPECT_FALSE(ParseTgtadmAccounts("Account list:\n    a,b\n").ok());
  EXPECT_FALSE(ParseTgtadmAccounts("Account list:\n    two words\n").ok());
}

TEST(TgtadmParserTest, ErrorsStayShortAndPrintable) {
  std::string line = "Target 1: " + std::string(10000, 'x') + "\x1b[2J";
  auto parsed = ParseTgtadmTargets(line + "\n    Mystery:\n");
  ASSERT_FALSE(parsed.ok());
  EXPECT_LT(parsed.status().message().size(), 300u);
  for (char c : parsed.status().message()) EXPECT_TRUE(c >= 0x20 && c <= 0x7e) << int(c);
}

TEST(TgtadmParserTest, ParsesTheConnectionListing) {
  auto parsed = ParseTgtadmConnections(
      "Session: 3\n    Connection: 0\n        Initiator: iqn.2026-11.x:n1\n        IP Address: 10.0.0.1\n"
      "Session: 4\n    Connection: 1\n        Initiator: iqn.2026-11.x:n2\n        IP Address: fe80::1\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].sid, 3u);
  EXPECT_EQ((*parsed)[0].cid, 0u);
  EXPECT_EQ((*parsed)[0].initiator, "iqn.2026-11.x:n1");
  EXPECT_EQ((*parsed)[1].address, "fe80::1");
  EXPECT_TRUE(ParseTgtadmConnections("").ok());
}

TEST(TgtadmParserTest, RefusesAConnectionListingItCannotPlace) {
  EXPECT_FALSE(ParseTgtadmConnections("Session: 3\n    Connection: 0\n").ok());  // cut short
  EXPECT_FALSE(ParseTgtadmConnections("Session: x\n").ok());
  EXPECT_FALSE(ParseTgtadmConnections("Session: 3\n    Connection: 0\n        Initiator: two words\n"
                                      "        IP Address: 10.0.0.1\n")
                   .ok());
  EXPECT_FALSE(ParseTgtadmConnections("Session: 3\n        Connection: 0\n        Initiator: iqn.x\n"
                                      "        IP Address: 10.0.0.1\n")
                   .ok());
}

// A session's I_T nexus block as tgtd prints it after an alias the
// initiator chose: plain only when the alias stays on its line.
std::string Nexus(const std::string& alias) {
  return "Target 1: iqn.t\n    System information:\n        Driver: iscsi\n        State: ready\n"
         "    I_T nexus information:\n        I_T nexus: 7\n            Initiator: iqn.n1 alias: " +
         alias +
         "\n            Connection: 0\n                IP Address: 10.0.0.1\n    LUN information:\n"
         "    Account information:\n    ACL information:\n        iqn.n1\n";
}

TEST(TgtadmParserTest, TellsAPlainSessionFromOneWhoseAliasForgesLines) {
  EXPECT_TRUE(TgtadmShowsSessionPlainly(Nexus("none"), 7, "iqn.n1"));
  EXPECT_TRUE(TgtadmShowsSessionPlainly(Nexus("host-1.example"), 7, "iqn.n1"));
  EXPECT_FALSE(TgtadmShowsSessionPlainly(Nexus("none"), 8, "iqn.n1"));  // another session
  EXPECT_FALSE(TgtadmShowsSessionPlainly(Nexus("none"), 7, "iqn.n2"));  // another initiator
  EXPECT_FALSE(TgtadmShowsSessionPlainly(Nexus("x\nTarget 999: iqn.x"), 7, "iqn.n1"));
  // Cut short by tgtd's 1,024-byte limit, the alias's last line runs into
  // the next line tgtd prints.
  EXPECT_FALSE(TgtadmShowsSessionPlainly(
      Nexus("x\n            Connection: 0\n                IP Address: 10.0.0.1    LUN information:"), 7, "iqn.n1"));
  EXPECT_FALSE(TgtadmShowsSessionPlainly(Nexus("a\tb"), 7, "iqn.n1"));
  EXPECT_FALSE(TgtadmShowsSessionPlainly(Nexus(std::string(300, 'a')), 7, "iqn.n1"));
  // Its I_T nexus line twice: one of them forged, neither is trusted.
  EXPECT_FALSE(TgtadmShowsSessionPlainly(Nexus("none\n        I_T nexus: 7"), 7, "iqn.n1"));
}

TEST(TgtadmParserTest, FindsEveryTargetHeadingRealOrForged) {
  auto headings = TgtadmHeadings(Nexus("x\nTarget 999: iqn.x\n  Target 5: indented\nTarget 1: again"));
  ASSERT_EQ(headings.size(), 3u);
  EXPECT_EQ(headings[0].tid, 1);
  EXPECT_EQ(headings[0].line, 1);
  EXPECT_EQ(headings[1].tid, 999);
  EXPECT_EQ(headings[1].line, 8);
  EXPECT_EQ(headings[2].tid, 1);
}

TEST(TgtadmParserTest, RefusesALunNumberListedTwice) {
  std::string text = ReadFileOrEmpty(TestDataPath("tgtadm/show_target_no_sessions.txt"));
  ASSERT_TRUE(ParseTgtadmTargets(text).ok());
  auto at = text.find("        LUN: 1\n");
  ASSERT_NE(at, std::string::npos);
  text.insert(at, "        LUN: 1\n            Type: disk\n");
  EXPECT_FALSE(ParseTgtadmTargets(text).ok());
}

}  // namespace
}  // namespace blockcsi
