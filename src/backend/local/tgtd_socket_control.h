// TgtdSocketControl: TgtdControl over tgtd's management socket
// (<socket_dir>/socket.<control port>), speaking the protocol tgtadm speaks:
// a fixed binary header (struct tgtadm_req of tgt 1.0.x: mode, op, lld,
// length, tid, sid, lun, cid, ...) then tgtd's "key=value,..." parameters;
// the answer is tgtd's error number, a length and, for a show, the text
// tgtadm would print.
//
// Why not tgtadm: a CHAP password on tgtadm's command line is readable by
// every local user in /proc/<pid>/cmdline while tgtadm runs; over the socket
// it never leaves this process. It also saves a fork+exec per call.
// Thread-safe: one connection per request, as tgtadm makes.
#pragma once

#include <chrono>
#include <string>

#include "backend/local/tgtd_control.h"

namespace blockcsi {

class TgtdSocketControl final : public TgtdControl {
 public:
  // `timeout` bounds each send and each receive of a request.
  explicit TgtdSocketControl(int control_port, std::string socket_dir = kDefaultSocketDir,
                             std::chrono::milliseconds timeout = std::chrono::seconds(20))
      : control_port_(control_port), socket_dir_(std::move(socket_dir)), timeout_(timeout) {}
  static constexpr char kDefaultSocketDir[] = "/var/run/tgtd";

  StatusOr<TgtdAnswer> Send(const TgtdRequest& request) override;

 private:
  const int control_port_;
  const std::string socket_dir_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace blockcsi
