// HTTP through the module loaded on first use (issue #18): the plugin
// program does not link cpp-httplib (so it neither maps it nor initialises
// OpenSSL at start), and the module serves and fetches once loaded.
#include "common/lazy_http.h"

#include <gtest/gtest.h>

#include "common/executor.h"
#include "support/http_probe.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

TEST(LazyHttpTest, PluginProgramDoesNotLinkHttplib) {
  std::string program = testing::BinDir() + "/blockcsi";
  if (!testing::HaveProgram("readelf")) GTEST_SKIP() << "readelf (binutils) is not installed";
  auto exec = MakeProcessExecutor();
  auto out = RunChecked(*exec, Command("readelf").Arg("-d").Arg(program));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_NE(out->stdout_text.find("(NEEDED)"), std::string::npos) << "not a dynamic program: " << program;
  EXPECT_EQ(out->stdout_text.find("httplib"), std::string::npos) << out->stdout_text;
  EXPECT_EQ(out->stdout_text.find("blockcsi_http"), std::string::npos) << out->stdout_text;
}

TEST(LazyHttpTest, ServesTheRenderedTextUntilDestroyed) {
  int renders = 0;
  auto server = ServeMetricsHttp("127.0.0.1", 0, 1, [&renders] {
    ++renders;
    return std::string("blockcsi_test 1\n");
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  int port = (*server)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ(testing::HttpGetBody(port, "/metrics"), "blockcsi_test 1\n");
  EXPECT_EQ(renders, 1);
  server->reset();
  EXPECT_EQ(testing::HttpGetBody(port, "/metrics"), "");  // nothing listens any more
}

TEST(LazyHttpTest, AnAddressThatCannotBeBoundIsUnavailable) {
  // 192.0.2.1 (TEST-NET-1) is no address of this machine.
  auto server = ServeMetricsHttp("192.0.2.1", 0, 1, [] { return std::string(); });
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kUnavailable) << server.status().ToString();
}

TEST(LazyHttpTest, NoAnswerIsUnavailableAndNeverNamesTheToken) {
  // Port 1 on loopback: nothing listens, the connection is refused.
  auto answer = HttpsGet("127.0.0.1", 1, "", "s3cret-token", "/api");
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), StatusCode::kUnavailable) << answer.status().ToString();
  EXPECT_EQ(answer.status().message().find("s3cret"), std::string::npos) << answer.status().message();
}

}  // namespace
}  // namespace blockcsi
