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
};

class TgtdHarness {
 public:
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
  std::vector<std::string> command_prefix_;
  int port_ = 0;
  int control_port_ = 0;
  pid_t pid_ = -1;
  std::string log_path_;
};

// A free TCP port on 127.0.0.1 (bound then released).
int FreeTcpPort();

}  // namespace blockcsi::testing
