#include "contract/static_volume.h"

#include <set>
#include <vector>

#include "contract/iscsi_names.h"
#include "contract/publish_context.h"

namespace blockcsi {
namespace {

using namespace static_attributes;  // NOLINT(google-build-using-namespace): the attribute names

const std::string* Find(const std::map<std::string, std::string>& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : &it->second;
}

std::string Quote(const std::string& value) { return "\"" + value.substr(0, 100) + "\""; }

// The in-tree plugin takes a portal without a port as port 3260.
std::string WithDefaultPort(const std::string& portal) {
  if (!portal.empty() && portal.front() == '[') {
    return portal.find("]:") == std::string::npos ? portal + ":3260" : portal;
  }
  return portal.find(':') == std::string::npos ? portal + ":3260" : portal;
}

// "a:3260,b:3260" or the in-tree/csi-driver-iscsi list form
// ["a:3260", "b:3260"]; surrounding spaces and quotes dropped.
std::vector<std::string> SplitPortalList(std::string text) {
  size_t b = text.find_first_not_of(' ');
  size_t e = text.find_last_not_of(' ');
  text = b == std::string::npos ? "" : text.substr(b, e - b + 1);
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']' && text.find('"') != std::string::npos) {
    text = text.substr(1, text.size() - 2);
  }
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t ib = item.find_first_not_of(" \"");
    size_t ie = item.find_last_not_of(" \"");
    out.push_back(ib == std::string::npos ? "" : item.substr(ib, ie - ib + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

StatusOr<bool> Bool(const std::map<std::string, std::string>& ctx, const char* key, const std::string& where) {
  const std::string* v = Find(ctx, key);
  if (v == nullptr || v->empty() || *v == "false") return false;
  if (*v == "true") return true;
  return InvalidArgument(where + key + " must be \"true\" or \"false\", not " + Quote(*v));
}

// Every key a static PV may carry. A misspelt key ("targetPortl") silently
// ignored would attach something else than the admin meant, so anything
// else is refused; Kubernetes' own keys (csi.storage.k8s.io/...) pass.
bool IsKnownKey(const std::string& key) {
  static const std::set<std::string> known{
      kTargetPortal,  kPortals,        kIqn,    kLun, kFsType,      kReadOnly, kChapAuthDiscovery, kChapAuthSession,
      kInitiatorName, kIscsiInterface, kSerial, kWwn, "mkfsOptions"};
  return known.count(key) > 0 || key.rfind("csi.storage.k8s.io/", 0) == 0;
}

}  // namespace

bool IsStaticVolume(const std::map<std::string, std::string>& volume_context) {
  return volume_context.count(kIqn) > 0 || volume_context.count(kTargetPortal) > 0;
}

StatusOr<std::map<std::string, std::string>> StaticPublishContext(const std::string& volume_id,
                                                                  const std::map<std::string, std::string>& ctx,
                                                                  bool read_only) {
  const std::string where = "volume \"" + volume_id.substr(0, 200) + "\": volumeAttributes ";
  for (const auto& [key, value] : ctx) {
    if (!IsKnownKey(key)) {
      return InvalidArgument(where + Quote(key) + " is not a static-volume attribute (want " + kTargetPortal + ", " +
                             kPortals + ", " + kIqn + ", " + kLun + ", " + kFsType + ", " + kReadOnly + ", " +
                             kChapAuthDiscovery + ", " + kChapAuthSession + ", " + kInitiatorName + ", " + kSerial +
                             ", " + kWwn + ")");
    }
  }
  std::map<std::string, std::string> out;

  // Portals: targetPortal first (the in-tree plugin's primary), then the
  // others in their order; each checked and listed once.
  std::vector<std::string> portals;
  auto add_portal = [&](const std::string& text, const char* key) -> Status {
    auto portal = ParsePortal(WithDefaultPort(text));
    if (!portal.ok()) return portal.status().WithContext(where + key);
    std::string canonical = portal->ToString();
    for (const auto& seen : portals) {
      if (seen == canonical) return InvalidArgument(where + key + " lists " + canonical + " twice");
    }
    portals.push_back(canonical);
    return OkStatus();
  };
  const std::string* target_portal = Find(ctx, kTargetPortal);
  if (target_portal == nullptr || target_portal->empty()) return InvalidArgument(where + "has no " + kTargetPortal);
  BLOCKCSI_RETURN_IF_ERROR(add_portal(*target_portal, kTargetPortal));
  if (const std::string* more = Find(ctx, kPortals); more != nullptr) {
    for (const auto& item : SplitPortalList(*more)) BLOCKCSI_RETURN_IF_ERROR(add_portal(item, kPortals));
  }
  std::string joined;
  for (const auto& p : portals) joined += (joined.empty() ? "" : ",") + p;
  out[publish_context::kPortals] = joined;

  const std::string* iqn = Find(ctx, kIqn);
  if (iqn == nullptr || iqn->empty()) return InvalidArgument(where + "has no " + kIqn);
  BLOCKCSI_RETURN_IF_ERROR(ValidateIscsiName(*iqn).WithContext(where + kIqn));
  out[publish_context::kTargetIqn] = *iqn;

  // The in-tree plugin's lun defaults to 0 as well.
  const std::string* lun = Find(ctx, kLun);
  std::string lun_text = lun == nullptr || lun->empty() ? "0" : *lun;
  auto parsed_lun = ParseLun(lun_text);
  if (!parsed_lun.ok()) return parsed_lun.status().WithContext(where + kLun);
  out[publish_context::kLun] = std::to_string(*parsed_lun);

  if (const std::string* serial = Find(ctx, kSerial); serial != nullptr && !serial->empty()) {
    BLOCKCSI_RETURN_IF_ERROR(ValidateSerial(*serial).WithContext(where + kSerial));
    out[publish_context::kSerial] = *serial;
  }
  if (const std::string* wwn = Find(ctx, kWwn); wwn != nullptr && !wwn->empty()) {
    auto normalized = NormalizeWwn(*wwn);
    if (!normalized.ok()) return normalized.status().WithContext(where + kWwn);
    out[publish_context::kWwn] = *normalized;
  }
  if (const std::string* initiator = Find(ctx, kInitiatorName); initiator != nullptr && !initiator->empty()) {
    BLOCKCSI_RETURN_IF_ERROR(ValidateIscsiName(*initiator).WithContext(where + kInitiatorName));
    out[publish_context::kInitiatorName] = *initiator;
  }
  // Both connectors log in straight to the target (no SendTargets
  // discovery), so discovery CHAP has nothing to do; the key is checked
  // and accepted so that an in-tree PV translates unchanged.
  BLOCKCSI_RETURN_IF_ERROR(Bool(ctx, kChapAuthDiscovery, where).status());
  BLOCKCSI_ASSIGN_OR_RETURN(bool chap_session, Bool(ctx, kChapAuthSession, where));
  BLOCKCSI_ASSIGN_OR_RETURN(bool attr_read_only, Bool(ctx, kReadOnly, where));
  // The in-tree iscsiInterface picks an open-iscsi iface; blockcsi makes its
  // own per initiator name, so only the default is meaningful.
  if (const std::string* iface = Find(ctx, kIscsiInterface);
      iface != nullptr && !iface->empty() && *iface != "default") {
    return InvalidArgument(where + kIscsiInterface + " " + Quote(*iface) +
                           " is not supported (only \"default\"; use initiatorName to choose the initiator)");
  }
  out[publish_context::kChapRequired] = chap_session ? "true" : "false";
  out[publish_context::kReadOnly] = read_only || attr_read_only ? "true" : "false";
  out[publish_context::kTransport] = "iscsi";
  out[publish_context::kStatic] = "true";
  return out;
}

}  // namespace blockcsi
