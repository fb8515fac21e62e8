// TgtdSocketExecutor: runs the tgtadm commands TgtExporter builds without a
// tgtadm process, by speaking tgtadm's own request/response protocol to
// tgtd's management socket (<socket_dir>/socket.<control port>): a fixed
// binary header (struct tgtadm_req of tgt 1.0.x: mode, op, lld, length,
// tid, sid, lun, cid, ...) then "key=value,..." parameters; the answer is
// an error number, a length and, for `show`, the same text tgtadm prints.
//
// Why (issue #21): a CHAP password on tgtadm's command line is readable by
// every local user in /proc/<pid>/cmdline while tgtadm runs; over the socket
// it never leaves this process. It also saves a fork+exec per call.
//
// The result mimics tgtadm's: stdout is tgtd's text, a tgtd error gives exit
// code 22 (EINVAL) and stderr "tgtadm: <tgtadm's message>", so callers that
// tolerate "already exists"-style errors work unchanged. Not reaching tgtd
// at all is UNAVAILABLE. Only the options TgtExporter uses are understood;
// anything else is refused (exit 22) rather than guessed. Thread-safe (one
// connection per call, as tgtadm does).
#pragma once

#include <string>

#include "common/executor.h"

namespace blockcsi {

class TgtdSocketExecutor final : public Executor {
 public:
  explicit TgtdSocketExecutor(std::string socket_dir = kDefaultSocketDir) : socket_dir_(std::move(socket_dir)) {}
  static constexpr char kDefaultSocketDir[] = "/var/run/tgtd";

  StatusOr<CommandResult> Run(const Command& command) override;

 private:
  const std::string socket_dir_;
};

}  // namespace blockcsi
