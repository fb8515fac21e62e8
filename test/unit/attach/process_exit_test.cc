// ProcessExitWatch over a host that stands in for the machine's processes:
// the watch waits on whatever fd Host::WatchExit gives, so an exit is an
// event (no polling), and a process the host does not find is not held.
#include "attach/process_exit.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <chrono>
#include <map>
#include <mutex>
#include <utility>

namespace blockcsi {
namespace {

// Each watched pid gets a pipe; "exiting" it closes the write end, which
// makes the read end readable (POLLHUP), as a pidfd is once its process exits.
class ScriptedProcessesHost final : public RootedHost {
 public:
  ScriptedProcessesHost() : RootedHost("/nonexistent-blockcsi-scripted-host") {}
  ~ScriptedProcessesHost() override {
    for (auto& [pid, fd] : write_ends_) ::close(fd);
  }
  StatusOr<int> WatchExit(pid_t pid) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (pid == kGonePid) return NotFound("process " + std::to_string(pid) + " is gone");
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe");
    write_ends_[pid] = ends[1];
    return ends[0];
  }
  void Exit(pid_t pid) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = write_ends_.find(pid);
    ASSERT_NE(it, write_ends_.end()) << "pid " << pid << " was never watched";
    ::close(it->second);
    write_ends_.erase(it);
  }
  static constexpr pid_t kGonePid = 4242;

 private:
  mutable std::mutex mu_;
  mutable std::map<pid_t, int> write_ends_;
};

TEST(ProcessExitWatchTest, TheExitIsAnEventOnTheHostsFd) {
  ScriptedProcessesHost host;
  ProcessExitWatch watch = ProcessExitWatch::Open(host, 1234);
  ASSERT_TRUE(watch.held());
  EXPECT_EQ(watch.pid(), 1234);
  EXPECT_FALSE(watch.WaitForExit(std::chrono::milliseconds(0))) << "still running";
  host.Exit(1234);
  EXPECT_TRUE(watch.WaitForExit(std::chrono::minutes(1)));

  // Moved, the watch keeps its process; the moved-from one holds nothing.
  ProcessExitWatch moved = std::move(watch);
  EXPECT_TRUE(moved.held());
  EXPECT_FALSE(watch.held());  // NOLINT(bugprone-use-after-move): the contract under test
  EXPECT_FALSE(watch.WaitForExit(std::chrono::milliseconds(0)));
}

TEST(ProcessExitWatchTest, AProcessTheHostDoesNotFindIsNotHeld) {
  ScriptedProcessesHost host;
  EXPECT_FALSE(ProcessExitWatch::Open(host, ScriptedProcessesHost::kGonePid).held());
  EXPECT_FALSE(ProcessExitWatch::Open(host, 0).held());
  EXPECT_FALSE(ProcessExitWatch::Open(host, -1).held());
}

}  // namespace
}  // namespace blockcsi
