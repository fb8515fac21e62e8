#include "attach/attach_spec.h"

#include <cctype>
#include <string_view>

#include "common/strings.h"
#include "contract/chap_rules.h"
#include "contract/iscsi_names.h"
#include "contract/publish_context.h"

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
  std::vector<std::string> out = SplitString(text, ',');
  for (auto& item : out) item = std::string(TrimWhitespace(item));
  return out;
}

// Pool, image and cephx names: Ceph allows more, but nothing we create or
// accept needs more than this, and it keeps every value safe for argv,
// file names and messages.
Status ValidateCephName(const std::string& value, const std::string& what, size_t max_length) {
  if (value.empty()) return InvalidArgument(what + " is empty");
  if (value.size() > max_length) return InvalidArgument(what + " is longer than " + std::to_string(max_length));
  for (char c : value) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return InvalidArgument(what + " \"" + value.substr(0, 50) + "\" may contain only letters, digits, '-', '_', '.'");
    }
  }
  return OkStatus();
}

StatusOr<AttachSpec> ParseRbdSpec(AttachSpec spec, const std::map<std::string, std::string>& publish_context,
                                  const std::map<std::string, std::string>& secrets, const std::string& where) {
  auto required = [&](const char* key) -> StatusOr<std::string> {
    const std::string* v = Find(publish_context, key);
    if (v == nullptr || v->empty()) return InvalidArgument(where + "publish_context has no " + key);
    return *v;
  };
  BLOCKCSI_ASSIGN_OR_RETURN(spec.rbd.pool, required(publish_context::kRbdPool));
  BLOCKCSI_RETURN_IF_ERROR(
      ValidateCephName(spec.rbd.pool, where + "publish_context " + publish_context::kRbdPool, 100));
  BLOCKCSI_ASSIGN_OR_RETURN(spec.rbd.image, required(publish_context::kRbdImage));
  BLOCKCSI_RETURN_IF_ERROR(
      ValidateCephName(spec.rbd.image, where + "publish_context " + publish_context::kRbdImage, 200));
  // The image id is what the node verifies (a re-created image of the same
  // name has another id), so it is required like a SCSI serial is.
  BLOCKCSI_ASSIGN_OR_RETURN(spec.rbd.image_id, required(publish_context::kRbdImageId));
  BLOCKCSI_RETURN_IF_ERROR(
      ValidateCephName(spec.rbd.image_id, where + "publish_context " + publish_context::kRbdImageId, 64));
  spec.expected_serial = spec.rbd.image_id;
  if (const std::string* mons = Find(publish_context, publish_context::kCephMonitors); mons != nullptr) {
    if (mons->size() > 1024) return InvalidArgument(where + "publish_context cephMonitors is longer than 1024");
    for (char c : *mons) {
      if (!std::isalnum(static_cast<unsigned char>(c)) &&
          std::string_view(".:,/[]-").find(c) == std::string_view::npos) {
        return InvalidArgument(where + "publish_context " + publish_context::kCephMonitors + " \"" +
                               mons->substr(0, 100) + "\" is not a monitor list");
      }
    }
    spec.rbd.monitors = *mons;
  }
  if (const std::string* user = Find(publish_context, publish_context::kCephUser); user != nullptr) {
    spec.rbd.user = *user;
  }
  // Node-stage secrets override the controller's user: the node may be
  // given a cephx user of its own with fewer caps.
  const std::string* secret_user = Find(secrets, secret_keys::kCephUserId);
  const std::string* secret_key = Find(secrets, secret_keys::kCephUserKey);
  if (secret_user != nullptr && !secret_user->empty()) spec.rbd.user = *secret_user;
  if (spec.rbd.user.rfind("client.", 0) == 0) spec.rbd.user = spec.rbd.user.substr(7);
  if (spec.rbd.user.empty()) spec.rbd.user = "admin";
  BLOCKCSI_RETURN_IF_ERROR(ValidateCephName(spec.rbd.user, where + "cephx user", 100));
  if (secret_key != nullptr && !secret_key->empty()) {
    if (secret_key->size() > 256) return InvalidArgument(where + "node-stage secret userKey is longer than 256 bytes");
    for (char c : *secret_key) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '/' && c != '=') {
        return InvalidArgument(where + "node-stage secret userKey is not base64");
      }
    }
    spec.rbd.key = *secret_key;
  }
  BLOCKCSI_ASSIGN_OR_RETURN(spec.read_only, ParseBool(publish_context, publish_context::kReadOnly, where));
  return spec;
}

}  // namespace

namespace {

using StringMap = std::map<std::string, std::string>;

// Where the iSCSI LUN is: portals (each once), target name, LUN number.
Status ParseIscsiLocation(const StringMap& publish_context, const std::string& where, AttachSpec& spec) {
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

  return OkStatus();
}

// What the LUN must prove it is (serial, WWN), unless it is a static volume.
Status ParseLunIdentity(const StringMap& publish_context, const std::string& where, AttachSpec& spec) {
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
  BLOCKCSI_ASSIGN_OR_RETURN(spec.static_volume,
                            ParseBool(publish_context, publish_context::kStatic, where + "publish_context "));
  // Without an identity the node cannot tell the right LUN from a wrong one
  // (a reused LUN number, a stale ACL): refuse rather than guess. A static
  // volume's admin may not know it (another vendor's array); the PV then
  // names the LUN by target and number alone, as the in-tree plugin did.
  if (!spec.static_volume && spec.expected_serial.empty() && spec.expected_wwn.empty()) {
    return InvalidArgument(where + "publish_context has neither " + publish_context::kSerial + " nor " +
                           publish_context::kWwn + "; the node needs the LUN's identity to verify it");
  }

  return OkStatus();
}

// The initiator name the node logs in with: its own, or the one a static PV names.
Status ParseInitiator(const StringMap& publish_context, const std::string& initiator_iqn, const std::string& where,
                      AttachSpec& spec) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateIscsiName(initiator_iqn).WithContext(where + "initiator name"));
  spec.initiator_iqn = initiator_iqn;
  // A static PV may name the initiator the array's ACL was written for.
  if (const std::string* own = Find(publish_context, publish_context::kInitiatorName);
      own != nullptr && !own->empty()) {
    if (!spec.static_volume) {
      return InvalidArgument(where + "publish_context " + publish_context::kInitiatorName +
                             " is only for static volumes");
    }
    BLOCKCSI_RETURN_IF_ERROR(
        ValidateIscsiName(*own).WithContext(where + "publish_context " + publish_context::kInitiatorName));
    spec.initiator_iqn = *own;
  }

  return OkStatus();
}

// CHAP from the node-stage secrets, required when the target says so.
Status ParseChap(const StringMap& secrets, bool chap_required, const std::string& where, AttachSpec& spec) {
  auto secret = [&](const char* key) {
    const std::string* v = Find(secrets, key);
    return v == nullptr ? std::string() : *v;
  };
  ChapCredentials chap{secret(secret_keys::kChapUsername), secret(secret_keys::kChapPassword),
                       secret(secret_keys::kChapMutualUsername), secret(secret_keys::kChapMutualPassword)};
  if (chap_required && chap.username.empty()) {
    return InvalidArgument(where + "the target requires CHAP but the node-stage secrets have no " +
                           secret_keys::kChapUsername);
  }
  // The same rules the controller and the target applied (chap_rules.h).
  BLOCKCSI_RETURN_IF_ERROR(ValidateChapCredentials(chap, where + "node-stage secret"));
  spec.chap = std::move(chap);
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
    spec.initiator_iqn = initiator_iqn;
    return ParseRbdSpec(std::move(spec), publish_context, secrets, where);
  }
  if (spec.transport != "iscsi") {
    return InvalidArgument(where + "publish_context " + publish_context::kTransport + " \"" +
                           spec.transport.substr(0, 50) + "\" is not \"iscsi\" or \"rbd\"");
  }

  BLOCKCSI_RETURN_IF_ERROR(ParseIscsiLocation(publish_context, where, spec));
  BLOCKCSI_RETURN_IF_ERROR(ParseLunIdentity(publish_context, where, spec));
  BLOCKCSI_ASSIGN_OR_RETURN(spec.read_only, ParseBool(publish_context, publish_context::kReadOnly, where));
  BLOCKCSI_ASSIGN_OR_RETURN(bool chap_required,
                            ParseBool(publish_context, publish_context::kChapRequired, where + "publish_context "));
  BLOCKCSI_RETURN_IF_ERROR(ParseInitiator(publish_context, initiator_iqn, where, spec));
  BLOCKCSI_RETURN_IF_ERROR(ParseChap(secrets, chap_required, where, spec));
  return spec;
}

}  // namespace blockcsi
