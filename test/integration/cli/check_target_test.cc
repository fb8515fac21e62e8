// `blockctl check-target` against a real tgtd (root, tgt): each failure
// class is diagnosed by name, and a CHAP secret never reaches the output.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "common/executor.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

using testing::TgtdHarness;

constexpr char kTarget[] = "iqn.2026-11.io.blockcsi:check-target";
constexpr char kSecret[] = "chap-secret-0123";

class CheckTargetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    tgtd_ = TgtdHarness::Start(&error);
    BLOCKCSI_REQUIRE_TGTD(tgtd_, error);
    image_ = dir_.Join("lun.img");
    std::ofstream(image_).close();
    ASSERT_EQ(::truncate(image_.c_str(), 32 << 20), 0);
    Tgtadm({"--op", "new", "--mode", "target", "--tid", "1", "-T", kTarget});
    Tgtadm({"--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1", "-b", image_});
    Tgtadm({"--op", "bind", "--mode", "target", "--tid", "1", "--initiator-name", "iqn.2026-11.io.blockcsi:node:n1"});
  }
  void Tgtadm(const std::vector<std::string>& args) {
    int code = -1;
    tgtd_->Tgtadm(args, &code);
    ASSERT_EQ(code, 0);
  }
  std::pair<int, std::string> Check(std::vector<std::string> args) {
    std::string log = dir_.Join("out.log");
    ::unlink(log.c_str());
    args.insert(args.begin(), {testing::BinDir() + "/blockctl", "-o", "json", "check-target", tgtd_->portal()});
    testing::ChildProcess child(args, log);
    int code = child.Wait(std::chrono::seconds(60));
    return {code, testing::ReadFileOrEmpty(log)};
  }
  // blockctl -o FORMAT [globals] check-target PORTAL --iqn kTarget.
  std::pair<int, std::string> CheckWith(const std::vector<std::string>& globals, const std::string& format) {
    std::string log = dir_.Join("out.log");
    ::unlink(log.c_str());
    std::vector<std::string> argv = {testing::BinDir() + "/blockctl", "-o", format};
    argv.insert(argv.end(), globals.begin(), globals.end());
    argv.insert(argv.end(), {"check-target", tgtd_->portal(), "--iqn", kTarget});
    testing::ChildProcess child(argv, log);
    int code = child.Wait(std::chrono::seconds(60));
    return {code, testing::ReadFileOrEmpty(log)};
  }
  testing::TempDir dir_;
  std::unique_ptr<TgtdHarness> tgtd_;
  std::string image_;
};

TEST_F(CheckTargetTest, DiagnosesEachFailureClass) {
  auto [ok_code, ok] = Check({"--node-id", "n1", "--iqn", kTarget});
  EXPECT_EQ(ok_code, 0) << ok;
  EXPECT_NE(ok.find("\"diagnosis\": \"ok\""), std::string::npos) << ok;
  EXPECT_NE(ok.find("33554432 bytes"), std::string::npos) << ok;

  auto [acl_code, acl] = Check({"--node-id", "n2", "--iqn", kTarget});
  EXPECT_EQ(acl_code, 1);
  EXPECT_NE(acl.find("\"diagnosis\": \"refused-by-acl\""), std::string::npos) << acl;

  auto [lun_code, lun] = Check({"--node-id", "n1", "--iqn", kTarget, "--lun", "7"});
  EXPECT_EQ(lun_code, 1);
  EXPECT_NE(lun.find("\"diagnosis\": \"no-such-lun\""), std::string::npos) << lun;

  testing::ReservedPort dead(testing::ReservedPort::Use::kDead);  // cannot come alive under ctest -j
  ASSERT_NE(dead.port(), 0);
  std::string closed = "127.0.0.1:" + std::to_string(dead.port());
  testing::ChildProcess unreachable(
      {testing::BinDir() + "/blockctl", "-o", "json", "check-target", closed, "--node-id", "n1"},
      dir_.Join("unreach.log"));
  EXPECT_EQ(unreachable.Wait(std::chrono::seconds(60)), 1);
  EXPECT_NE(testing::ReadFileOrEmpty(dir_.Join("unreach.log")).find("\"diagnosis\": \"unreachable\""),
            std::string::npos);
}

TEST_F(CheckTargetTest, ChapFailureIsNamedAndSecretNeverPrinted) {
  Tgtadm({"--op", "new", "--mode", "account", "--user", "node-user", "--password", kSecret});
  Tgtadm({"--op", "bind", "--mode", "account", "--tid", "1", "--user", "node-user"});
  std::string good = dir_.Join("good"), bad = dir_.Join("bad");
  std::ofstream(good) << kSecret << "\n";
  std::ofstream(bad) << "not-the-secret-1\n";

  auto [none_code, none] = Check({"--node-id", "n1", "--iqn", kTarget});
  EXPECT_EQ(none_code, 1);
  EXPECT_NE(none.find("\"diagnosis\": \"chap-failed\""), std::string::npos) << none;

  auto [bad_code, bad_out] =
      Check({"--node-id", "n1", "--iqn", kTarget, "--chap-user", "node-user", "--chap-secret-file", bad});
  EXPECT_EQ(bad_code, 1);
  EXPECT_NE(bad_out.find("chap-failed"), std::string::npos) << bad_out;
  EXPECT_EQ(bad_out.find("not-the-secret-1"), std::string::npos);

  auto [good_code, good_out] =
      Check({"--node-id", "n1", "--iqn", kTarget, "--chap-user", "node-user", "--chap-secret-file", good});
  EXPECT_EQ(good_code, 0) << good_out;
  EXPECT_EQ(good_out.find(kSecret), std::string::npos);
}

}  // namespace
}  // namespace blockcsi

namespace blockcsi {
namespace {

// Issue #15 item 7: without --node-id the initiator comes from the running
// plugin (NodeGetInfo), else the node's state dir, else the host name; the
// output says which.
TEST_F(CheckTargetTest, NodeIdFromThePluginThenTheStateDirThenTheHostName) {
  testing::PluginUnderTest plugin(dir_.Join("plugin"), nullptr);
  testing::PluginOptions options;
  options.mode = "node";
  options.node_id = "n1";
  std::string error;
  ASSERT_TRUE(plugin.Start(options, &error)) << error;
  const std::string endpoint = "unix://" + plugin.socket();
  const std::string empty_state = dir_.Join("empty-state");
  std::filesystem::create_directories(empty_state);

  auto [code, out] = CheckWith({"--endpoint", endpoint, "--state-dir", empty_state}, "json");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"node_id\": \"n1\""), std::string::npos) << out;
  EXPECT_NE(out.find("NodeGetInfo"), std::string::npos) << out;
  EXPECT_NE(out.find("\"diagnosis\": \"ok\""), std::string::npos) << out;
  auto [table_code, table] = CheckWith({"--endpoint", endpoint, "--state-dir", empty_state}, "table");
  EXPECT_EQ(table_code, 0) << table;
  EXPECT_NE(table.find("initiator: iqn.2026-11.io.blockcsi:node:n1 (node id \"n1\" from the running plugin's "
                       "NodeGetInfo"),
            std::string::npos)
      << table;

  // The plugin stopped: its state dir still says which node it is.
  plugin.Stop();
  auto [state_code, state] = CheckWith({"--endpoint", endpoint, "--state-dir", plugin.state_dir()}, "json");
  EXPECT_EQ(state_code, 0) << state;
  EXPECT_NE(state.find("\"node_id\": \"n1\""), std::string::npos) << state;
  EXPECT_NE(state.find("the state dir"), std::string::npos) << state;

  // Nothing but the host name.
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  std::string expected = host;
  std::transform(expected.begin(), expected.end(), expected.begin(), [](unsigned char c) { return std::tolower(c); });
  auto [host_code, by_host] = CheckWith({"--endpoint", endpoint, "--state-dir", empty_state}, "json");
  EXPECT_NE(by_host.find("\"node_id\": \"" + expected + "\""), std::string::npos) << by_host;
  EXPECT_NE(by_host.find("the host name"), std::string::npos) << by_host;
  EXPECT_EQ(host_code, 1) << "the host's initiator is not in the ACL:\n" << by_host;
  testing::CleanUpUnder(dir_.path());
}

}  // namespace
}  // namespace blockcsi
