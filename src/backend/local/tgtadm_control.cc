#include "backend/local/tgtadm_control.h"

#include <cerrno>
#include <optional>
#include <string_view>

namespace blockcsi {
namespace {

// The error number whose tgtadm wording `line` is ("tgtadm: <text>"), if any.
std::optional<TgtdError> ErrorOfLine(std::string_view line) {
  constexpr std::string_view kPrefix = "tgtadm: ";
  if (line.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  line.remove_prefix(kPrefix.size());
  for (uint32_t n = 1; n < kTgtdErrorCount; ++n) {
    if (TgtdErrorText(static_cast<TgtdError>(n)) == line) return static_cast<TgtdError>(n);
  }
  return std::nullopt;
}

}  // namespace

Command TgtadmControl::CommandFor(const TgtdRequest& r) const {
  Command c(tgtadm_);
  c.Args({"-C", std::to_string(control_port_), "--lld", "iscsi", "--op", std::string(TgtdOpName(r.op)), "--mode",
          std::string(TgtdModeName(r.mode))});
  c.Timeout(timeout_);
  if (r.tid) c.Args({"--tid", std::to_string(*r.tid)});
  if (r.sid) c.Args({"--sid", std::to_string(*r.sid)});
  if (r.cid) c.Args({"--cid", std::to_string(*r.cid)});
  if (r.lun) c.Args({"--lun", std::to_string(*r.lun)});
  if (!r.target_name.empty()) c.Args({"-T", r.target_name});
  if (!r.backing_store.empty()) c.Args({"-b", r.backing_store});
  if (!r.initiator_name.empty()) c.Args({"--initiator-name", r.initiator_name});
  if (!r.initiator_address.empty()) c.Args({"-I", r.initiator_address});
  if (!r.user.empty()) c.Args({"--user", r.user});
  if (!r.password.empty()) c.Arg("--password").Secret(r.password);
  if (!r.scsi_sn.empty() || !r.scsi_id.empty() || r.thin_provisioning) {
    std::string params;
    auto add = [&params](const std::string& param) { params += (params.empty() ? "" : ",") + param; };
    if (!r.scsi_sn.empty()) add("scsi_sn=" + r.scsi_sn);
    if (!r.scsi_id.empty()) add("scsi_id=" + r.scsi_id);
    if (r.thin_provisioning) add(*r.thin_provisioning ? "thin_provisioning=1" : "thin_provisioning=0");
    c.Args({"--params", params});
  }
  if (r.outgoing) c.Arg("--outgoing");
  if (r.force) c.Arg("--force");
  return c;
}

StatusOr<TgtdAnswer> TgtadmControl::Send(const TgtdRequest& request) {
  BLOCKCSI_RETURN_IF_ERROR(CheckTgtdRequest(request));
  const Command command = CommandFor(request);
  BLOCKCSI_ASSIGN_OR_RETURN(CommandResult result, executor_->Run(command));
  TgtdAnswer answer;
  if (result.ok()) {
    answer.text = std::move(result.stdout_text);
    return answer;
  }
  std::string_view line = result.stderr_text;
  while (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (result.exit_code == EINVAL && line.find('\n') == std::string_view::npos) {
    if (auto error = ErrorOfLine(line); error.has_value()) {
      answer.error = *error;
      return answer;
    }
  }
  const std::string failure = "tgtd on control port " + std::to_string(control_port_) + ": " + command.Redacted() +
                              " exited " + std::to_string(result.exit_code) + ": " + FailureLine(command, result);
  // tgtadm's own refusals (a bad option) exit 1 or EINVAL with other words;
  // anything else is the errno of a socket call that did not reach tgtd.
  if (result.exit_code == 1 || result.exit_code == EINVAL || result.exit_code < 0) return Internal(failure);
  return Unavailable(failure);
}

}  // namespace blockcsi
