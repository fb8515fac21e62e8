// The real `blockcsi` binary as a test drives it: started with the flags a
// test asks for (optionally inside a network namespace, optionally set to
// kill itself at a BLOCKCSI_FAULT_POINT), reached over its CSI socket, and
// stopped by its pid. CleanUpUnder() removes whatever a plugin, its bridges
// or a test left under a directory (mounts, loop devices, processes), so a
// failing test leaks nothing. Needs root for anything but Start(). Not
// thread-safe; the stubs are (gRPC stubs are).
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "csi.grpc.pb.h"
#include "support/csi_capabilities.h"
#include "support/leak_check.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi::testing {

struct PluginOptions {
  std::string mode = "all";       // all | controller | node
  std::string backend = "local";  // empty: no --backend flag
  std::string connector = "userspace";
  std::string node_id = "e2e-node";
  // Set: the plugin kills itself (SIGKILL) at that step, this start only.
  std::string fault_point;
  // Run as `<prefix...> blockcsi ...`, e.g. {"nsenter", "--net=/run/netns/n1", "--"}.
  // The prefix must exec the plugin so that the pid stays the plugin's.
  std::vector<std::string> command_prefix;
  // Appended after the flags derived from the fields above (--pool,
  // --tgt-control-port and --portal come from the TgtdHarness when given).
  std::vector<std::string> extra_args;
  std::map<std::string, std::string> env;
  // Set: a cgroup v2 directory the plugin is moved into right after it
  // started (before it listens), as a container runtime starts it inside
  // the container's cgroup; writing 1 to its cgroup.kill then stops the
  // "container".
  std::string cgroup;
  // Set: the blockcsi binary to run instead of this build's (e.g. a copy
  // standing for another version of the plugin's image).
  std::string binary;
};

class PluginUnderTest {
 public:
  // `dir`: a directory of the test's own; socket, state dir, pool, log live
  // there. `tgtd` may be null (backend other than local, or mode node).
  PluginUnderTest(std::string dir, const TgtdHarness* tgtd);
  // Stop(), then nothing else: callers run CleanUpUnder(dir) themselves
  // after everything that may hold a mount under it is gone.
  ~PluginUnderTest();
  PluginUnderTest(const PluginUnderTest&) = delete;
  PluginUnderTest& operator=(const PluginUnderTest&) = delete;

  // Starts and waits (20 s) for the socket; false with the log in `error`.
  bool Start(const PluginOptions& options, std::string* error);
  // SIGTERM, then SIGKILL after `grace`; no-op when not running. Closes
  // the stubs' connection first (an idle C++ client answers the server's
  // GOAWAY ping only every 5 s, which would stall the plugin's shutdown);
  // the stubs stay usable and reconnect after the next Start(). Stop() and
  // Start() replace the stubs: take identity()/controller()/node() afresh
  // after either, never keep a reference across them.
  void Stop(std::chrono::milliseconds grace = std::chrono::seconds(15));
  void Kill9();
  // For a start with fault_point: true when the plugin died by SIGKILL.
  bool WaitKilledByFaultPoint(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  pid_t pid() const;
  bool running();

  csi::v1::Identity::Stub& identity() { return *identity_; }
  csi::v1::Controller::Stub& controller() { return *controller_; }
  csi::v1::Node::Stub& node() { return *node_; }

  const std::string& dir() const { return dir_; }
  std::string socket() const { return dir_ + "/csi.sock"; }
  std::string state_dir() const { return dir_ + "/state"; }
  std::string pool_dir() const { return dir_ + "/pool"; }
  // What this plugin can leave, in the one leak checker's terms: processes,
  // mounts and loop devices under its directory, its attach records and pool
  // files, its tgtd's targets, ACLs and sessions, and processes naming
  // `volume_id` when given. The running plugin itself is not a leak.
  LeakScope LeakScopeFor(const std::string& volume_id = "");
  std::string log_path() const { return dir_ + "/plugin.log"; }
  std::string staging_path(const std::string& volume_id) const { return dir_ + "/staging/" + volume_id; }
  std::string target_path(const std::string& volume_id) const { return dir_ + "/pods/" + volume_id + "/mount"; }
  std::string LogTail(size_t bytes = 3000) const;

 private:
  void MakeStubs();
  std::string dir_;
  const TgtdHarness* tgtd_;
  std::unique_ptr<ChildProcess> process_;
  std::unique_ptr<csi::v1::Identity::Stub> identity_;
  std::unique_ptr<csi::v1::Controller::Stub> controller_;
  std::unique_ptr<csi::v1::Node::Stub> node_;
};

// Unmounts every mount under `dir` (deepest first), detaches every loop
// device whose backing file is under `dir`, and SIGKILLs every process
// (other than this one) whose command line names `dir`. Idempotent.
void CleanUpUnder(const std::string& dir);
// What CleanUpUnder() looks for, for tests that assert a node is clean:
// mount targets under `dir` (deepest first), loop devices backed by a file
// under `dir`, and pids (other than ours) whose command line names `dir`.
std::vector<std::string> MountsUnder(const std::string& dir);
std::vector<std::string> LoopDevicesUnder(const std::string& dir);
std::vector<pid_t> ProcessesNaming(const std::string& dir);

// CSI request helpers, shared by the conformance, e2e and fault suites (the
// capability builders, included here for them, are support/csi_capabilities.h).
// A client context with a deadline (default 120 s).
std::unique_ptr<grpc::ClientContext> Deadline(std::chrono::milliseconds timeout = std::chrono::seconds(120));

// Success, or a failure message with the code, the message and `log_tail`.
::testing::AssertionResult GrpcOk(const grpc::Status& status, const std::string& log_tail = "");

// ASSERT_GRPC_OK(call) / EXPECT_GRPC_OK(call): the CSI call returned OK;
// otherwise the failure names the call, its code and message, and the log
// tail of the plugin(s) under test, which the fixture provides as a member
// `std::string GrpcLogTail()`.
#define ASSERT_GRPC_OK(call) ASSERT_TRUE(::blockcsi::testing::GrpcOk((call), GrpcLogTail())) << #call
#define EXPECT_GRPC_OK(call) EXPECT_TRUE(::blockcsi::testing::GrpcOk((call), GrpcLogTail())) << #call

}  // namespace blockcsi::testing
