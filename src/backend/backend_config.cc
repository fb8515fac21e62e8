#include "backend/backend_config.h"

#include <algorithm>
#include <charconv>
#include <set>

#include "backend/local/pool.h"
#include "backend/routing/routing_backend.h"
#include "common/atomic_file.h"
#include "common/duration.h"
#include "common/topology.h"
#ifdef BLOCKCSI_WITH_RBD
#include "backend/rbd/rbd_secret_backend.h"
#endif

namespace blockcsi {
namespace {

constexpr size_t kMaxNameLen = 32;
// rbd snapshot ids are at most 127 bytes with a 40-character pool
// (rbd_backend.h); "<name>~" must fit in what the pool leaves.
constexpr size_t kMaxRbdNamePlusPool = 40;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// Which keys belong to which kind; `kind` and `default` belong to all.
const std::set<std::string_view>& KeysOf(std::string_view kind) {
  static const std::set<std::string_view> local{
      "pool",          "tgt-control-port", "portal",      "iqn-prefix",         "target",
      "configfs-root", "tgtadm",           "tgt-control", "reconcile-interval", "overcommit-ratio"};
  static const std::set<std::string_view> remote{"target-agent", "tls-cert", "tls-key", "tls-ca", "insecure"};
  static const std::set<std::string_view> rbd{"ceph-conf", "ceph-user", "ceph-keyring", "rbd-pool"};
  static const std::set<std::string_view> none;
  if (kind == "local") return local;
  if (kind == "remote") return remote;
  if (kind == "rbd") return rbd;
  return none;
}

StatusOr<bool> ParseBool(std::string_view value) {
  if (value == "true") return true;
  if (value == "false") return false;
  return InvalidArgument("want true or false, not \"" + std::string(value) + "\"");
}

// One key of one section, applied to its options.
Status ApplyKey(std::string_view key, std::string_view value, BackendOptions& o) {
  std::string v(value);
  if (key == "pool") {
    o.pool_dir = v;
  } else if (key == "tgt-control-port") {
    int port = -1;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), port);
    if (ec != std::errc() || end != v.data() + v.size() || port < 0 || port > 65535) {
      return InvalidArgument("want a port 0-65535, not \"" + v + "\"");
    }
    o.tgt_control_port = port;
  } else if (key == "tgtadm") {
    o.tgtadm = v;
  } else if (key == "tgt-control") {
    o.tgt_control = v;
  } else if (key == "overcommit-ratio") {
    BLOCKCSI_ASSIGN_OR_RETURN(o.overcommit_ratio, ParseOvercommitRatio(v));
  } else if (key == "portal") {
    o.portals.push_back(v);
  } else if (key == "iqn-prefix") {
    o.iqn_prefix = v;
  } else if (key == "target") {
    o.target = v;
  } else if (key == "configfs-root") {
    o.configfs_root = v;
  } else if (key == "reconcile-interval") {
    BLOCKCSI_ASSIGN_OR_RETURN(o.reconcile_interval, ParseDuration(v));
  } else if (key == "target-agent") {
    o.target_agent = v;
  } else if (key == "tls-cert") {
    o.tls_cert = v;
  } else if (key == "tls-key") {
    o.tls_key = v;
  } else if (key == "tls-ca") {
    o.tls_ca = v;
  } else if (key == "insecure") {
    BLOCKCSI_ASSIGN_OR_RETURN(o.insecure, ParseBool(value));
  } else if (key == "ceph-conf") {
    o.ceph_conf = v;
  } else if (key == "ceph-user") {
    o.ceph_user = v;
  } else if (key == "ceph-keyring") {
    o.ceph_keyring = v;
  } else if (key == "rbd-pool") {
    o.rbd_pool = v;
  }
  return OkStatus();
}

struct Section {
  std::string name;
  int line = 0;
  bool is_default = false;
  bool has_default = false;
  std::string zone;
  int zone_line = 0;
  // Kept until `kind` is known (it may come after other keys).
  std::vector<std::tuple<int, std::string, std::string>> keys;
  std::string kind;
};

}  // namespace

bool IsValidBackendName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLen || !IsAlnum(name.front()) || !IsAlnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return IsAlnum(c) || c == '-'; });
}

StatusOr<BackendConfig> ParseBackendConfig(std::string_view text, std::string_view source) {
  const std::string where(source);
  auto at = [&](int line) { return where + ":" + std::to_string(line); };
  std::vector<Section> sections;
  int line_no = 0;
  while (!text.empty()) {
    ++line_no;
    size_t nl = text.find('\n');
    std::string_view line = Trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') return InvalidArgument(at(line_no) + ": section header without \"]\"");
      std::string_view inner = Trim(line.substr(1, line.size() - 2));
      if (!inner.starts_with("backend ") && !inner.starts_with("backend\t")) {
        return InvalidArgument(at(line_no) + ": want a section \"[backend NAME]\", not \"" + std::string(line) + "\"");
      }
      std::string name(Trim(inner.substr(7)));
      if (!IsValidBackendName(name)) {
        return InvalidArgument(at(line_no) + ": backend name \"" + name + "\": want 1-" + std::to_string(kMaxNameLen) +
                               " of [a-z0-9-], starting and ending with a letter or digit");
      }
      for (const auto& s : sections) {
        if (s.name == name) {
          return InvalidArgument(at(line_no) + ": backend \"" + name + "\" is defined twice (first at line " +
                                 std::to_string(s.line) + ")");
        }
      }
      Section section;
      section.name = name;
      section.line = line_no;
      sections.push_back(std::move(section));
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) return InvalidArgument(at(line_no) + ": want \"key = value\"");
    std::string key(Trim(line.substr(0, eq)));
    std::string value(Trim(line.substr(eq + 1)));
    if (sections.empty()) {
      return InvalidArgument(at(line_no) + ": key \"" + key + "\" before the first [backend NAME] section");
    }
    Section& section = sections.back();
    if (key == "kind") {
      if (!section.kind.empty()) return InvalidArgument(at(line_no) + ": \"kind\" given twice");
      if (value != "local" && value != "remote" && value != "rbd") {
        return InvalidArgument(at(line_no) + ": kind must be local, remote or rbd, not \"" + value + "\"");
      }
      section.kind = value;
    } else if (key == "default") {
      auto b = ParseBool(value);
      if (!b.ok()) return b.status().WithContext(at(line_no) + ": default");
      section.is_default = *b;
      section.has_default = true;
    } else if (key == "zone") {
      if (section.zone_line != 0) return InvalidArgument(at(line_no) + ": \"zone\" given twice");
      if (Status st = ValidateZoneName(value, at(line_no)); !st.ok()) return st;
      section.zone = value;
      section.zone_line = line_no;
    } else {
      if (value.empty()) return InvalidArgument(at(line_no) + ": key \"" + key + "\" has no value");
      section.keys.emplace_back(line_no, key, value);
    }
  }
  if (sections.empty()) return InvalidArgument(where + ": no [backend NAME] section");

  BackendConfig config;
  for (const auto& section : sections) {
    const std::string what = where + ": backend \"" + section.name + "\"";
    if (section.kind.empty()) {
      return InvalidArgument(at(section.line) + ": backend \"" + section.name + "\" has no \"kind\"");
    }
    NamedBackendOptions named;
    named.name = section.name;
    named.options.kind = section.kind;
    named.zone = section.zone;
    std::set<std::string> seen;
    for (const auto& [line, key, value] : section.keys) {
      if (!KeysOf(section.kind).contains(key)) {
        return InvalidArgument(at(line) + ": key \"" + key + "\" is not an option of kind " + section.kind);
      }
      if (key != "portal" && !seen.insert(key).second) {
        return InvalidArgument(at(line) + ": key \"" + key + "\" given twice");
      }
      if (Status st = ApplyKey(key, value, named.options); !st.ok()) return st.WithContext(at(line) + ": " + key);
    }
    if (section.kind == "rbd" && section.name.size() + named.options.rbd_pool.size() > kMaxRbdNamePlusPool) {
      return InvalidArgument(what + ": name and rbd-pool together are longer than " +
                             std::to_string(kMaxRbdNamePlusPool) +
                             " characters; the ids would not fit CSI's 128 bytes");
    }
    if (section.is_default) {
      if (!config.default_name.empty()) {
        return InvalidArgument(what + ": a second default (\"" + config.default_name + "\" is one already)");
      }
      config.default_name = section.name;
    }
    config.backends.push_back(std::move(named));
  }
  if (config.default_name.empty()) {
    if (config.backends.size() != 1) {
      return InvalidArgument(where + ": no backend says \"default = true\" (exactly one must)");
    }
    config.default_name = config.backends.front().name;
  }
  return config;
}

StatusOr<BackendConfig> LoadBackendConfig(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return InvalidArgument("--backend-config " + path + ": " + text.status().message());
  return ParseBackendConfig(*text, path);
}

StatusOr<std::shared_ptr<VolumeBackend>> MakeControllerBackend(const BackendOptions& options) {
  if (options.kind == "rbd" && options.ceph_user.empty()) {
    if (!options.ceph_keyring.empty()) return InvalidArgument("--ceph-keyring needs --ceph-user");
#ifdef BLOCKCSI_WITH_RBD
    RbdBackendOptions rbd;
    rbd.ceph_conf = options.ceph_conf;
    rbd.pool = options.rbd_pool;
    return MakeRbdSecretBackend(rbd);
#endif
  }
  return MakeBackend(options);
}

StatusOr<std::shared_ptr<VolumeBackend>> MakeRoutedBackends(const BackendConfig& config) {
  std::vector<NamedBackend> backends;
  for (const auto& named : config.backends) {
    auto backend = MakeControllerBackend(named.options);
    if (!backend.ok()) return backend.status().WithContext("backend \"" + named.name + "\"");
    TopologySegments topology;
    if (!named.zone.empty()) topology[kTopologyZoneKey] = named.zone;
    backends.push_back({named.name, *backend, std::move(topology)});
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto routing, RoutingBackend::Make(std::move(backends), config.default_name));
  return std::shared_ptr<VolumeBackend>(std::move(routing));
}

}  // namespace blockcsi
