// The captured tgtadm listings (test/testdata/tgtadm) and the exports they
// hold, shared by the TgtExporter unit tests: target 2 is recorded as
// vol-1111111111111111 on /tmp/bk/b.img, granted to nodes n1 and n2;
// vol-2222222222222222 is in none of them. FakeTgtd: a strict TgtdControl
// that expects an exact sequence of typed requests and answers each with a
// canned error number (and text) or status. Thread-safe.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "backend/local/tgt_exporter.h"
#include "backend/local/tgtd_control.h"
#include "common/mutex.h"
#include "support/test_util.h"

namespace blockcsi::tgt_captured {

// Anything but the next expected request fails the running test and is
// answered INTERNAL.
class FakeTgtd final : public TgtdControl {
 public:
  FakeTgtd& Expect(TgtdRequest request, StatusOr<TgtdAnswer> answer) {
    MutexLock lock(mu_);
    expected_.push_back({std::move(request), std::move(answer), nullptr});
    return *this;
  }
  FakeTgtd& ExpectOk(TgtdRequest request, std::string text = "") {
    return Expect(std::move(request), TgtdAnswer{TgtdError::kSuccess, std::move(text)});
  }
  // tgtd answers `error`.
  FakeTgtd& ExpectRefused(TgtdRequest request, TgtdError error) {
    return Expect(std::move(request), TgtdAnswer{error, ""});
  }
  // tgtd was not reached (Send returns `status`).
  FakeTgtd& ExpectError(TgtdRequest request, Status status) { return Expect(std::move(request), std::move(status)); }
  // A request about the hold account a replacement makes: its user name
  // (kHold in `request`) and secret are random, so any "blockcsi-hold-" name
  // matches, the same one every time, with a secret of 32 characters.
  static constexpr char kHold[] = "(hold)";
  FakeTgtd& ExpectHold(TgtdRequest request) {
    MutexLock lock(mu_);
    expected_.push_back({std::move(request), TgtdAnswer{TgtdError::kSuccess, ""}, nullptr, true});
    return *this;
  }
  // Runs `action` when the last queued request arrives, before it is answered.
  FakeTgtd& Then(std::function<void()> action) {
    MutexLock lock(mu_);
    if (!expected_.empty()) expected_.back().action = std::move(action);
    return *this;
  }

  StatusOr<TgtdAnswer> Send(const TgtdRequest& request) override {
    std::function<void()> action;
    StatusOr<TgtdAnswer> answer = Internal("unexpected tgtd request " + request.Describe());
    {
      MutexLock lock(mu_);
      sent_.push_back(request);
      if (next_ >= expected_.size()) {
        ADD_FAILURE() << "unexpected tgtd request: " << request.Describe();
        return answer;
      }
      Expected want = expected_[next_];
      if (want.hold) {
        if (request.user.rfind("blockcsi-hold-", 0) != 0 || (!hold_.empty() && request.user != hold_) ||
            (want.request.op == TgtdOp::kNew && request.password.size() != 32)) {
          ADD_FAILURE() << "tgtd request " << next_ << " is not about one hold account: " << request.Describe();
          return answer;
        }
        hold_ = request.user;
        want.request.user = request.user;
        want.request.password = request.password;
      }
      if (!(want.request == request)) {
        ADD_FAILURE() << "tgtd request " << next_ << ": got " << request.Describe() << "\n  want "
                      << want.request.Describe();
        return answer;
      }
      ++next_;
      answer = want.answer;
      action = want.action;
    }
    if (action) action();  // outside the lock: it may send requests of its own
    return answer;
  }

  // Expectations not yet consumed, described.
  std::vector<std::string> Pending() const {
    MutexLock lock(mu_);
    std::vector<std::string> out;
    for (size_t i = next_; i < expected_.size(); ++i) out.push_back(expected_[i].request.Describe());
    return out;
  }
  // Every request received, in order.
  std::vector<TgtdRequest> Sent() const {
    MutexLock lock(mu_);
    return sent_;
  }

 private:
  struct Expected {
    TgtdRequest request;
    StatusOr<TgtdAnswer> answer;
    std::function<void()> action;
    bool hold = false;
  };
  std::string hold_ GUARDED_BY(mu_);
  mutable Mutex mu_;
  std::vector<Expected> expected_ GUARDED_BY(mu_);
  size_t next_ GUARDED_BY(mu_) = 0;
  std::vector<TgtdRequest> sent_ GUARDED_BY(mu_);
};

inline constexpr char kN1[] = "iqn.2026-11.io.blockcsi:node:n1";
inline constexpr char kN2[] = "iqn.2026-11.io.blockcsi:node:n2";
inline constexpr char kVol2[] = "vol-1111111111111111";
inline constexpr char kIqn2[] = "iqn.2026-11.io.blockcsi:vol-1111111111111111";
inline constexpr char kNewVol[] = "vol-2222222222222222";
inline constexpr char kNewIqn[] = "iqn.2026-11.io.blockcsi:vol-2222222222222222";

inline std::string Captured(const std::string& name) {
  return testing::ReadFileOrEmpty(testing::TestDataPath("tgtadm/" + name));
}

// `text` with the first occurrence of `from` replaced: a listing after a
// change, derived from the captured one.
inline std::string Edited(std::string text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "captured output lacks: " << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// One connection as `tgtadm --mode conn --op show --tid N` prints it.
inline std::string ConnectionListed(uint64_t sid, uint32_t cid, const std::string& initiator,
                                    const std::string& address = "127.0.0.1") {
  return "Session: " + std::to_string(sid) + "\n    Connection: " + std::to_string(cid) +
         "\n        Initiator: " + initiator + "\n        IP Address: " + address + "\n";
}

inline DesiredAcl Allow(const std::string& initiator, const std::string& chap_username = "") {
  DesiredAcl acl;
  acl.initiator_iqn = initiator;
  acl.chap = !chap_username.empty();
  acl.chap_username = chap_username;
  return acl;
}

// Target 2 as recorded: LUN 1 on b.img (34 MB as tgtd rounds), both nodes.
inline DesiredExport Volume2() {
  return {.iqn = kIqn2,
          .volume_id = kVol2,
          .image_path = "/tmp/bk/b.img",
          .size_bytes = 34'000'000,
          .serial = "bcsi1111111111111111",
          .wwn = "",
          .acls = {Allow(kN1), Allow(kN2)},
          .chap = {}};
}

// A volume tgtd does not have yet, with no grant (as CreateVolume makes it).
inline DesiredExport NewVolume() {
  return {.iqn = kNewIqn,
          .volume_id = kNewVol,
          .image_path = "/pool/v2.img",
          .size_bytes = 64 << 20,
          .serial = "bcsi2222222222222222",
          .wwn = "",
          .acls = {},
          .chap = {}};
}

// Expects, on `tgtd`, the requests that make `d` from nothing as target
// `tid`: the target, LUN 1 on d's image configured (serial, SCSI id, thin), then one
// bind per ACL (ACLs without CHAP).
inline void ExpectExportMade(FakeTgtd& tgtd, int tid, const DesiredExport& d) {
  tgtd.ExpectOk(TgtdRequest::NewTarget(tid, d.iqn));
  tgtd.ExpectOk(TgtdRequest::NewLun(tid, 1, d.image_path));
  tgtd.ExpectOk(TgtdRequest::ConfigureLun(tid, 1, d.serial, TgtExporter::ScsiIdFor(d.volume_id)));
  for (const auto& acl : d.acls) tgtd.ExpectOk(TgtdRequest::BindInitiator(tid, acl.initiator_iqn));
}

}  // namespace blockcsi::tgt_captured
