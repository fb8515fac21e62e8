#include "attach/attach_spec.h"

#include "attach/iscsi_names.h"
#include "attach/publish_context.h"

namespace blockcsi {
namespace {

const std::string* Find(const std::map<std::string, std::string>& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : &it->second;
}

StatusOr<bool> ParseBool(const std::map<std::string, std::string>& m, const char* key, const std::string& where) {
  const std::string* v = Find(m, key);
  if (v == nullptr || v->empty() || *v == "false") return false;
  if (*v == "true") return true;
  return InvalidArgument(where + std::string(key) + " must be \"true\" or \"false\", not \"" + v->substr(0, 50) + "\"");
}

// Splits on ',' and drops surrounding spaces; empty items are kept so that
// "a,,b" is reported instead of silently accepted.
std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t b = item.find_first_not_of(' ');
    size_t e = item.find_last_not_of(' ');
    out.push_back(b == std::string::npos ? "" : item.substr(b, e - b + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// A CHAP name or secret: printable, bounded (open-iscsi and tgt both cap
// them at 255). The value never appears in the message.
Status ValidateChapField(const std::string& value, const char* key, const std::string& where) {
  if (value.empty()) return InvalidArgument(where + "node-stage secret " + key + " is empty");
  if (value.size() > 255) return InvalidArgument(where + "node-stage secret " + key + " is longer than 255 bytes");
  for (char c : value) {
    if (c < 0x20 || c > 0x7e) {
      return InvalidArgument(where + "node-stage secret " + key + " contains a non-printable character");
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<AttachSpec> ParseAttachSpec(const std::string& volume_id,
                                     const std::map<std::string, std::string>& publish_context,
                                     const std::map<std::string, std::string>& secrets,
                                     const std::string& initiator_iqn) {
  const std::string where = "volume \"" + volume_id.substr(0, 200) + "\": ";
  if (volume_id.empty()) return InvalidArgument("volume id is empty");
  if (volume_id.size() > 512) return InvalidArgument("volume id is longer than 512 bytes");
  AttachSpec spec;
  spec.volume_id = volume_id;

  if (const std::string* t = Find(publish_context, publish_context::kTransport); t != nullptr && !t->empty()) {
    spec.transport = *t;
  }
  if (spec.transport == "rbd") {
    return Unimplemented(where + "transport \"rbd\" is not supported by this node's attacher yet");
  }
  if (spec.transport != "iscsi") {
    return InvalidArgument(where + "publish_context " + publish_context::kTransport + " \"" +
                           spec.transport.substr(0, 50) + "\" is not \"iscsi\" or \"rbd\"");
  }

  const std::string* portals = Find(publish_context, publish_context::kPortals);
  if (portals == nullptr || portals->empty()) {
    return InvalidArgument(where + "publish_context has no " + publish_context::kPortals);
  }
  for (const std::string& item : SplitList(*portals)) {
    auto portal = ParsePortal(item);
    if (!portal.ok()) return portal.status().WithContext(where + "publish_context " + publish_context::kPortals);
    std::string canonical = portal->ToString();
    for (const auto& seen : spec.portals) {
      if (seen == canonical) {
        return InvalidArgument(where + "publish_context " + publish_context::kPortals + " lists " + canonical +
                               " twice");
      }
    }
    spec.portals.push_back(canonical);
  }

  const std::string* iqn = Find(publish_context, publish_context::kTargetIqn);
  if (iqn == nullptr || iqn->empty()) {
    return InvalidArgument(where + "publish_context has no " + publish_context::kTargetIqn);
  }
  BLOCKCSI_RETURN_IF_ERROR(
      ValidateIscsiName(*iqn).WithContext(where + "publish_context " + publish_context::kTargetIqn));
  spec.target_iqn = *iqn;

  const std::string* lun = Find(publish_context, publish_context::kLun);
  if (lun == nullptr || lun->empty()) return InvalidArgument(where + "publish_context has no " + publish_context::kLun);
  auto parsed_lun = ParseLun(*lun);
  if (!parsed_lun.ok()) return parsed_lun.status().WithContext(where + "publish_context " + publish_context::kLun);
  spec.lun = *parsed_lun;

  if (const std::string* serial = Find(publish_context, publish_context::kSerial);
      serial != nullptr && !serial->empty()) {
    BLOCKCSI_RETURN_IF_ERROR(
        ValidateSerial(*serial).WithContext(where + "publish_context " + publish_context::kSerial));
    spec.expected_serial = *serial;
  }
  if (const std::string* wwn = Find(publish_context, publish_context::kWwn); wwn != nullptr && !wwn->empty()) {
    auto normalized = NormalizeWwn(*wwn);
    if (!normalized.ok()) return normalized.status().WithContext(where + "publish_context " + publish_context::kWwn);
    spec.expected_wwn = *normalized;
  }
  // Without an identity the node cannot tell the right LUN from a wrong one
  // (a reused LUN number, a stale ACL): refuse rather than guess.
  if (spec.expected_serial.empty() && spec.expected_wwn.empty()) {
    return InvalidArgument(where + "publish_context has neither " + publish_context::kSerial + " nor " +
                           publish_context::kWwn + "; the node needs the LUN's identity to verify it");
  }

  BLOCKCSI_ASSIGN_OR_RETURN(spec.read_only, ParseBool(publish_context, publish_context::kReadOnly, where));
  BLOCKCSI_ASSIGN_OR_RETURN(bool chap_required,
                            ParseBool(publish_context, publish_context::kChapRequired, where + "publish_context "));

  BLOCKCSI_RETURN_IF_ERROR(ValidateIscsiName(initiator_iqn).WithContext(where + "initiator name"));
  spec.initiator_iqn = initiator_iqn;

  const std::string* user = Find(secrets, secret_keys::kChapUsername);
  const std::string* password = Find(secrets, secret_keys::kChapPassword);
  const std::string* mutual_user = Find(secrets, secret_keys::kChapMutualUsername);
  const std::string* mutual_password = Find(secrets, secret_keys::kChapMutualPassword);
  bool have_user = user != nullptr && !user->empty();
  if (chap_required && !have_user) {
    return InvalidArgument(where + "the target requires CHAP but the node-stage secrets have no " +
                           secret_keys::kChapUsername);
  }
  if (have_user) {
    BLOCKCSI_RETURN_IF_ERROR(ValidateChapField(*user, secret_keys::kChapUsername, where));
    if (password == nullptr) {
      return InvalidArgument(where + "node-stage secrets have " + secret_keys::kChapUsername + " but no " +
                             secret_keys::kChapPassword);
    }
    BLOCKCSI_RETURN_IF_ERROR(ValidateChapField(*password, secret_keys::kChapPassword, where));
    spec.chap.username = *user;
    spec.chap.password = *password;
    if (mutual_user != nullptr && !mutual_user->empty()) {
      BLOCKCSI_RETURN_IF_ERROR(ValidateChapField(*mutual_user, secret_keys::kChapMutualUsername, where));
      if (mutual_password == nullptr) {
        return InvalidArgument(where + "node-stage secrets have " + secret_keys::kChapMutualUsername + " but no " +
                               secret_keys::kChapMutualPassword);
      }
      BLOCKCSI_RETURN_IF_ERROR(ValidateChapField(*mutual_password, secret_keys::kChapMutualPassword, where));
      spec.chap.mutual_username = *mutual_user;
      spec.chap.mutual_password = *mutual_password;
    }
  } else if (mutual_user != nullptr && !mutual_user->empty()) {
    return InvalidArgument(where + "node-stage secrets have " + secret_keys::kChapMutualUsername +
                           " without one-way CHAP (" + secret_keys::kChapUsername + ")");
  }
  return spec;
}

}  // namespace blockcsi
