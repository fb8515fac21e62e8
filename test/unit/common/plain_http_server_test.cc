// The plain-HTTP/1.1 server behind /metrics (issue #18): what a scraper
// gets, what a malformed or hostile client gets, and that the server's
// bounds (request size, connections, idle time) hold.
#include "common/plain_http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>

#include "support/http_probe.h"

namespace blockcsi {
namespace {

constexpr char kBody[] = "blockcsi_test_total 4\n";
constexpr char kType[] = "text/plain; version=0.0.4; charset=utf-8";

// A client socket connected to 127.0.0.1:port; closed when destroyed.
class Client {
 public:
  explicit Client(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Client() { ::close(fd_); }
  bool connected() const { return connected_; }
  void Send(const std::string& text) {
    ASSERT_EQ(::send(fd_, text.data(), text.size(), MSG_NOSIGNAL), ssize_t(text.size()));
  }
  // What arrives until `until` is in it, the server closes, or `wait_ms` passes without a byte.
  std::string Receive(const std::string& until, int wait_ms = 5000) {
    std::string got;
    while (until.empty() || got.find(until) == std::string::npos) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, wait_ms) <= 0) break;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }
  // True when the server closed the connection (EOF within `wait_ms`).
  bool ClosedByServer(int wait_ms = 5000) {
    Receive("", wait_ms);
    return closed_;
  }

 private:
  int fd_;
  bool connected_ = false;
  bool closed_ = false;
};

class PlainHttpServerTest : public ::testing::Test {
 protected:
  void Start(PlainHttpLimits limits = {}) {
    auto server = StartPlainHttpServer("127.0.0.1", 0,
                                       {{"/metrics", kType,
                                         [this] {
                                           ++renders_;
                                           return std::string(kBody);
                                         }}},
                                       limits);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    port_ = server_->port();
    ASSERT_GT(port_, 0);
  }
  bool StillServes() { return testing::HttpGetBody(port_, "/metrics") == kBody; }

  std::unique_ptr<PlainHttpServer> server_;
  int port_ = 0;
  std::atomic<int> renders_{0};
};

TEST_F(PlainHttpServerTest, GetAnswersTheRenderedTextWithItsLengthAndType) {
  Start();
  std::string answer = testing::HttpExchange(port_, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(answer, std::string("HTTP/1.1 200 OK\r\nContent-Type: ") + kType +
                        "\r\nContent-Length: 22\r\nConnection: close\r\n\r\n" + kBody);
  EXPECT_EQ(renders_, 1);
  // A query string does not change the path.
  EXPECT_EQ(testing::HttpGetBody(port_, "/metrics?x=1"), kBody);
}

TEST_F(PlainHttpServerTest, HeadAnswersTheHeadersOfAGetWithoutTheBody) {
  Start();
  std::string answer = testing::HttpExchange(port_, "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(answer.find("HTTP/1.1 200 OK\r\n"), std::string::npos) << answer;
  EXPECT_NE(answer.find("Content-Length: 22\r\n"), std::string::npos) << answer;
  EXPECT_TRUE(answer.ends_with("\r\n\r\n")) << answer;
}

TEST_F(PlainHttpServerTest, UnknownPathIsNotFoundAndTheConnectionStaysUsable) {
  Start();
  Client c(port_);
  ASSERT_TRUE(c.connected());
  // Two requests in one write (pipelined), as HTTP/1.1 allows.
  c.Send("GET /other HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string answers = c.Receive(kBody);
  EXPECT_TRUE(answers.starts_with("HTTP/1.1 404 Not Found\r\n")) << answers;
  EXPECT_NE(answers.find("HTTP/1.1 200 OK\r\n"), std::string::npos) << answers;
  EXPECT_TRUE(answers.ends_with(kBody)) << answers;
  EXPECT_EQ(testing::HttpGetBody(port_, "/metrics/../../etc/passwd"), "");
  EXPECT_EQ(testing::HttpGetBody(port_, "/"), "");
}

TEST_F(PlainHttpServerTest, BadRequestLinesAreRefusedAndClosed) {
  Start();
  for (const char* bad : {"GARBAGE\r\n\r\n", "GET /metrics\r\n\r\n", "GET metrics HTTP/1.1\r\n\r\n",
                          "GET /metrics HTTP/1.1 extra\r\n\r\n", "GET /metrics SPDY/3\r\n\r\n"}) {
    std::string answer = testing::HttpExchange(port_, bad);
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 400 Bad Request\r\n")) << bad << " -> " << answer;
    EXPECT_NE(answer.find("Connection: close\r\n"), std::string::npos) << answer;
  }
  EXPECT_TRUE(testing::HttpExchange(port_, "GET /metrics HTTP/2.0\r\n\r\n").starts_with("HTTP/1.1 505 "));
  EXPECT_EQ(renders_, 0);
  EXPECT_TRUE(StillServes());
}

TEST_F(PlainHttpServerTest, OtherMethodsAndBodiesAreRefusedWithoutRendering) {
  Start();
  std::string post = testing::HttpExchange(port_, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
  EXPECT_TRUE(post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n")) << post;
  EXPECT_NE(post.find("Allow: GET, HEAD\r\n"), std::string::npos) << post;
  std::string body = testing::HttpExchange(port_, "GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_TRUE(body.starts_with("HTTP/1.1 413 ")) << body;
  std::string chunked =
      testing::HttpExchange(port_, "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  EXPECT_TRUE(chunked.starts_with("HTTP/1.1 413 ")) << chunked;
  EXPECT_EQ(renders_, 0);
  EXPECT_TRUE(StillServes());
}

TEST_F(PlainHttpServerTest, OversizedRequestIsRefusedAndClosed) {
  PlainHttpLimits limits;
  limits.max_request_bytes = 1024;
  Start(limits);
  // A request line past the limit, then headers past it without an end.
  std::string long_line = testing::HttpExchange(port_, "GET /" + std::string(200000, 'a') + " HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(long_line.starts_with("HTTP/1.1 431 ")) << long_line.substr(0, 100);
  Client c(port_);
  ASSERT_TRUE(c.connected());
  c.Send("GET /metrics HTTP/1.1\r\nX-Filler: " + std::string(2000, 'H'));
  std::string answer = c.Receive("\r\n\r\n");
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 431 ")) << answer;
  EXPECT_TRUE(c.ClosedByServer());
  EXPECT_EQ(renders_, 0);
  EXPECT_TRUE(StillServes());
}

TEST_F(PlainHttpServerTest, Http10AndConnectionCloseAreClosedAfterTheAnswer) {
  Start();
  Client old(port_);
  old.Send("GET /metrics HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(old.Receive(kBody).ends_with(kBody));
  EXPECT_TRUE(old.ClosedByServer());
  Client kept(port_);
  kept.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(kept.Receive(kBody).ends_with(kBody));
  kept.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");  // the same connection, again
  EXPECT_TRUE(kept.Receive(kBody).ends_with(kBody));
}

TEST_F(PlainHttpServerTest, SilentConnectionsAreClosed) {
  PlainHttpLimits limits;
  limits.idle_timeout = std::chrono::milliseconds(100);
  Start(limits);
  Client silent(port_);
  ASSERT_TRUE(silent.connected());
  EXPECT_TRUE(silent.ClosedByServer());
  Client half(port_);  // half a request, then nothing
  half.Send("GET /met");
  EXPECT_TRUE(half.ClosedByServer());
  Client after_answer(port_);  // a kept-alive connection that goes quiet
  after_answer.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(after_answer.Receive(kBody).ends_with(kBody));
  EXPECT_TRUE(after_answer.ClosedByServer());
}

TEST_F(PlainHttpServerTest, ClientsPastTheLimitWaitUntilOneLeaves) {
  PlainHttpLimits limits;
  limits.max_connections = 2;
  limits.idle_timeout = std::chrono::minutes(1);
  Start(limits);
  auto first = std::make_unique<Client>(port_);
  Client second(port_);
  ASSERT_TRUE(first->connected() && second.connected());
  first->Send("GET /met");  // both held open, the first with half a request
  second.Send("GET /met");
  Client third(port_);  // sits in the listen backlog
  ASSERT_TRUE(third.connected());
  third.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(third.Receive(kBody, 300), "");
  first.reset();
  EXPECT_TRUE(third.Receive(kBody).ends_with(kBody));
}

TEST(PlainHttpServer, AnAddressThatCannotBeBoundIsUnavailable) {
  // 192.0.2.1 (TEST-NET-1) is no address of this machine.
  auto server = StartPlainHttpServer("192.0.2.1", 0, {});
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kUnavailable) << server.status().ToString();
}

TEST_F(PlainHttpServerTest, StopsListeningWhenDestroyed) {
  Start();
  Client open(port_);  // a connection open at the time is closed too
  ASSERT_TRUE(StillServes());
  server_.reset();
  EXPECT_TRUE(open.ClosedByServer());
  EXPECT_FALSE(Client(port_).connected());
}

}  // namespace
}  // namespace blockcsi
