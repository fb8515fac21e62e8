// TgtadmControl: TgtdControl through an exec of tgtadm (argv via the
// Executor, the CHAP password marked Command::Secret so that logs and errors
// blank it; it is still in tgtadm's /proc/<pid>/cmdline while tgtadm runs,
// which is why TgtdSocketControl is the default).
//
// tgtadm exits 0 on success and EINVAL (22) for every error tgtd answers,
// printing "tgtadm: " and tgtd's error as its tgtadm_strerror words it
// (usr/tgtadm.c, ipc_mgmt_rsp). The exit status alone cannot tell tgtd's
// errors apart, so the error number is read back from that fixed wording:
// the whole line must be one of the table's entries, else the answer is not
// tgtd's and is INTERNAL. A failure to reach tgtd (tgtadm exits with the
// errno of its socket calls, e.g. 107 ENOTCONN) is UNAVAILABLE. Thread-safe
// as its Executor.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "backend/local/tgtd_control.h"
#include "common/executor.h"

namespace blockcsi {

class TgtadmControl final : public TgtdControl {
 public:
  // `tgtadm` is run by this absolute path, never looked up in PATH (a
  // writable directory early in PATH would get every CHAP secret).
  TgtadmControl(std::shared_ptr<Executor> executor, int control_port, std::string tgtadm = kDefaultTgtadm,
                std::chrono::milliseconds timeout = std::chrono::seconds(20))
      : executor_(std::move(executor)), control_port_(control_port), tgtadm_(std::move(tgtadm)), timeout_(timeout) {}
  static constexpr char kDefaultTgtadm[] = "/usr/sbin/tgtadm";

  StatusOr<TgtdAnswer> Send(const TgtdRequest& request) override;

  // The tgtadm command line for `request` (the password as a Secret).
  Command CommandFor(const TgtdRequest& request) const;

 private:
  const std::shared_ptr<Executor> executor_;
  const int control_port_;
  const std::string tgtadm_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace blockcsi
