// A real tgtd for one test: its own iSCSI port and control port on
// 127.0.0.1 (or the address TgtdOptions names, optionally inside a network
// namespace through a command prefix), started as a plain foreground
// process and stopped by its pid (targets deleted, system deleted, then
// SIGKILL), also when the test fails. Needs root and Debian's `tgt`. Not
// thread-safe.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace blockcsi::testing {

// Where and how tgtd runs; the defaults are what Start(error) does.
struct TgtdOptions {
  // The portal address tgtd binds (and portal() reports).
  std::string address = "127.0.0.1";
  // 0: a free port on 127.0.0.1 of this process's namespace.
  int port = 0;
  // Run tgtd and every tgtadm as `<prefix...> program ...`, e.g.
  // {"nsenter", "--net=/run/netns/store", "--"}. The prefix must exec the
  // program so that the pid stays tgtd's. tgtd's control socket is an
  // abstract unix socket, which belongs to a network namespace: tgtadm
  // must run in tgtd's.
  std::vector<std::string> command_prefix;
  // tgtd's control number (-C); 0: a random one no running tgtd holds. A
  // number another tgtd holds fails the start (only tests name one).
  int control_port = 0;
  // I/O threads per LUN (tgtd -t). kAsDeployed: the value deploy/target-host/
  // target.env ships (TGT_IO_THREADS), so that tests and benchmarks run the
  // tgtd an operator installs; 0: tgt's own default (16).
  static constexpr int kAsDeployed = -1;
  int io_threads = kAsDeployed;
};

// TGT_IO_THREADS of deploy/target-host/target.env, or -1 with `error` set
// when the file or the key is missing or not a positive number.
int DeployedTgtdIoThreads(std::string* error);

// A TCP port on 127.0.0.1 kept bound (never listening) for as long as this
// object lives, so that no other test's bind(0) is handed it: a port picked
// by bind-and-release could be taken by a concurrent test before its server
// binds it. kForServer sets SO_REUSEADDR and SO_REUSEPORT, which let the one
// server the test starts bind the port while it is held (tgtd, gRPC and
// Go's net.Listen set SO_REUSEADDR; cpp-httplib sets only SO_REUSEPORT);
// kDead does not, so the port refuses every connection and nothing can
// listen on it: a dead portal that cannot come alive under `ctest -j`.
class ReservedPort {
 public:
  enum class Use { kForServer, kDead };
  explicit ReservedPort(Use use);
  ~ReservedPort();
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;
  int port() const { return port_; }  // 0 when no port could be bound

 private:
  int fd_ = -1;
  int port_ = 0;
};

class TgtdHarness {
 public:
  // Why this machine cannot run tgtd at all (not root, Debian's `tgt` not
  // installed), or "" when it can. Only this is a reason to skip: any other
  // Start() failure is a broken setup, and the test fails.
  static std::string MissingCapability();
  // Starts tgtd and waits until tgtadm answers. nullptr with `error` set
  // when it cannot (not root, tgtd missing, no port).
  static std::unique_ptr<TgtdHarness> Start(std::string* error);
  static std::unique_ptr<TgtdHarness> Start(const TgtdOptions& options, std::string* error);
  ~TgtdHarness();
  TgtdHarness(const TgtdHarness&) = delete;
  TgtdHarness& operator=(const TgtdHarness&) = delete;

  int port() const { return port_; }
  int control_port() const { return control_port_; }
  std::string portal() const { return address_ + ":" + std::to_string(port_); }
  pid_t pid() const { return pid_; }

  // Runs `tgtadm -C <control port> --lld iscsi <args>`; returns stdout,
  // sets *exit_code when given.
  std::string Tgtadm(const std::vector<std::string>& args, int* exit_code = nullptr) const;
  // `--op show --mode target` output.
  std::string ShowTargets() const;

  // kill -9 (tgtd loses its whole in-memory configuration).
  void Kill9();
  // Starts tgtd again on the same ports after Kill9().
  bool Restart(std::string* error);

 private:
  TgtdHarness() = default;
  bool Launch(std::string* error);
  void Stop();

  std::string address_ = "127.0.0.1";
  // Holds port_ for the harness's life (also across Restart) when it was
  // picked here; empty when the caller named the port.
  std::unique_ptr<ReservedPort> reserved_port_;
  std::vector<std::string> command_prefix_;
  int io_threads_ = 0;  // 0: no -t, tgtd's default
  int port_ = 0;
  int control_port_ = 0;
  pid_t pid_ = -1;
  std::string log_path_;
  bool control_taken_ = false;  // Launch() found the control number another tgtd's
};

// In a test body or SetUp(), after `harness = TgtdHarness::Start(&error)`:
// skips with the printed reason when the machine lacks what tgtd needs, and
// fails when it has it and tgtd still did not start.
#define BLOCKCSI_REQUIRE_TGTD(harness, error)                                                                         \
  do {                                                                                                                \
    if (!(harness)) {                                                                                                 \
      if (std::string why = ::blockcsi::testing::TgtdHarness::MissingCapability(); !why.empty()) GTEST_SKIP() << why; \
      FAIL() << "cannot start tgtd: " << (error);                                                                     \
    }                                                                                                                 \
  } while (0)

// A free TCP port on 127.0.0.1, bound then released: racy under `ctest -j`
// (see ReservedPort); only for names that are not TCP ports (tgtd's control
// socket number, say).
int FreeTcpPort();

}  // namespace blockcsi::testing
