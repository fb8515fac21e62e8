// `blockctl check-target` against a real tgtd (root, tgt): each failure
// class is diagnosed by name, and a CHAP secret never reaches the output.
#include <gtest/gtest.h>

#include <fstream>

#include "common/executor.h"
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
    if (!tgtd_) GTEST_SKIP() << error;
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

  std::string closed = "127.0.0.1:" + std::to_string(testing::FreeTcpPort());
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
