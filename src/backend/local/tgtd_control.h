// TgtdControl: tgtd's management interface as typed requests and answers.
// A request is what tgtd itself receives (struct tgtadm_req: a mode, an
// operation, ids) plus its parameters by name; the answer is tgtd's error
// number and, for a show, its text. Callers decide on error numbers, never on
// how a message is worded. Two implementations: TgtdSocketControl (tgtd's
// management socket, tgtd_socket_control.h) and TgtadmControl (an exec of
// tgtadm, tgtadm_control.h). Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace blockcsi {

// tgtd's error numbers (tgt's usr/tgtadm_error.h as of tgt 1.0.85; the
// socket test checks the ones blockcsi meets against a real tgtd).
enum class TgtdError : uint32_t {
  kSuccess = 0,
  kUnknownError = 1,
  kNoMemory = 2,
  kNoDriver = 3,
  kNoTarget = 4,
  kNoLun = 5,
  kNoSession = 6,
  kNoConnection = 7,
  kNoBinding = 8,
  kTargetExists = 9,
  kBindingExists = 10,
  kLunExists = 11,
  kAclExists = 12,
  kAclDoesNotExist = 13,
  kUserExists = 14,
  kNoUser = 15,
  kTooManyUsers = 16,
  kInvalidRequest = 17,
  kOutgoingAccountExists = 18,
  kTargetActive = 19,
  kLunActive = 20,
  kDriverActive = 21,
  kUnsupportedOperation = 22,
  kUnknownParameter = 23,
  kPreventRemoval = 24,
};
inline constexpr uint32_t kTgtdErrorCount = 25;

// How tgtadm words `error` (its tgtadm_strerror table), for messages; for a
// number outside the table, "(unknown tgtadm_errno)" as tgtadm prints it.
std::string_view TgtdErrorText(TgtdError error);

// The error numbers a step accepts as "already in that state". Small (a
// step tolerates at most a few), so a plain list.
class TgtdErrors {
 public:
  TgtdErrors() = default;
  TgtdErrors(std::initializer_list<TgtdError> errors);
  bool Has(TgtdError error) const { return (bits_ >> static_cast<uint32_t>(error)) & 1u; }

 private:
  uint32_t bits_ = 0;  // one bit per error number below kTgtdErrorCount
};

// tgtd's modes and operations, by the numbers its request carries.
enum class TgtdMode : int32_t {
  kSystem = 0,
  kTarget = 1,
  kLogicalUnit = 2,
  kSession = 5,
  kConnection = 6,
  kAccount = 7,
};
enum class TgtdOp : int32_t { kNew = 0, kDelete = 1, kShow = 2, kBind = 3, kUnbind = 4, kUpdate = 5 };
// The words tgtadm's --mode and --op take for them ("logicalunit", "unbind").
std::string_view TgtdModeName(TgtdMode mode);
std::string_view TgtdOpName(TgtdOp op);

// One management request. Built with the named constructors below, one per
// operation blockcsi uses, so that a call site reads as the operation.
struct TgtdRequest {
  TgtdMode mode = TgtdMode::kSystem;
  TgtdOp op = TgtdOp::kShow;
  std::optional<int> tid;
  std::optional<uint64_t> sid;
  std::optional<uint64_t> lun;
  std::optional<uint32_t> cid;
  bool force = false;     // target delete even with sessions
  bool outgoing = false;  // account bind/unbind as the target's outgoing (mutual CHAP) account
  std::string target_name;
  std::string backing_store;
  std::string initiator_name;
  std::string initiator_address;
  std::string user;
  // A CHAP secret: only an implementation reads it, to hand it to tgtd;
  // never printed (Describe), never in argv but as Command::Secret.
  std::string password;
  // Logical unit parameters (update): tgtd's SCSI serial and SCSI id, and
  // thin provisioning (unset: left as it is).
  std::string scsi_sn;
  std::string scsi_id;
  std::optional<bool> thin_provisioning;

  static TgtdRequest ShowTargets();
  static TgtdRequest ShowAccounts();
  // The connections of every session of target `tid`, without the free text
  // (InitiatorAlias) an initiator sends: tgtd prints the initiator name, which
  // passed the target's ACL, and the address. NO_TARGET when there is no
  // target `tid`.
  static TgtdRequest ShowConnections(int tid);
  static TgtdRequest NewTarget(int tid, std::string iqn);
  static TgtdRequest DeleteTarget(int tid);  // forced: sessions are closed with it
  static TgtdRequest BindInitiator(int tid, std::string initiator_name);
  static TgtdRequest UnbindInitiator(int tid, std::string initiator_name);
  static TgtdRequest UnbindAddress(int tid, std::string initiator_address);
  static TgtdRequest NewLun(int tid, uint64_t lun, std::string backing_store);
  // What every LUN blockcsi adds is given, in the one update tgtd takes it
  // with (not with new): its serial, its SCSI id, and thin provisioning, with
  // which tgtd advertises logical block provisioning (LBPME, UNMAP and WRITE
  // SAME with UNMAP in VPD 0xB2) and punches UNMAPped ranges out of the image.
  static TgtdRequest ConfigureLun(int tid, uint64_t lun, std::string scsi_sn, std::string scsi_id);
  // Thin provisioning switched on for a live LUN, in place: its sessions
  // stay (an initiator sees it when it next reads the LUN's capacity and
  // provisioning pages, as the kernel does on a rescan).
  static TgtdRequest SetLunThin(int tid, uint64_t lun);
  static TgtdRequest DeleteLun(int tid, uint64_t lun);
  static TgtdRequest NewAccount(std::string user, std::string password);
  static TgtdRequest DeleteAccount(std::string user);
  static TgtdRequest BindAccount(int tid, std::string user, bool outgoing);
  static TgtdRequest UnbindAccount(int tid, std::string user, bool outgoing);
  static TgtdRequest DeleteConnection(int tid, uint64_t sid, uint32_t cid);

  // "account new user=bob password=(secret)": for messages and logs.
  std::string Describe() const;
  bool operator==(const TgtdRequest&) const = default;
};

// tgtd's "key=value,..." parameter text for `request`, as tgtadm builds it
// (usr/tgtadm.c) and tgtd splits it; it holds the password.
std::string TgtdParameters(const TgtdRequest& request);

// INVALID_ARGUMENT when a value cannot reach tgtd as itself: a comma would
// split tgtd's parameter list (an account "a,b" would become "a"), a NUL would
// end it. Both implementations refuse such a request before sending it.
Status CheckTgtdRequest(const TgtdRequest& request);

// tgtd's answer: its error number and, for a show, its text.
struct TgtdAnswer {
  TgtdError error = TgtdError::kSuccess;
  std::string text;
  bool ok() const { return error == TgtdError::kSuccess; }
};

class TgtdControl {
 public:
  virtual ~TgtdControl() = default;
  // tgtd's answer to `request`, or a status when there is none: UNAVAILABLE
  // when tgtd cannot be reached or hangs up, DEADLINE_EXCEEDED when it does
  // not answer in time, INVALID_ARGUMENT for a request CheckTgtdRequest
  // refuses, INTERNAL for an answer that is not tgtd's.
  virtual StatusOr<TgtdAnswer> Send(const TgtdRequest& request) = 0;
};

}  // namespace blockcsi
