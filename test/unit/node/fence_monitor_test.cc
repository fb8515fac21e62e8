// NodeFenceMonitor's loop: when it asks whether the node is fenced. A fence
// ends the node's sessions; the node must hear of it then, not a whole
// interval later.
#include "node/fence_monitor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "support/fake_attacher.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;

class FenceMonitorLoopTest : public ::testing::Test {
 protected:
  FenceMonitorLoopTest() {
    NodeServiceOptions o;
    o.node_id = "node-a";
    o.attacher = std::make_shared<testing::FakeAttacher>(world_);
    o.mounter = std::make_shared<testing::FakeMounter>(world_);
    o.probe = std::make_shared<testing::FakeProbe>(world_);
    o.executor = std::make_shared<testing::FakeWorldExecutor>(world_);
    o.host = std::make_shared<testing::FakeHost>(world_);
    node_ = std::make_shared<NodeService>(std::move(o));
  }

  // Polls `done` for up to `timeout`.
  static bool Eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (done()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return done();
  }

  NodeFenceMonitorOptions Options() {
    NodeFenceMonitorOptions options;
    options.check = [this]() -> StatusOr<FenceNotice> {
      ++checks_;
      return FenceNotice{fenced_ ? "f1" : "", ""};
    };
    options.report = [this](const std::string&, const std::vector<std::string>&) {
      ++reports_;
      return OkStatus();
    };
    options.interval = 1h;  // never, within a test
    options.loss_poll = 20ms;
    return options;
  }

  std::shared_ptr<testing::FakeWorld> world_ = std::make_shared<testing::FakeWorld>();
  std::shared_ptr<NodeService> node_;
  std::atomic<int> checks_{0};
  std::atomic<int> reports_{0};
  std::atomic<bool> fenced_{false};
};

TEST_F(FenceMonitorLoopTest, ALostConnectionMakesItAskAtOnce) {
  std::atomic<uint64_t> losses{3};  // whatever was lost before it started is not news
  NodeFenceMonitorOptions options = Options();
  options.connection_losses = [&] { return losses.load(); };
  NodeFenceMonitor monitor(node_, options);
  monitor.Start();
  ASSERT_TRUE(Eventually([&] { return checks_ == 1; }, 5s));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(checks_, 1) << "asked again with nothing lost and the interval far off";

  // The fence ends the sessions: the loss is counted, the monitor asks,
  // hears of the fence, cleans up and reports.
  fenced_ = true;
  ++losses;
  EXPECT_TRUE(Eventually([&] { return reports_ == 1; }, 5s)) << "the fence was not noticed after a lost connection";
  EXPECT_EQ(checks_, 2);
  EXPECT_EQ(node_->Fenced(), "f1");
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(checks_, 2) << "asked again for the same loss";
  monitor.Stop();
}

TEST_F(FenceMonitorLoopTest, WithoutALossReadingOnlyTheIntervalAndPokeAsk) {
  NodeFenceMonitor monitor(node_, Options());
  monitor.Start();
  ASSERT_TRUE(Eventually([&] { return checks_ == 1; }, 5s));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(checks_, 1);
  monitor.Poke();
  EXPECT_TRUE(Eventually([&] { return checks_ == 2; }, 5s));
  monitor.Stop();
}

}  // namespace
}  // namespace blockcsi
