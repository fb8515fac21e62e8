#include "support/fake_executor.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

namespace blockcsi::testing {
namespace {

TEST(FakeExecutorTest, ReplaysExpectedCommandsInOrder) {
  FakeExecutor fake;
  fake.ExpectOk({"iscsiadm", "-m", "session"}, "tcp: [1] ...\n").ExpectFail({"false"}, 1, "nope\n");
  auto r = fake.Run(Command("iscsiadm").Arg("-m").Arg("session"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stdout_text, "tcp: [1] ...\n");
  r = fake.Run(Command("false"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_TRUE(fake.Pending().empty());
}

TEST(FakeExecutorTest, FailsLoudlyOnAnUnexpectedCommand) {
  EXPECT_NONFATAL_FAILURE(
      {
        FakeExecutor fake;
        fake.ExpectOk({"iscsiadm", "-m", "session"});
        EXPECT_FALSE(fake.Run(Command("iscsiadm").Arg("-m").Arg("node")).ok());
      },
      "differs");
  EXPECT_NONFATAL_FAILURE(
      {
        FakeExecutor fake;
        EXPECT_FALSE(fake.Run(Command("rm").Arg("-rf").Arg("/")).ok());
      },
      "no more expected");
}

TEST(FakeExecutorTest, SecretArgumentsMustBeMarkedSensitive) {
  FakeExecutor ok;
  ok.ExpectOk({"tool", FakeExecutor::Secret("pw")});
  EXPECT_TRUE(ok.Run(Command("tool").Secret("pw")).ok());
  EXPECT_EQ(ok.RedactedLog(), (std::vector<std::string>{"tool ***"}));
  EXPECT_NONFATAL_FAILURE(
      {
        FakeExecutor fake;
        fake.ExpectOk({"tool", FakeExecutor::Secret("pw")});
        EXPECT_FALSE(fake.Run(Command("tool").Arg("pw")).ok());
      },
      "must be passed as a secret");
}

}  // namespace
}  // namespace blockcsi::testing
