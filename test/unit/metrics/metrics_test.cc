// The metrics registry's exposition format and the /metrics server's
// behaviour under bad requests (real sockets on loopback, port picked by
// the kernel).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "common/metrics.h"
#include "common/metrics_server.h"
#include "gtest/gtest.h"
#include "support/http_probe.h"

namespace blockcsi {
namespace {

std::string Get(int port, const std::string& path) {
  return testing::HttpExchange(port, "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
}

TEST(MetricsRegistry, RendersCountersGaugesAndCumulativeHistograms) {
  MetricsRegistry r;
  auto& calls = r.Counter("t_calls_total", "Calls.", {"method", "code"});
  calls.Add({"Stage", "OK"});
  calls.Add({"Stage", "OK"});
  calls.Add({"Stage", "NOT_FOUND"});
  calls.Add({"Stage", "OK"}, -5);  // a counter never goes down
  r.Gauge("t_staged", "Staged.").Set({}, 3);
  auto& h = r.Histogram("t_seconds", "Durations.", {"method"}, {0.1, 1});
  h.Observe({"Stage"}, 0.05);
  h.Observe({"Stage"}, 0.5);
  h.Observe({"Stage"}, 7);
  std::string text = r.Render();
  EXPECT_NE(text.find("# TYPE t_calls_total counter\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_calls_total{method=\"Stage\",code=\"OK\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_calls_total{method=\"Stage\",code=\"NOT_FOUND\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_staged 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{method=\"Stage\",le=\"0.1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{method=\"Stage\",le=\"1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{method=\"Stage\",le=\"+Inf\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_sum{method=\"Stage\"} 7.55\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_count{method=\"Stage\"} 3\n"), std::string::npos) << text;
}

TEST(MetricsRegistry, EscapesLabelValuesAndRefusesWrongArity) {
  MetricsRegistry r;
  auto& c = r.Counter("t_total", "T.", {"v"});
  c.Add({"a\"b\\c\nd"});
  c.Add({"x", "y"});  // wrong number of labels: dropped, never a malformed line
  std::string text = r.Render();
  EXPECT_NE(text.find("t_total{v=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("\"y\""), std::string::npos) << text;
}

TEST(MetricsRegistry, BoundsTheSeriesOfAFamily) {
  MetricsRegistry r;
  auto& c = r.Counter("t_bounded_total", "T.", {"v"});
  for (size_t i = 0; i < MetricFamily::kMaxSeries + 50; ++i) c.Add({std::to_string(i)});
  std::string text = r.Render();
  size_t lines = 0;
  for (size_t pos = 0; (pos = text.find("t_bounded_total{", pos)) != std::string::npos; ++pos) ++lines;
  EXPECT_EQ(lines, MetricFamily::kMaxSeries);
  EXPECT_NE(Metrics().Render().find("blockcsi_metrics_series_dropped_total{metric=\"t_bounded_total\"} 50\n"),
            std::string::npos);
}

TEST(MetricsRegistry, CollectorsRunAtEachRender) {
  MetricsRegistry r;
  int runs = 0;
  auto owner = std::make_shared<int>(0);
  r.AddCollector(owner, [&runs](MetricsRegistry& reg) { reg.Gauge("t_runs", "Runs.").Set({}, ++runs); });
  r.Render();
  EXPECT_NE(r.Render().find("t_runs 2\n"), std::string::npos);
}

// A collector goes with its owner, and so does what it captured: a process
// that opens and closes many backends (the agent_acl fuzz target opens one
// per input) does not keep a collector for each.
TEST(MetricsRegistry, ACollectorGoesWithItsOwner) {
  MetricsRegistry r;
  int runs = 0;
  auto owner = std::make_shared<int>(0);
  auto captured = std::make_shared<int>(0);
  r.AddCollector(owner, [&runs, captured](MetricsRegistry&) { ++runs; });
  r.Render();
  EXPECT_EQ(runs, 1);
  owner.reset();
  r.Render();
  EXPECT_EQ(runs, 1) << "a collector ran after its owner was gone";
  EXPECT_EQ(captured.use_count(), 1) << "what the dropped collector captured is still held";
  auto next = std::make_shared<int>(0);
  auto kept = std::make_shared<int>(0);
  r.AddCollector(next, [kept](MetricsRegistry&) {});
  next.reset();
  r.AddCollector(std::make_shared<int>(0), [](MetricsRegistry&) {});  // adding drops the gone owner's
  EXPECT_EQ(kept.use_count(), 1);
}

TEST(MetricsRegistry, CollectedSeriesAreSetWholeAndCleared) {
  MetricsRegistry r;
  auto& h = r.Histogram("t_io_seconds", "IO.", {"volume"}, {0.1, 1});
  auto& c = r.Counter("t_io_total", "IO.", {"volume"});
  h.SetHistogram({"v1"}, {2, 3}, 4.5, 6);
  h.SetHistogram({"v2"}, {1}, 1, 1);  // wrong number of buckets: refused
  c.Set({"v1"}, 6);
  std::string text = r.Render();
  EXPECT_NE(text.find("t_io_seconds_bucket{volume=\"v1\",le=\"0.1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_io_seconds_bucket{volume=\"v1\",le=\"1\"} 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_io_seconds_bucket{volume=\"v1\",le=\"+Inf\"} 6\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_io_total{volume=\"v1\"} 6\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("v2"), std::string::npos) << text;
  h.Clear();
  c.Clear();
  text = r.Render();
  EXPECT_EQ(text.find("v1"), std::string::npos) << text;
}

TEST(MetricsServer, RefusesAMalformedAddress) {
  MetricsRegistry r;
  for (const char* bad : {"", "9090", "host:", ":9090", "h:99999", "h:12x", "a:b:1"}) {
    auto s = StartMetricsServer(bad, r);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(MetricsServer, ServesMetricsAndSurvivesBadRequests) {
  MetricsRegistry r;
  r.Counter("t_total", "T.").Add({}, 4);
  auto server = StartMetricsServer("127.0.0.1:0", r);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  int port = (*server)->port();
  ASSERT_GT(port, 0);
  std::string ok = Get(port, "/metrics");
  EXPECT_NE(ok.find("200 OK"), std::string::npos) << ok;
  EXPECT_NE(ok.find("text/plain; version=0.0.4"), std::string::npos) << ok;
  EXPECT_NE(ok.find("t_total 4\n"), std::string::npos) << ok;

  EXPECT_NE(Get(port, "/other").find(" 404 "), std::string::npos);
  EXPECT_NE(Get(port, "/metrics/../../etc/passwd").find(" 404 "), std::string::npos);
  std::string post = testing::HttpExchange(
      port, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc");
  EXPECT_EQ(post.find("t_total"), std::string::npos) << post;
  testing::HttpExchange(port, "\x16\x03\x01\x02\x00garbage that is not HTTP\r\n\r\n");
  testing::HttpExchange(
      port, "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n" + std::string(100000, 'A'));
  testing::HttpExchange(port, "GET /" + std::string(200000, 'a') + " HTTP/1.1\r\n\r\n");
  testing::HttpExchange(port, "");
  // A few clients at once, each sending half a request and leaving.
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) threads.emplace_back([port] { testing::HttpExchange(port, "GET /metr"); });
  for (auto& t : threads) t.join();

  std::string after = Get(port, "/metrics");
  EXPECT_NE(after.find("t_total 4\n"), std::string::npos) << after;
}

// promtool (Debian's prometheus package) is the judge of the format.
TEST(MetricsRegistry, PromtoolAcceptsTheExposition) {
  const char* promtool = "/usr/bin/promtool";
  if (::access(promtool, X_OK) != 0) GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  MetricsRegistry r;
  r.Counter("blockcsi_t_calls_total", "Calls.", {"method", "code"}).Add({"/csi.v1.Node/NodeStageVolume", "OK"});
  r.Gauge("blockcsi_t_staged_volumes", "Staged.").Set({}, 2);
  r.Histogram("blockcsi_t_duration_seconds", "Durations.", {"method"}, CallDurationBuckets()).Observe({"x"}, 0.2);
  char path[] = "/tmp/metrics_test_XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::ofstream(path) << r.Render();
  std::string command = std::string(promtool) + " check metrics < " + path + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) output += buf;
  int rc = ::pclose(pipe);
  ::unlink(path);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_EQ(output, "") << output;  // no lint complaints either
}

}  // namespace
}  // namespace blockcsi
