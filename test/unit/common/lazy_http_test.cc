// HTTPS through the module loaded on first use (issue #18): the plugin
// program does not link cpp-httplib (so it neither maps it nor initialises
// OpenSSL at start), and the module fetches once loaded.
#include "common/lazy_http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "common/executor.h"
#include "support/linkage.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

TEST(LazyHttpTest, PluginProgramDoesNotLinkHttplib) {
  if (!testing::HaveProgram("readelf")) GTEST_SKIP() << "readelf (binutils) is not installed";
  EXPECT_TRUE(testing::LinksNoneOf(testing::BinDir() + "/blockcsi", {"httplib", "blockcsi_http"}));
}

TEST(LazyHttpTest, NoAnswerIsUnavailableAndNeverNamesTheToken) {
  // Port 1 on loopback: nothing listens, the connection is refused.
  auto answer = HttpsGet("127.0.0.1", 1, "", "s3cret-token", "/api");
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), StatusCode::kUnavailable) << answer.status().ToString();
  EXPECT_EQ(answer.status().message().find("s3cret"), std::string::npos) << answer.status().message();
}

// A port nothing listens on now (the kernel's pick for a socket closed at once).
int UnusedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool Accepts(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// `openssl s_server -www` on 127.0.0.1 with a self-signed certificate for
// that address, and another self-signed certificate that signed nothing.
class HttpsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "/usr/bin/openssl (Debian openssl) is not installed";
    for (const char* name : {"server", "stranger"}) {
      ASSERT_EQ(
          testing::RunProgram({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                               "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout",
                               dir_.Join(std::string(name) + ".key"), "-out", dir_.Join(std::string(name) + ".crt")}),
          0);
    }
    port_ = UnusedPort();
    server_ = std::make_unique<testing::ChildProcess>(
        std::vector<std::string>{"/usr/bin/openssl", "s_server", "-accept", "127.0.0.1:" + std::to_string(port_),
                                 "-cert", dir_.Join("server.crt"), "-key", dir_.Join("server.key"), "-www"},
        dir_.Join("s_server.log"));
    for (int i = 0; i < 100 && !Accepts(port_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(Accepts(port_)) << testing::ReadFileOrEmpty(dir_.Join("s_server.log"));
  }

  testing::TempDir dir_;
  int port_ = 0;
  std::unique_ptr<testing::ChildProcess> server_;
};

TEST_F(HttpsServerTest, FetchesWhenTheCaSignedTheServer) {
  auto answer = HttpsGet("127.0.0.1", port_, testing::ReadFileOrEmpty(dir_.Join("server.crt")), "token", "/");
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(answer->status, 200);
  EXPECT_NE(answer->body.find("s_server"), std::string::npos) << answer->body;
}

TEST_F(HttpsServerTest, RefusesAServerTheCaDidNotSign) {
  auto answer = HttpsGet("127.0.0.1", port_, testing::ReadFileOrEmpty(dir_.Join("stranger.crt")), "token", "/");
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), StatusCode::kUnavailable) << answer.status().ToString();
}

}  // namespace
}  // namespace blockcsi
