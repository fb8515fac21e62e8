#include "backend/local/tgtd_control.h"

#include <utility>

namespace blockcsi {
namespace {

// tgtadm's wording, indexed by error number (its tgtadm_strerror).
constexpr std::string_view kErrorTexts[kTgtdErrorCount] = {"success",
                                                           "unknown error",
                                                           "out of memory",
                                                           "can't find the driver",
                                                           "can't find the target",
                                                           "can't find the logical unit",
                                                           "can't find the session",
                                                           "can't find the connection",
                                                           "can't find the binding",
                                                           "this target already exists",
                                                           "this binding already exists",
                                                           "this logical unit number already exists",
                                                           "this access control rule already exists",
                                                           "this access control rule does not exist",
                                                           "this account already exists",
                                                           "can't find the account",
                                                           "too many accounts",
                                                           "invalid request",
                                                           "this target already has an outgoing account",
                                                           "this target is still active",
                                                           "this logical unit is still active",
                                                           "this driver is busy",
                                                           "this operation isn't supported",
                                                           "unknown parameter",
                                                           "this device has Prevent Removal set"};

TgtdRequest Request(TgtdMode mode, TgtdOp op) {
  TgtdRequest r;
  r.mode = mode;
  r.op = op;
  return r;
}

}  // namespace

std::string_view TgtdModeName(TgtdMode mode) {
  switch (mode) {
    case TgtdMode::kSystem:
      return "system";
    case TgtdMode::kTarget:
      return "target";
    case TgtdMode::kLogicalUnit:
      return "logicalunit";
    case TgtdMode::kSession:
      return "session";
    case TgtdMode::kConnection:
      return "conn";
    case TgtdMode::kAccount:
      return "account";
  }
  return "mode?";
}

std::string_view TgtdOpName(TgtdOp op) {
  switch (op) {
    case TgtdOp::kNew:
      return "new";
    case TgtdOp::kDelete:
      return "delete";
    case TgtdOp::kShow:
      return "show";
    case TgtdOp::kBind:
      return "bind";
    case TgtdOp::kUnbind:
      return "unbind";
    case TgtdOp::kUpdate:
      return "update";
  }
  return "op?";
}

std::string_view TgtdErrorText(TgtdError error) {
  const auto n = static_cast<uint32_t>(error);
  return n < kTgtdErrorCount ? kErrorTexts[n] : std::string_view("(unknown tgtadm_errno)");
}

TgtdErrors::TgtdErrors(std::initializer_list<TgtdError> errors) {
  for (TgtdError e : errors) {
    if (static_cast<uint32_t>(e) < kTgtdErrorCount) bits_ |= 1u << static_cast<uint32_t>(e);
  }
}

TgtdRequest TgtdRequest::ShowTargets() { return Request(TgtdMode::kTarget, TgtdOp::kShow); }

TgtdRequest TgtdRequest::ShowAccounts() { return Request(TgtdMode::kAccount, TgtdOp::kShow); }

TgtdRequest TgtdRequest::ShowConnections(int tid) {
  TgtdRequest r = Request(TgtdMode::kConnection, TgtdOp::kShow);
  r.tid = tid;
  return r;
}

TgtdRequest TgtdRequest::NewTarget(int tid, std::string iqn) {
  TgtdRequest r = Request(TgtdMode::kTarget, TgtdOp::kNew);
  r.tid = tid;
  r.target_name = std::move(iqn);
  return r;
}

TgtdRequest TgtdRequest::DeleteTarget(int tid) {
  TgtdRequest r = Request(TgtdMode::kTarget, TgtdOp::kDelete);
  r.tid = tid;
  r.force = true;
  return r;
}

TgtdRequest TgtdRequest::BindInitiator(int tid, std::string initiator_name) {
  TgtdRequest r = Request(TgtdMode::kTarget, TgtdOp::kBind);
  r.tid = tid;
  r.initiator_name = std::move(initiator_name);
  return r;
}

TgtdRequest TgtdRequest::UnbindInitiator(int tid, std::string initiator_name) {
  TgtdRequest r = Request(TgtdMode::kTarget, TgtdOp::kUnbind);
  r.tid = tid;
  r.initiator_name = std::move(initiator_name);
  return r;
}

TgtdRequest TgtdRequest::UnbindAddress(int tid, std::string initiator_address) {
  TgtdRequest r = Request(TgtdMode::kTarget, TgtdOp::kUnbind);
  r.tid = tid;
  r.initiator_address = std::move(initiator_address);
  return r;
}

TgtdRequest TgtdRequest::NewLun(int tid, uint64_t lun, std::string backing_store) {
  TgtdRequest r = Request(TgtdMode::kLogicalUnit, TgtdOp::kNew);
  r.tid = tid;
  r.lun = lun;
  r.backing_store = std::move(backing_store);
  return r;
}

TgtdRequest TgtdRequest::SetLunThin(int tid, uint64_t lun) {
  TgtdRequest r = Request(TgtdMode::kLogicalUnit, TgtdOp::kUpdate);
  r.tid = tid;
  r.lun = lun;
  r.thin_provisioning = true;
  return r;
}

TgtdRequest TgtdRequest::ConfigureLun(int tid, uint64_t lun, std::string scsi_sn, std::string scsi_id) {
  TgtdRequest r = SetLunThin(tid, lun);
  r.scsi_sn = std::move(scsi_sn);
  r.scsi_id = std::move(scsi_id);
  return r;
}

TgtdRequest TgtdRequest::DeleteLun(int tid, uint64_t lun) {
  TgtdRequest r = Request(TgtdMode::kLogicalUnit, TgtdOp::kDelete);
  r.tid = tid;
  r.lun = lun;
  return r;
}

TgtdRequest TgtdRequest::NewAccount(std::string user, std::string password) {
  TgtdRequest r = Request(TgtdMode::kAccount, TgtdOp::kNew);
  r.user = std::move(user);
  r.password = std::move(password);
  return r;
}

TgtdRequest TgtdRequest::DeleteAccount(std::string user) {
  TgtdRequest r = Request(TgtdMode::kAccount, TgtdOp::kDelete);
  r.user = std::move(user);
  return r;
}

TgtdRequest TgtdRequest::BindAccount(int tid, std::string user, bool outgoing) {
  TgtdRequest r = Request(TgtdMode::kAccount, TgtdOp::kBind);
  r.tid = tid;
  r.user = std::move(user);
  r.outgoing = outgoing;
  return r;
}

TgtdRequest TgtdRequest::UnbindAccount(int tid, std::string user, bool outgoing) {
  TgtdRequest r = Request(TgtdMode::kAccount, TgtdOp::kUnbind);
  r.tid = tid;
  r.user = std::move(user);
  r.outgoing = outgoing;
  return r;
}

TgtdRequest TgtdRequest::DeleteConnection(int tid, uint64_t sid, uint32_t cid) {
  TgtdRequest r = Request(TgtdMode::kConnection, TgtdOp::kDelete);
  r.tid = tid;
  r.sid = sid;
  r.cid = cid;
  return r;
}

std::string TgtdRequest::Describe() const {
  std::string out = std::string(TgtdModeName(mode)) + " " + std::string(TgtdOpName(op));
  auto add = [&](std::string_view key, const std::string& value) {
    if (!value.empty()) out += " " + std::string(key) + "=" + value;
  };
  if (tid) add("tid", std::to_string(*tid));
  if (sid) add("sid", std::to_string(*sid));
  if (lun) add("lun", std::to_string(*lun));
  if (cid) add("cid", std::to_string(*cid));
  add("targetname", target_name);
  add("path", backing_store);
  add("initiator-name", initiator_name);
  add("initiator-address", initiator_address);
  add("user", user);
  if (!password.empty()) out += " password=(secret)";
  add("scsi_sn", scsi_sn);
  add("scsi_id", scsi_id);
  if (thin_provisioning) out += *thin_provisioning ? " thin_provisioning=1" : " thin_provisioning=0";
  if (outgoing) out += " outgoing";
  if (force) out += " force";
  return out;
}

std::string TgtdParameters(const TgtdRequest& r) {
  // The order tgtadm puts them in.
  std::string params;
  auto add = [&](std::string_view key, const std::string& value) {
    if (value.empty()) return;
    if (!params.empty()) params += ",";
    params += std::string(key) + "=" + value;
  };
  add("path", r.backing_store);
  add("targetname", r.target_name);
  add("initiator-address", r.initiator_address);
  add("initiator-name", r.initiator_name);
  add("user", r.user);
  add("password", r.password);
  if (!r.scsi_sn.empty() || !r.scsi_id.empty() || r.thin_provisioning) {
    // tgtadm passes --params through as "targetOps <list>,".
    std::string ops;
    if (!r.scsi_sn.empty()) ops += "scsi_sn=" + r.scsi_sn + ",";
    if (!r.scsi_id.empty()) ops += "scsi_id=" + r.scsi_id + ",";
    if (r.thin_provisioning) ops += *r.thin_provisioning ? "thin_provisioning=1," : "thin_provisioning=0,";
    if (!params.empty()) params += ",";
    params += "targetOps " + ops;
  }
  return params;
}

Status CheckTgtdRequest(const TgtdRequest& r) {
  const std::pair<std::string_view, const std::string*> values[] = {{"target name", &r.target_name},
                                                                    {"backing store", &r.backing_store},
                                                                    {"initiator name", &r.initiator_name},
                                                                    {"initiator address", &r.initiator_address},
                                                                    {"user", &r.user},
                                                                    {"password", &r.password},
                                                                    {"SCSI serial", &r.scsi_sn},
                                                                    {"SCSI id", &r.scsi_id}};
  for (const auto& [what, value] : values) {
    if (value->find(',') != std::string::npos) {
      return InvalidArgument("tgtd request " + r.Describe() + ": its " + std::string(what) + " has a comma");
    }
    if (value->find('\0') != std::string::npos) {
      return InvalidArgument("tgtd request " + r.Describe() + ": its " + std::string(what) + " has a NUL byte");
    }
  }
  return OkStatus();
}

}  // namespace blockcsi
