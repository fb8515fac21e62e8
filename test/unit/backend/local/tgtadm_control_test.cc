// TgtadmControl through the strict FakeExecutor: the tgtadm command line of
// each request (the CHAP password passed as a Secret), and tgtadm's exit and
// words mapped back to tgtd's error number: every entry of tgtadm's table,
// tgtd not reached, and what is not tgtd's answer at all. Also the
// parameter text both controls hand to tgtd.
#include "backend/local/tgtadm_control.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/local/tgtd_control.h"
#include "support/fake_executor.h"

namespace blockcsi {
namespace {

using testing::FakeExecutor;

constexpr int kPort = 3263;

std::vector<std::string> Argv(std::vector<std::string> args) {
  std::vector<std::string> argv = {"/usr/sbin/tgtadm", "-C", std::to_string(kPort), "--lld", "iscsi"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

class TgtadmControlTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_TRUE(executor_->Pending().empty()) << "expected tgtadm commands never ran: " << executor_->Pending().front();
  }

  std::shared_ptr<FakeExecutor> executor_ = std::make_shared<FakeExecutor>();
  TgtadmControl control_{executor_, kPort};
};

TEST_F(TgtadmControlTest, EachRequestIsTheTgtadmCommandLineForIt) {
  const std::vector<std::pair<TgtdRequest, std::vector<std::string>>> cases = {
      {TgtdRequest::ShowTargets(), {"--op", "show", "--mode", "target"}},
      {TgtdRequest::ShowAccounts(), {"--op", "show", "--mode", "account"}},
      {TgtdRequest::NewTarget(6, "iqn.x:v"), {"--op", "new", "--mode", "target", "--tid", "6", "-T", "iqn.x:v"}},
      {TgtdRequest::DeleteTarget(6), {"--op", "delete", "--mode", "target", "--tid", "6", "--force"}},
      {TgtdRequest::BindInitiator(2, "iqn.x:n"),
       {"--op", "bind", "--mode", "target", "--tid", "2", "--initiator-name", "iqn.x:n"}},
      {TgtdRequest::UnbindInitiator(2, "iqn.x:n"),
       {"--op", "unbind", "--mode", "target", "--tid", "2", "--initiator-name", "iqn.x:n"}},
      {TgtdRequest::UnbindAddress(2, "10.0.0.1"),
       {"--op", "unbind", "--mode", "target", "--tid", "2", "-I", "10.0.0.1"}},
      {TgtdRequest::NewLun(2, 1, "/p/v.img"),
       {"--op", "new", "--mode", "logicalunit", "--tid", "2", "--lun", "1", "-b", "/p/v.img"}},
      {TgtdRequest::ConfigureLun(2, 1, "bcsi1", "b10cc5a1"),
       {"--op", "update", "--mode", "logicalunit", "--tid", "2", "--lun", "1", "--params",
        "scsi_sn=bcsi1,scsi_id=b10cc5a1,thin_provisioning=1"}},
      {TgtdRequest::SetLunThin(2, 1),
       {"--op", "update", "--mode", "logicalunit", "--tid", "2", "--lun", "1", "--params", "thin_provisioning=1"}},
      {TgtdRequest::DeleteLun(2, 1), {"--op", "delete", "--mode", "logicalunit", "--tid", "2", "--lun", "1"}},
      {TgtdRequest::NewAccount("bob", "s3cret-pw"),
       {"--op", "new", "--mode", "account", "--user", "bob", "--password", FakeExecutor::Secret("s3cret-pw")}},
      {TgtdRequest::DeleteAccount("bob"), {"--op", "delete", "--mode", "account", "--user", "bob"}},
      {TgtdRequest::BindAccount(2, "bob", false), {"--op", "bind", "--mode", "account", "--tid", "2", "--user", "bob"}},
      {TgtdRequest::UnbindAccount(2, "bob", true),
       {"--op", "unbind", "--mode", "account", "--tid", "2", "--user", "bob", "--outgoing"}},
      {TgtdRequest::DeleteConnection(1, 10, 0),
       {"--op", "delete", "--mode", "conn", "--tid", "1", "--sid", "10", "--cid", "0"}},
  };
  for (const auto& [request, args] : cases) {
    executor_->ExpectOk(Argv(args), "listing");
    auto answer = control_.Send(request);
    ASSERT_TRUE(answer.ok()) << request.Describe() << ": " << answer.status().ToString();
    EXPECT_EQ(answer->error, TgtdError::kSuccess);
    EXPECT_EQ(answer->text, "listing");
  }
  for (const auto& line : executor_->RedactedLog()) EXPECT_EQ(line.find("s3cret-pw"), std::string::npos) << line;
}

// tgtadm exits EINVAL for every error tgtd answers and names it in
// tgtadm_strerror's words: each maps back to its number.
TEST_F(TgtadmControlTest, EveryTgtdErrorComesBackAsItsNumber) {
  const std::vector<std::string> unbind = Argv({"--op", "unbind", "--mode", "target", "--tid", "2", "-I", "10.0.0.1"});
  for (uint32_t n = 1; n < kTgtdErrorCount; ++n) {
    const auto error = static_cast<TgtdError>(n);
    executor_->ExpectFail(unbind, 22, "tgtadm: " + std::string(TgtdErrorText(error)) + "\n");
    auto answer = control_.Send(TgtdRequest::UnbindAddress(2, "10.0.0.1"));
    ASSERT_TRUE(answer.ok()) << answer.status().ToString();
    EXPECT_EQ(answer->error, error) << TgtdErrorText(error);
  }
  // The ones blockcsi tolerates, spelled out, so that a shifted table fails here.
  executor_->ExpectFail(unbind, 22, "tgtadm: this access control rule does not exist\n");
  EXPECT_EQ(control_.Send(TgtdRequest::UnbindAddress(2, "10.0.0.1"))->error, TgtdError::kAclDoesNotExist);
  executor_->ExpectFail(unbind, 22, "tgtadm: can't find the account\n");
  EXPECT_EQ(control_.Send(TgtdRequest::UnbindAddress(2, "10.0.0.1"))->error, TgtdError::kNoUser);
}

TEST_F(TgtadmControlTest, ATgtdThatIsNotThereIsUnavailable) {
  executor_->ExpectFail(Argv({"--op", "show", "--mode", "target"}), 107,
                        "tgtadm: failed to send request hdr to tgt daemon, Transport endpoint is not connected\n");
  EXPECT_EQ(control_.Send(TgtdRequest::ShowTargets()).status().code(), StatusCode::kUnavailable);
}

TEST_F(TgtadmControlTest, WhatIsNotTgtdsAnswerIsInternal) {
  const std::vector<std::string> show = Argv({"--op", "show", "--mode", "target"});
  executor_->ExpectFail(show, 22, "tgtadm: specify the operation type\n");  // tgtadm's own refusal
  EXPECT_EQ(control_.Send(TgtdRequest::ShowTargets()).status().code(), StatusCode::kInternal);
  executor_->ExpectFail(show, 22, "tgtadm: this target already exists, and more\n");  // not the whole line
  EXPECT_EQ(control_.Send(TgtdRequest::ShowTargets()).status().code(), StatusCode::kInternal);
  executor_->ExpectFail(show, 1, "tgtadm: unknown mode: x\n");
  EXPECT_EQ(control_.Send(TgtdRequest::ShowTargets()).status().code(), StatusCode::kInternal);
}

TEST_F(TgtadmControlTest, AValueWithACommaIsRefusedBeforeAnythingRuns) {
  auto answer = control_.Send(TgtdRequest::NewAccount("a,b", "pw"));
  EXPECT_EQ(answer.status().code(), StatusCode::kInvalidArgument);
  answer = control_.Send(TgtdRequest::NewAccount("a", "p,w"));
  EXPECT_EQ(answer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(answer.status().message().find("p,w"), std::string::npos) << answer.status().ToString();
}

TEST(TgtdRequestTest, TheParametersTgtdReceivesAreTgtadms) {
  EXPECT_EQ(TgtdParameters(TgtdRequest::NewTarget(6, "iqn.x:v")), "targetname=iqn.x:v");
  EXPECT_EQ(TgtdParameters(TgtdRequest::NewAccount("bob", "pw")), "user=bob,password=pw");
  EXPECT_EQ(TgtdParameters(TgtdRequest::ConfigureLun(2, 1, "sn", "id")),
            "targetOps scsi_sn=sn,scsi_id=id,thin_provisioning=1,");
  EXPECT_EQ(TgtdParameters(TgtdRequest::SetLunThin(2, 1)), "targetOps thin_provisioning=1,");
  EXPECT_EQ(TgtdRequest::SetLunThin(2, 1).Describe(), "logicalunit update tid=2 lun=1 thin_provisioning=1");
  EXPECT_EQ(TgtdParameters(TgtdRequest::DeleteConnection(1, 10, 0)), "");
  EXPECT_EQ(TgtdRequest::NewAccount("bob", "pw").Describe(), "account new user=bob password=(secret)");
}

}  // namespace
}  // namespace blockcsi
