#include "attach/krbd_connector.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <optional>
#include <set>

#include "attach/attach_record_store.h"
#include "common/logging.h"

namespace blockcsi {
namespace {

constexpr char kSysBusRbd[] = "/sys/bus/rbd/devices/";
constexpr char kHeadSnap[] = "-";  // current_snap of a mapping of the image itself
constexpr char kV1Port[] = "6789";

// rbd exits with the errno of what failed (tools/rbd/action/Kernel.cc).
constexpr int kEPERM = 1;
constexpr int kENOENT = 2;
constexpr int kENXIO = 6;
constexpr int kEACCES = 13;
constexpr int kEBUSY = 16;
constexpr int kEINVAL = 22;
constexpr int kECONNREFUSED = 111;
constexpr int kETIMEDOUT = 110;

std::string Quoted(const std::string& volume_id) { return "volume \"" + volume_id + "\""; }

bool AllDigits(std::string_view s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos; }

// The lines rbd itself wrote ("rbd: ..."), without librados' timestamped
// log noise; what an operator needs in an error message. Never holds a
// secret: rbd does not print the key, and the key file's path is no secret.
std::string RbdErrorText(const CommandResult& r) {
  std::string out;
  size_t pos = 0;
  const std::string& text = r.stderr_text;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    if (line.starts_with("rbd: ")) {
      if (!out.empty()) out += "; ";
      out += line;
    }
    pos = end + 1;
  }
  if (out.empty()) out = FirstMeaningfulLine(text);
  if (out.size() > 600) out = out.substr(0, 600) + "...";
  if (out.empty()) out = "exit code " + std::to_string(r.exit_code);
  return out;
}

// Splits at commas outside brackets: "[v2:a,v1:b],c" → "[v2:a,v1:b]", "c".
std::vector<std::string_view> SplitTopLevel(std::string_view text) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '[') ++depth;
    if (text[i] == ']') --depth;
    if (text[i] == ',' && depth == 0) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(text.substr(start));
  return parts;
}

// One address of an entry: "v1:10.0.0.1:6789/0", "10.0.0.1", "[::1]:6789".
// Returns the v1 "ip:port", "" for a msgr2-only address.
StatusOr<std::string> LegacyAddress(std::string_view addr, std::string_view whole) {
  auto bad = [&] {
    return InvalidArgument("monitor address \"" + std::string(addr) + "\" in \"" + std::string(whole) +
                           "\" is malformed");
  };
  bool v2 = false;
  if (addr.starts_with("v1:")) {
    addr.remove_prefix(3);
  } else if (addr.starts_with("v2:")) {
    addr.remove_prefix(3);
    v2 = true;
  } else if (addr.starts_with("any:")) {
    addr.remove_prefix(4);
  }
  if (auto slash = addr.find('/'); slash != std::string_view::npos) {
    if (!AllDigits(addr.substr(slash + 1))) return bad();
    addr = addr.substr(0, slash);  // the nonce
  }
  if (addr.empty()) return bad();
  if (v2) return std::string();
  std::string host;
  std::string port;
  if (addr.front() == '[') {
    auto close = addr.find(']');
    if (close == std::string_view::npos || close == 1) return bad();
    host = std::string(addr.substr(0, close + 1));
    std::string_view rest = addr.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':' || !AllDigits(rest.substr(1))) return bad();
      port = std::string(rest.substr(1));
    }
  } else if (std::count(addr.begin(), addr.end(), ':') > 1) {
    host = "[" + std::string(addr) + "]";  // a bare IPv6 address has no port
  } else if (auto colon = addr.find(':'); colon != std::string_view::npos) {
    host = std::string(addr.substr(0, colon));
    if (!AllDigits(addr.substr(colon + 1))) return bad();
    port = std::string(addr.substr(colon + 1));
  } else {
    host = std::string(addr);
  }
  if (host.empty() || host == "[]") return bad();
  if (port.empty()) port = kV1Port;
  int value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value < 1 || value > 65535) return bad();
  return host + ":" + port;
}

// <state_dir>/krbd/<escaped volume id>.key: one name per volume (the facade
// serialises a volume's calls), so a crash's leftover is found again.
std::string KeyFilePath(const std::string& state_dir, const std::string& volume_id) {
  std::string name = EscapeVolumeIdForFile(volume_id);
  if (name.size() > 200) {
    // File names stop at 255 bytes; the hash only has to tell volumes apart
    // within one plugin run (Reconcile removes every leftover at start).
    name = name.substr(0, 150) + "-" + std::to_string(std::hash<std::string>{}(volume_id));
  }
  return state_dir + "/krbd/" + name + ".key";
}

// The cephx key in a file that only root can read, for exactly as long as
// the object lives (every return path of the map, including errors). The key
// goes to a 0600 temp file that is renamed into place (Host::ReplaceFile): a
// symlink someone planted at the path is replaced, never followed, and a
// crash leaves "<name>.key" or "<name>.key.tmp-<n>", which the next
// Reconcile removes. The key is only ever in the file, never in an error.
class KeyFile {
 public:
  KeyFile(const KeyFile&) = delete;
  KeyFile& operator=(const KeyFile&) = delete;
  ~KeyFile() {
    if (Status st = host_.RemovePath(path_); !st.ok()) {
      LogWarn("cannot remove the cephx key file; Reconcile removes it", {{"file", path_}, {"error", st.ToString()}});
    }
  }

  static StatusOr<std::unique_ptr<KeyFile>> Create(const Host& host, const std::string& path, const std::string& key,
                                                   const std::string& volume_id) {
    std::string dir = path.substr(0, path.rfind('/'));
    if (Status st = host.MakeDirectory(dir, 0700); !st.ok()) {
      return Status(st.code(), Quoted(volume_id) + ": the cephx key directory: " + st.message());
    }
    std::unique_ptr<KeyFile> file(new KeyFile(host, path));  // removes it on every error below
    if (Status st = host.ReplaceFile(path, key); !st.ok()) {
      return Status(st.code(), Quoted(volume_id) + ": write the cephx key file: " + st.message());
    }
    return file;
  }

  const std::string& path() const { return path_; }

 private:
  KeyFile(const Host& host, std::string path) : host_(host), path_(std::move(path)) {}
  const Host& host_;
  std::string path_;
};

class KrbdConnector final : public Connector {
 public:
  explicit KrbdConnector(KrbdConnectorOptions o) : options_(std::move(o)) {
    if (!options_.executor) options_.executor = MakeProcessExecutor();
  }

  std::string family() const override { return "krbd"; }

  void Prepare(const AttachSpec& spec, AttachRecord* record) override {
    // The only thing an attempt leaves outside the kernel is the key file,
    // and only if the plugin dies during the map.
    if (!spec.rbd.key.empty()) record->connector_state["keyfile"] = KeyFilePath(options_.state_dir, spec.volume_id);
  }

  StatusOr<ConnectResult> Connect(const AttachSpec& spec, AttachRecord* record) override {
    if (spec.transport != "rbd") {
      return InvalidArgument(Quoted(spec.volume_id) + ": the krbd connector serves transport \"rbd\", not \"" +
                             spec.transport + "\"");
    }
    const std::string where = Quoted(spec.volume_id) + ": ";
    KrbdMapping mapping;
    if (auto existing = FindHeadMapping(spec.rbd.pool, spec.rbd.image)) {
      // A retry, or a plugin that died between map and record: the kernel
      // mapping is what we made, so it is used instead of mapping twice.
      LogInfo("RBD image already mapped; reusing", {{"volume_id", spec.volume_id},
                                                    {"image", Spec(spec.rbd.pool, spec.rbd.image)},
                                                    {"device", existing->device()}});
      mapping = *existing;
    } else {
      BLOCKCSI_ASSIGN_OR_RETURN(std::string id, Map(spec));
      // Named before anything else can fail, so the facade's Disconnect
      // finds the mapping even when the record has no device yet.
      record->connector_state["rbd_dev_id"] = id;
      auto read = ReadKrbdMapping(*options_.host_fs, id);
      if (!read.ok()) return read.status().WithContext(where + "read the new mapping /dev/rbd" + id + " in sysfs");
      mapping = *read;
    }
    record->connector_state["rbd_dev_id"] = mapping.id;
    if (mapping.pool != spec.rbd.pool || mapping.image != spec.rbd.image || mapping.snap != kHeadSnap ||
        !mapping.pool_ns.empty()) {
      return FailedPrecondition(where + mapping.device() + " maps " + Describe(mapping) + ", not " +
                                Spec(spec.rbd.pool, spec.rbd.image));
    }
    // A reused mapping was made for an earlier request; its access mode
    // must be the one asked for now (a read-only mapping refuses writes,
    // a writable one would let a read-only publish write).
    if (auto ro = ReadTrimmed(*options_.host_fs, "/sys/block/rbd" + mapping.id + "/ro"); ro.ok()) {
      bool mapped_ro = *ro == "1";
      if (mapped_ro != spec.read_only) {
        return FailedPrecondition(where + mapping.device() + " is mapped " + (mapped_ro ? "read-only" : "read-write") +
                                  " but the volume is published " + (spec.read_only ? "read-only" : "read-write") +
                                  "; unstage it first");
      }
    }
    if (!options_.host_fs->Exists(mapping.device())) {
      return Unavailable(where + "the kernel mapped " + Spec(spec.rbd.pool, spec.rbd.image) + " as rbd" + mapping.id +
                         " but " + mapping.device() + " does not exist (is the host's /dev visible to the plugin?)");
    }
    ConnectResult result;
    result.device_path = mapping.device();
    result.size_bytes = mapping.size_bytes;
    result.identity = IdentityOf(mapping);
    LogInfo("RBD device ready", {{"volume_id", spec.volume_id},
                                 {"image", Spec(spec.rbd.pool, spec.rbd.image)},
                                 {"device", result.device_path},
                                 {"image_id", mapping.image_id}});
    return result;
  }

  Status Disconnect(const AttachRecord& record) override {
    RemoveKeyLeftover(record);
    std::optional<KrbdMapping> mapping = MappingOfRecord(record);
    if (!mapping) {
      LogInfo("RBD image is not mapped; nothing to unmap",
              {{"volume_id", record.volume_id}, {"image", Spec(record.rbd_pool, record.rbd_image)}});
      return OkStatus();
    }
    const std::string device = mapping->device();
    Command unmap(options_.rbd_binary);
    unmap.Arg("device").Arg("unmap");
    if (!options_.wait_for_udev) unmap.Arg("--options").Arg("noudev");
    unmap.Arg(device).Timeout(options_.command_timeout);
    auto r = options_.executor->Run(unmap);
    if (!r.ok()) return r.status().WithContext(Quoted(record.volume_id) + ": unmap " + device);
    if (r->ok()) {
      LogInfo("RBD image unmapped", {{"volume_id", record.volume_id}, {"device", device}});
      return OkStatus();
    }
    const std::string text = RbdErrorText(*r);
    if (r->exit_code == kEINVAL && (text.find("is not a block device") != std::string::npos ||
                                    text.find("is not an rbd device") != std::string::npos ||
                                    text.find("not a mapped image") != std::string::npos)) {
      LogInfo("RBD device already unmapped", {{"volume_id", record.volume_id}, {"device", device}});
      return OkStatus();
    }
    if (r->exit_code == kEBUSY) {
      return FailedPrecondition(Quoted(record.volume_id) + ": " + device +
                                " is busy (still mounted or held open on this node); not unmapping it: " + text);
    }
    return Unavailable(Quoted(record.volume_id) + ": rbd device unmap " + device + " failed: " + text);
  }

  StatusOr<LunIdentity> ReadIdentity(const AttachRecord& record) override {
    BLOCKCSI_ASSIGN_OR_RETURN(std::string id, DevIdOf(record));
    auto mapping = ReadKrbdMapping(*options_.host_fs, id);
    if (!mapping.ok()) return mapping.status().WithContext(Quoted(record.volume_id));
    return IdentityOf(*mapping);
  }

  StatusOr<uint64_t> Rescan(AttachRecord* record) override {
    BLOCKCSI_ASSIGN_OR_RETURN(std::string id, DevIdOf(*record));
    // krbd picks up a resize from the header watch by itself; `refresh`
    // makes it re-read the header now instead of racing the notification.
    std::string refresh = kSysBusRbd + id + "/refresh";
    if (options_.host_fs->Exists(refresh)) {
      Status st = options_.host_fs->WriteFile(refresh, "1");
      if (!st.ok()) return Unavailable(Quoted(record->volume_id) + ": refresh /dev/rbd" + id + ": " + st.message());
    }
    auto mapping = ReadKrbdMapping(*options_.host_fs, id);
    if (!mapping.ok()) return mapping.status().WithContext(Quoted(record->volume_id));
    if (mapping->image_id != record->expected_serial) {
      return FailedPrecondition(Quoted(record->volume_id) + ": /dev/rbd" + id + " now maps image id " +
                                mapping->image_id + ", not " + record->expected_serial);
    }
    return mapping->size_bytes;
  }

  AttachHealth Check(const AttachRecord& record) override {
    auto id = DevIdOf(record);
    if (!id.ok()) return {true, id.status().message()};
    std::string device = "/dev/rbd" + *id;
    if (!options_.host_fs->Exists(device)) return {true, "device " + device + " is gone"};
    auto mapping = ReadKrbdMapping(*options_.host_fs, *id);
    if (!mapping.ok()) return {true, device + " is no longer mapped by the kernel RBD driver"};
    if (mapping->pool != record.rbd_pool || mapping->image != record.rbd_image) {
      return {true, device + " now maps " + Describe(*mapping) + ", not " + Spec(record.rbd_pool, record.rbd_image)};
    }
    if (mapping->image_id != record.expected_serial) {
      return {true, device + " maps image id " + mapping->image_id + " but the volume's image id is " +
                        record.expected_serial + " (the image was re-created?)"};
    }
    return {};
  }

  Status Reconcile(std::vector<AttachRecord>* records) override {
    RemoveAllKeyLeftovers();
    std::vector<KrbdMapping> mappings = ListKrbdMappings(*options_.host_fs);
    std::set<std::string> claimed;  // mapping ids some record names
    for (AttachRecord& record : *records) {
      if (record.transport != "rbd") continue;
      std::optional<KrbdMapping> found;
      for (const auto& m : mappings) {
        if (IsHeadMappingOf(m, record.rbd_pool, record.rbd_image)) {
          found = m;
          break;
        }
      }
      if (!found) {
        if (record.state == kAttachStateAttached) {
          LogWarn("attached RBD volume is no longer mapped (node rebooted or unmapped by hand)",
                  {{"volume_id", record.volume_id}, {"device", record.device_path}});
        }
        continue;
      }
      claimed.insert(found->id);
      if (record.state != kAttachStateAttached || found->device() == record.device_path) continue;
      if (found->image_id != record.expected_serial) {
        LogWarn("RBD image of an attached volume is mapped with another image id; leaving the record",
                {{"volume_id", record.volume_id}, {"device", found->device()}, {"image_id", found->image_id}});
        continue;
      }
      LogInfo("RBD device of an attached volume moved; updating its record",
              {{"volume_id", record.volume_id}, {"was", record.device_path}, {"now", found->device()}});
      record.device_path = found->device();
      record.connector_state["rbd_dev_id"] = found->id;
      record.size_bytes = found->size_bytes;
    }
    for (const auto& m : mappings) {
      if (claimed.count(m.id) > 0 || options_.image_prefix.empty() || !m.image.starts_with(options_.image_prefix))
        continue;
      // Another workload (or an operator) may be using it: report, never unmap.
      LogWarn(
          "RBD mapping of one of our images with no attach record (left by a crash or mapped by hand); not "
          "touching it",
          {{"device", m.device()}, {"image", Describe(m)}, {"image_id", m.image_id}});
    }
    return OkStatus();
  }

 private:
  static std::string Spec(const std::string& pool, const std::string& image) { return pool + "/" + image; }
  static std::string Describe(const KrbdMapping& m) {
    std::string out = m.pool + "/" + (m.pool_ns.empty() ? "" : m.pool_ns + "/") + m.image;
    if (m.snap != kHeadSnap) out += "@" + m.snap;
    return out;
  }
  static bool IsHeadMappingOf(const KrbdMapping& m, const std::string& pool, const std::string& image) {
    return m.pool == pool && m.image == image && m.snap == kHeadSnap && m.pool_ns.empty();
  }
  static LunIdentity IdentityOf(const KrbdMapping& m) {
    LunIdentity identity;
    identity.serial = m.image_id;
    identity.other.push_back("rbd:" + Describe(m));
    return identity;
  }

  std::optional<KrbdMapping> FindHeadMapping(const std::string& pool, const std::string& image) const {
    for (auto& m : ListKrbdMappings(*options_.host_fs)) {
      if (IsHeadMappingOf(m, pool, image)) return m;
    }
    return std::nullopt;
  }

  // The kernel device id the record names: connector_state, else the device path.
  static StatusOr<std::string> DevIdOf(const AttachRecord& record) {
    auto it = record.connector_state.find("rbd_dev_id");
    if (it != record.connector_state.end() && AllDigits(it->second)) return it->second;
    std::string_view path = record.device_path;
    if (path.starts_with("/dev/rbd") && AllDigits(path.substr(8))) return std::string(path.substr(8));
    return NotFound(Quoted(record.volume_id) + ": the attach record names no RBD device");
  }

  // The mapping to undo: the recorded device while it still maps the
  // record's image (ids are reused after an unmap), else any head mapping
  // of that image (the device was never recorded: a crash or failed attach).
  std::optional<KrbdMapping> MappingOfRecord(const AttachRecord& record) const {
    if (auto id = DevIdOf(record); id.ok()) {
      auto m = ReadKrbdMapping(*options_.host_fs, *id);
      if (m.ok() && IsHeadMappingOf(*m, record.rbd_pool, record.rbd_image)) return *m;
    }
    if (record.rbd_pool.empty() || record.rbd_image.empty()) return std::nullopt;
    return FindHeadMapping(record.rbd_pool, record.rbd_image);
  }

  StatusOr<std::string> Map(const AttachSpec& spec) {
    const std::string where = Quoted(spec.volume_id) + ": ";
    Command map(options_.rbd_binary);
    map.Arg("device").Arg("map").Arg("--pool").Arg(spec.rbd.pool).Arg("--id").Arg(spec.rbd.user);
    if (!spec.rbd.monitors.empty()) {
      auto mons = KrbdMonitorAddresses(spec.rbd.monitors);
      if (!mons.ok()) return InvalidArgument(where + "publish_context cephMonitors: " + mons.status().message());
      std::string joined;
      for (const auto& m : *mons) joined += (joined.empty() ? "" : ",") + m;
      map.Arg("-m").Arg(joined);
    }
    std::unique_ptr<KeyFile> key;
    if (!spec.rbd.key.empty()) {
      BLOCKCSI_ASSIGN_OR_RETURN(key, KeyFile::Create(StateHost(), KeyFilePath(options_.state_dir, spec.volume_id),
                                                     spec.rbd.key, spec.volume_id));
      map.Arg("--keyfile").Arg(key->path());
    }
    if (!options_.ceph_conf.empty()) map.Arg("-c").Arg(options_.ceph_conf);
    if (spec.read_only) map.Arg("--read-only");
    std::string options = options_.wait_for_udev ? "" : "noudev";
    if (!options_.map_options.empty()) options += (options.empty() ? "" : ",") + options_.map_options;
    if (!options.empty()) map.Arg("--options").Arg(options);
    map.Arg(spec.rbd.image).Timeout(options_.command_timeout);

    auto r = options_.executor->Run(map);
    key.reset();  // the key file goes as soon as rbd is done with it, whatever happened
    if (!r.ok()) {
      // A timed-out map may still complete in the kernel; the facade's
      // Disconnect looks the image up in sysfs and unmaps it.
      return Status(r.status().code(),
                    where + "rbd device map " + Spec(spec.rbd.pool, spec.rbd.image) + ": " + r.status().message());
    }
    if (!r->ok()) return MapFailure(spec, *r);
    // stdout is the device node ("/dev/rbd0"), possibly after other lines.
    std::string device;
    size_t pos = 0;
    const std::string& out = r->stdout_text;
    while (pos < out.size()) {
      size_t end = out.find('\n', pos);
      if (end == std::string::npos) end = out.size();
      std::string line = out.substr(pos, end - pos);
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (line.starts_with("/dev/rbd") && AllDigits(std::string_view(line).substr(8))) device = line;
      pos = end + 1;
    }
    if (device.empty()) {
      return Internal(where + "rbd device map " + Spec(spec.rbd.pool, spec.rbd.image) +
                      " succeeded but printed no /dev/rbdN device: \"" + out.substr(0, 200) + "\"");
    }
    return device.substr(8);
  }

  Status MapFailure(const AttachSpec& spec, const CommandResult& r) const {
    const std::string what =
        Quoted(spec.volume_id) + ": rbd device map " + Spec(spec.rbd.pool, spec.rbd.image) + " failed: ";
    const std::string text = RbdErrorText(r);
    switch (r.exit_code) {
      case kEPERM:
      case kEACCES:
        return PermissionDenied(what + "cephx user \"" + spec.rbd.user +
                                "\" was refused (wrong key, or caps do not allow the pool): " + text);
      case kENOENT:
        if (text.find("kernel module") != std::string::npos || text.find("modprobe") != std::string::npos) {
          return FailedPrecondition(what + "the rbd kernel module is not available on this node: " + text);
        }
        return NotFound(what + "the image or pool does not exist: " + text);
      case kENXIO:
        return FailedPrecondition(what + "the image has features this kernel does not support: " + text);
      case kETIMEDOUT:
      case kECONNREFUSED:
        return Unavailable(what + "the cluster is unreachable: " + text);
      default:
        return Unavailable(what + text);
    }
  }

  void RemoveKeyLeftover(const AttachRecord& record) const {
    auto it = record.connector_state.find("keyfile");
    std::string path =
        it != record.connector_state.end() ? it->second : KeyFilePath(options_.state_dir, record.volume_id);
    // Only ever a file in our own key directory.
    const std::string dir = options_.state_dir + "/krbd";
    if (!path.starts_with(dir + "/") || path.find('/', dir.size() + 1) != std::string::npos) return;
    const std::string name = path.substr(dir.size() + 1);
    auto names = StateHost().ListDir(dir);
    for (const std::string& entry : names.ok() ? *names : std::vector<std::string>{}) {
      // The key file, or the temp file of a write a crash interrupted.
      if (entry != name && !entry.starts_with(name + ".tmp-")) continue;
      if (StateHost().Kind(dir + "/" + entry) == PathKind::kFile && StateHost().RemovePath(dir + "/" + entry).ok()) {
        LogWarn("removed a cephx key file left by an interrupted map", {{"volume_id", record.volume_id}});
      }
    }
  }

  void RemoveAllKeyLeftovers() const {
    const std::string dir = options_.state_dir + "/krbd";
    auto names = StateHost().ListDir(dir);
    for (const std::string& name : names.ok() ? *names : std::vector<std::string>{}) {
      if (!name.ends_with(".key") && name.find(".key.tmp-") == std::string::npos) continue;
      if (StateHost().RemovePath(dir + "/" + name).ok()) {
        LogWarn("removed a cephx key file left by an interrupted map", {{"file", dir + "/" + name}});
      }
    }
  }

  const Host& StateHost() const { return *options_.state_files; }

  KrbdConnectorOptions options_;
};

}  // namespace

StatusOr<std::vector<std::string>> KrbdMonitorAddresses(std::string_view mon_host) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (std::string_view entry : SplitTopLevel(mon_host)) {
    if (entry.empty()) continue;  // "a,,b" and a trailing comma are harmless
    std::vector<std::string_view> addrs;
    if (entry.front() == '[' && entry.back() == ']' &&
        (entry.substr(1).starts_with("v1:") || entry.substr(1).starts_with("v2:") ||
         entry.substr(1).starts_with("any:"))) {
      addrs = SplitTopLevel(entry.substr(1, entry.size() - 2));  // one monitor's address vector
    } else {
      addrs.push_back(entry);
    }
    std::string legacy;
    for (std::string_view addr : addrs) {
      BLOCKCSI_ASSIGN_OR_RETURN(std::string a, LegacyAddress(addr, mon_host));
      if (!a.empty() && legacy.empty()) legacy = a;
    }
    if (legacy.empty()) {
      return InvalidArgument("monitor \"" + std::string(entry) +
                             "\" has no v1 address; the kernel RBD client needs one (ms_bind_msgr1)");
    }
    if (seen.insert(legacy).second) out.push_back(legacy);
  }
  if (out.empty()) return InvalidArgument("no monitor in \"" + std::string(mon_host) + "\"");
  return out;
}

StatusOr<KrbdMapping> ReadKrbdMapping(const Host& fs, const std::string& id) {
  if (!AllDigits(id)) return InvalidArgument("\"" + id + "\" is not an rbd device id");
  const std::string base = kSysBusRbd + id;
  if (!fs.Exists(base)) return NotFound("/dev/rbd" + id + " is not mapped");
  KrbdMapping m;
  m.id = id;
  BLOCKCSI_ASSIGN_OR_RETURN(m.pool, ReadTrimmed(fs, base + "/pool"));
  BLOCKCSI_ASSIGN_OR_RETURN(m.image, ReadTrimmed(fs, base + "/name"));
  BLOCKCSI_ASSIGN_OR_RETURN(m.image_id, ReadTrimmed(fs, base + "/image_id"));
  BLOCKCSI_ASSIGN_OR_RETURN(m.snap, ReadTrimmed(fs, base + "/current_snap"));
  if (fs.Exists(base + "/pool_ns")) {
    BLOCKCSI_ASSIGN_OR_RETURN(m.pool_ns, ReadTrimmed(fs, base + "/pool_ns"));
  }
  BLOCKCSI_ASSIGN_OR_RETURN(std::string size, ReadTrimmed(fs, base + "/size"));
  auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), m.size_bytes);
  if (ec != std::errc() || end != size.data() + size.size()) {
    return Internal("/sys/bus/rbd/devices/" + id + "/size is \"" + size + "\", not a number");
  }
  return m;
}

std::vector<KrbdMapping> ListKrbdMappings(const Host& fs) {
  std::vector<KrbdMapping> out;
  auto ids = fs.ListDir(kSysBusRbd);
  if (!ids.ok()) return out;  // the rbd module is not loaded: nothing is mapped
  for (const auto& id : *ids) {
    auto m = ReadKrbdMapping(fs, id);
    // A device being removed right now vanishes between list and read.
    if (m.ok()) out.push_back(std::move(*m));
  }
  return out;
}

std::unique_ptr<Connector> MakeKrbdConnector(KrbdConnectorOptions options) {
  return std::make_unique<KrbdConnector>(std::move(options));
}

}  // namespace blockcsi
