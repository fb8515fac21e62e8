#include "backend/backend_config.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <utility>

#include <ini.h>

#include "backend/local/pool.h"
#include "backend/routing/routing_backend.h"
#include "common/atomic_file.h"
#include "common/duration.h"
#include "common/strings.h"
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
// inih (Debian's build) reads lines of at most 199 characters.
constexpr size_t kMaxLineLen = 200;

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// Which keys belong to which kind; `kind` and `default` belong to all.
const std::set<std::string_view>& KeysOf(std::string_view kind) {
  static const std::set<std::string_view> local{
      "pool",        "tgt-control-port",   "portal",           "iqn-prefix", "target", "configfs-root", "tgtadm",
      "tgt-control", "reconcile-interval", "overcommit-ratio", "max-volumes"};
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
  } else if (key == "max-volumes") {
    size_t count = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), count);
    if (ec != std::errc() || end != v.data() + v.size()) {
      return InvalidArgument("want a number of volumes (0: no limit), not \"" + v + "\"");
    }
    o.max_volumes = count;
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

// inih reads the file twice: the first pass learns the sections, their kind
// and default (`kind` may come after the keys it governs), the second applies
// every key knowing its section's kind. inih takes its lines from ReadLine,
// which counts them, so that every message names its line, and notices
// section headers, so that a section given twice is seen even when its two
// headers are next to each other (inih passes only the section's name).
struct Section {
  std::string name;
  std::string header;  // as inih passes it
  bool is_default = false;
  std::string zone;  // "" until a `zone` key
  std::string kind;
  std::set<std::string> seen;  // keys applied so far (pass 2)
};

struct ParseState {
  std::string where;  // the file, for messages
  int pass = 1;
  std::string_view rest;    // what ReadLine has not given inih yet
  int line = 0;             // the line inih works on
  bool new_header = false;  // a "[...]" line since the last key
  size_t opened = 0;        // pass 2: sections opened so far
  size_t section = 0;       // pass 2: index of the section of the last key
  std::vector<Section> sections;
  int error_line = 0;  // of the first handler error
  std::string error;   // its message, without the location
  BackendConfig config;
};

char* ReadLine(char* out, int size, void* stream) {
  auto& state = *static_cast<ParseState*>(stream);
  if (state.rest.empty()) return nullptr;
  size_t nl = state.rest.find('\n');
  std::string_view line = state.rest.substr(0, nl == std::string_view::npos ? nl : nl + 1);
  state.rest.remove_prefix(line.size());
  ++state.line;
  if (TrimWhitespace(line).starts_with('[')) state.new_header = true;
  // ParseBackendConfig refused longer lines before inih saw any.
  size_t n = std::min(line.size(), static_cast<size_t>(size - 1));
  std::copy_n(line.data(), n, out);
  out[n] = '\0';
  return out;
}

int Fail(ParseState& state, std::string message) {
  if (state.error.empty()) {
    state.error = std::move(message);
    state.error_line = state.line;
  }
  return 0;
}

// Pass 1, the first key after a header: the section it opens.
int OpenSection(ParseState& state, std::string_view header) {
  if (!header.starts_with("backend ") && !header.starts_with("backend\t")) {
    return Fail(state, "want a section \"[backend NAME]\", not \"[" + std::string(header) + "]\"");
  }
  std::string name(TrimWhitespace(header.substr(7)));
  if (!IsValidBackendName(name)) {
    return Fail(state, "backend name \"" + name + "\": want 1-" + std::to_string(kMaxNameLen) +
                           " of [a-z0-9-], starting and ending with a letter or digit");
  }
  for (const auto& s : state.sections) {
    if (s.name == name) return Fail(state, "backend \"" + name + "\" is defined twice");
  }
  Section section;
  section.name = name;
  section.header = std::string(header);
  state.sections.push_back(std::move(section));
  return 1;
}

// Pass 1: a section's kind and default; every other key needs a value.
int LearnKey(ParseState& state, std::string_view header, std::string_view key, std::string_view value) {
  if (header.empty()) {
    return Fail(state, "key \"" + std::string(key) + "\" before the first [backend NAME] section");
  }
  if (std::exchange(state.new_header, false) && !OpenSection(state, header)) return 0;
  Section& section = state.sections.back();
  if (key == "kind") {
    if (!section.kind.empty()) return Fail(state, "\"kind\" given twice");
    if (value != "local" && value != "remote" && value != "rbd") {
      return Fail(state, "kind must be local, remote or rbd, not \"" + std::string(value) + "\"");
    }
    section.kind = std::string(value);
  } else if (key == "default") {
    auto b = ParseBool(value);
    if (!b.ok()) return Fail(state, "default: " + b.status().message());
    section.is_default = *b;
  } else if (key == "zone") {
    if (!section.zone.empty()) return Fail(state, "\"zone\" given twice");
    if (Status st = ValidateZoneName(value, "key \"zone\""); !st.ok()) return Fail(state, st.message());
    section.zone = std::string(value);
  } else if (value.empty()) {
    return Fail(state, "key \"" + std::string(key) + "\" has no value");
  }
  return 1;
}

// Pass 2: every other key, checked against its section's kind and applied.
int ApplySectionKey(ParseState& state, std::string_view key, std::string_view value) {
  // Pass 1 made a section of every header followed by a key, in this order.
  if (std::exchange(state.new_header, false)) state.section = state.opened++;
  if (key == "kind" || key == "default" || key == "zone") return 1;
  Section& section = state.sections[state.section];
  if (!KeysOf(section.kind).contains(key)) {
    return Fail(state, "key \"" + std::string(key) + "\" is not an option of kind " + section.kind);
  }
  if (key != "portal" && !section.seen.insert(std::string(key)).second) {
    return Fail(state, "key \"" + std::string(key) + "\" given twice");
  }
  if (Status st = ApplyKey(key, value, state.config.backends[state.section].options); !st.ok()) {
    return Fail(state, std::string(key) + ": " + st.message());
  }
  return 1;
}

int OnKey(void* user, const char* section, const char* key, const char* value) {
  auto& state = *static_cast<ParseState*>(user);
  if (state.pass == 1) return LearnKey(state, TrimWhitespace(section), key, value);
  return ApplySectionKey(state, key, value);
}

// inih reports where it stopped, not why: a line it could not read is an
// unclosed section header or a line without "=".
std::string SyntaxError(std::string_view text, int line_no) {
  std::vector<std::string> lines = SplitString(text, '\n');
  std::string_view line = line_no <= static_cast<int>(lines.size()) ? TrimWhitespace(lines[line_no - 1]) : "";
  if (line.starts_with('[') && !line.ends_with(']')) return "section header without \"]\"";
  return "want \"key = value\"";
}

// One pass of inih over `text`; the first error names the file and line.
Status RunPass(std::string_view text, ParseState& state) {
  state.rest = text;
  state.line = 0;
  state.new_header = false;
  state.opened = 0;
  int stopped = ini_parse_stream(ReadLine, &state, OnKey, &state);
  if (stopped < 0) return InvalidArgument(state.where + ": cannot be read");
  if (stopped > 0 && (state.error.empty() || stopped < state.error_line)) {
    return InvalidArgument(state.where + ":" + std::to_string(stopped) + ": " + SyntaxError(text, stopped));
  }
  if (!state.error.empty()) {
    return InvalidArgument(state.where + ":" + std::to_string(state.error_line) + ": " + state.error);
  }
  return OkStatus();
}

}  // namespace

bool IsValidBackendName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLen || !IsAlnum(name.front()) || !IsAlnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return IsAlnum(c) || c == '-'; });
}

StatusOr<BackendConfig> ParseBackendConfig(std::string_view text, std::string_view source) {
  const std::string where(source);
  // inih cuts longer lines in two; say so instead of reading half a path.
  int line_no = 0;
  for (const std::string& line : SplitString(text, '\n')) {
    ++line_no;
    if (line.size() >= kMaxLineLen) {
      return InvalidArgument(where + ":" + std::to_string(line_no) + ": line longer than " +
                             std::to_string(kMaxLineLen - 1) + " characters");
    }
  }
  ParseState state;
  state.where = where;
  BLOCKCSI_RETURN_IF_ERROR(RunPass(text, state));
  if (state.sections.empty()) return InvalidArgument(where + ": no [backend NAME] section");
  for (const auto& section : state.sections) {
    if (section.kind.empty()) {
      return InvalidArgument(where + ": backend \"" + section.name + "\" has no \"kind\"");
    }
    NamedBackendOptions named;
    named.name = section.name;
    named.options.kind = section.kind;
    named.zone = section.zone;
    state.config.backends.push_back(std::move(named));
  }
  state.pass = 2;
  BLOCKCSI_RETURN_IF_ERROR(RunPass(text, state));

  BackendConfig& config = state.config;
  for (size_t i = 0; i < state.sections.size(); ++i) {
    const Section& section = state.sections[i];
    const std::string what = where + ": backend \"" + section.name + "\"";
    if (section.kind == "rbd" &&
        section.name.size() + config.backends[i].options.rbd_pool.size() > kMaxRbdNamePlusPool) {
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
  }
  if (config.default_name.empty()) {
    if (config.backends.size() != 1) {
      return InvalidArgument(where + ": no backend says \"default = true\" (exactly one must)");
    }
    config.default_name = config.backends.front().name;
  }
  return std::move(config);
}

StatusOr<BackendConfig> LoadBackendConfig(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return InvalidArgument("--backend-config " + path + ": " + text.status().message());
  return ParseBackendConfig(*text, path);
}

StatusOr<std::shared_ptr<VolumeBackend>> MakeControllerBackend(const BackendOptions& options,
                                                               const std::shared_ptr<Host>& host) {
  if (options.kind == "rbd" && options.ceph_user.empty()) {
    if (!options.ceph_keyring.empty()) return InvalidArgument("--ceph-keyring needs --ceph-user");
#ifdef BLOCKCSI_WITH_RBD
    RbdBackendOptions rbd;
    rbd.ceph_conf = options.ceph_conf;
    rbd.pool = options.rbd_pool;
    return MakeRbdSecretBackend(rbd);
#endif
  }
  return MakeBackend(options, host);
}

StatusOr<std::shared_ptr<VolumeBackend>> MakeRoutedBackends(const BackendConfig& config,
                                                            const std::shared_ptr<Host>& host) {
  std::vector<NamedBackend> backends;
  for (const auto& named : config.backends) {
    auto backend = MakeControllerBackend(named.options, host);
    if (!backend.ok()) return backend.status().WithContext("backend \"" + named.name + "\"");
    TopologySegments topology;
    if (!named.zone.empty()) topology[kTopologyZoneKey] = named.zone;
    backends.push_back({named.name, *backend, std::move(topology)});
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto routing, RoutingBackend::Make(std::move(backends), config.default_name));
  return std::shared_ptr<VolumeBackend>(std::move(routing));
}

}  // namespace blockcsi
