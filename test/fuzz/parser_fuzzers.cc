// Fuzz targets for the parsers and validators that take outside input in the
// controller, attach and node layers: tgtadm output, publish_context and
// secrets (AttachSpec), iSCSI names and portals, VPD pages (read from sysfs or
// over iSCSI), attach records, volume and snapshot ids, StorageClass
// parameters, mount flags and mkfs options, and the kernel initiator's sysfs
// tree (read through an in-memory Host). One FUZZ_TARGET_* per binary.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "attach/attach_record_store.h"
#include "attach/attach_spec.h"
#include "attach/iscsi_sysfs.h"
#include "backend/local/tgtadm_parser.h"
#include "backend/volume_id.h"
#include "common/lun_identity.h"
#include "common/mkfs_mount_options.h"
#include "contract/iscsi_names.h"
#include "controller/parameters.h"

#define FUZZ_CHECK(cond)       \
  do {                         \
    if (!(cond)) std::abort(); \
  } while (0)

namespace {

// "key=value" lines, for the map-shaped inputs.
std::map<std::string, std::string> ParseMap(std::string_view text) {
  std::map<std::string, std::string> out;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

std::vector<std::string> Words(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::vector<std::string> out;
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

// A sysfs tree from text: "path\tcontents" makes a file, "path -> target"
// a symlink; directories exist because something is below them. Contents use
// "\\n" for newlines so one line can hold a multi-line attribute.
class TextHost final : public blockcsi::RootedHost {
 public:
  // Anything but the file reads goes to a root that does not exist.
  explicit TextHost(std::string_view text) : RootedHost("/nonexistent-fuzz-root") {
    std::istringstream lines{std::string(text)};
    std::string line;
    while (std::getline(lines, line)) {
      if (auto arrow = line.find(" -> "); arrow != std::string::npos) {
        Add(line.substr(0, arrow));
        links_[line.substr(0, arrow)] = line.substr(arrow + 4);
      } else if (auto tab = line.find('\t'); tab != std::string::npos) {
        std::string contents = line.substr(tab + 1);
        for (size_t at; (at = contents.find("\\n")) != std::string::npos;) contents.replace(at, 2, "\n");
        Add(line.substr(0, tab));
        files_[line.substr(0, tab)] = contents;
      }
    }
  }
  blockcsi::StatusOr<std::string> ReadFile(const std::string& path) const override {
    auto it = files_.find(path);
    if (it == files_.end()) return blockcsi::NotFound(path);
    return it->second;
  }
  blockcsi::Status WriteFile(const std::string& path, const std::string&) const override {
    return files_.count(path) ? blockcsi::OkStatus() : blockcsi::NotFound(path);
  }
  blockcsi::Status ReplaceFile(const std::string& path, const std::string&) const override {
    return files_.count(path) ? blockcsi::OkStatus() : blockcsi::NotFound(path);
  }
  blockcsi::StatusOr<std::vector<std::string>> ListDir(const std::string& path) const override {
    auto it = dirs_.find(path);
    if (it == dirs_.end()) return blockcsi::NotFound(path);
    return std::vector<std::string>(it->second.begin(), it->second.end());
  }
  blockcsi::StatusOr<std::string> ReadLink(const std::string& path) const override {
    auto it = links_.find(path);
    if (it == links_.end()) return blockcsi::InvalidArgument(path);
    return it->second;
  }
  bool Exists(const std::string& path) const override {
    return files_.count(path) || dirs_.count(path) || links_.count(path);
  }
  std::string Resolve(const std::string& path) const override { return path; }

 private:
  void Add(const std::string& path) {
    // Bounded, and only what a kernel can show: absolute, no empty, "." or
    // ".." component (ListDir never returns those).
    if (path.size() > 256 || path.empty() || path[0] != '/' || path.back() == '/') return;
    if (path.find("//") != std::string::npos || path.find("/./") != std::string::npos ||
        path.find("/../") != std::string::npos || path.ends_with("/.") || path.ends_with("/..")) {
      return;
    }
    for (size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0; slash = path.rfind('/', slash - 1)) {
      dirs_[path.substr(0, slash)].insert(path.substr(slash + 1, path.find('/', slash + 1) - slash - 1));
    }
    dirs_["/"].insert(path.substr(1, path.find('/', 1) - 1));
  }
  std::map<std::string, std::string> files_;
  std::map<std::string, std::string> links_;
  std::map<std::string, std::set<std::string>> dirs_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
#if defined(FUZZ_TARGET_TGTADM)
  auto targets = blockcsi::ParseTgtadmTargets(input);
  (void)blockcsi::ParseTgtadmAccounts(input);
  if (targets.ok()) {
    for (const auto& t : *targets) FUZZ_CHECK(!t.iqn.empty());
  }
  // The alias-free connection listing: every entry a token initiator name.
  if (auto connections = blockcsi::ParseTgtadmConnections(input); connections.ok()) {
    for (const auto& c : *connections) {
      FUZZ_CHECK(!c.initiator.empty() && c.initiator.find_first_of(" \n\t") == std::string::npos);
    }
  }
  // Every heading the recovery would ask tgtd about is a positive id, and a
  // session shown plainly is shown once.
  for (const auto& heading : blockcsi::TgtadmHeadings(input)) FUZZ_CHECK(heading.tid > 0 && heading.line > 0);
  if (blockcsi::TgtadmShowsSessionPlainly(input, 10, "iqn.2026-11.io.blockcsi:node:n1")) {
    FUZZ_CHECK(input.find("\n        I_T nexus: 10\n") == input.rfind("\n        I_T nexus: 10\n"));
  }
#elif defined(FUZZ_TARGET_ATTACH_SPEC)
  // First line: a secret (the CHAP password, then the cephx key); the rest:
  // publish_context.
  auto split = input.find('\n');
  std::string secret(input.substr(0, split == std::string_view::npos ? 0 : split));
  auto context = ParseMap(split == std::string_view::npos ? input : input.substr(split + 1));
  // A stand-in of the same length whose every byte is another of the same
  // kind for both checks a secret meets (CHAP: printable ASCII without
  // space, ',', '=', quotes, backslash; cephx: base64): it fails the same
  // check at the same byte, so a message built only of fixed words (which
  // may spell the secret: "chap-password may" is how a CHAP secret with a
  // space is refused) is the same for it; an echo of the secret would show
  // the stand-in instead. ('=' is the one byte of its kind and stays.)
  auto same_kind = [](char c) {
    if (std::isalnum(static_cast<unsigned char>(c))) return c == 'x' ? 'y' : 'x';
    if (c == '+' || c == '/') return c == '+' ? '/' : '+';
    if (c == '=') return c;
    bool chap_ok = c > 0x20 && c < 0x7f && c != ',' && c != '"' && c != '\'' && c != '\\';
    if (chap_ok) return c == '-' ? '.' : '-';
    return c == ' ' ? ',' : ' ';
  };
  std::string other(secret);
  for (char& c : other) c = same_kind(c);
  auto parse = [&](const char* user_key, const char* secret_key, const std::string& value) {
    std::map<std::string, std::string> secrets{{user_key, "u"}, {secret_key, value}};
    return blockcsi::ParseAttachSpec("vol-fuzz", context, secrets, "iqn.2026-11.io.blockcsi:node:n1");
  };
  for (auto [user_key, secret_key] : {std::pair{"chap-username", "chap-password"}, std::pair{"userID", "userKey"}}) {
    auto with_secret = parse(user_key, secret_key, secret);
    if (!with_secret.ok() && secret.size() >= 8 && with_secret.status().message().find(secret) != std::string::npos) {
      // A secret must never be echoed into an error message: the same
      // refusal for the stand-in, in the same fixed words, and the stand-in
      // in it only where it was already in the secret's (the context, which
      // the message may quote, can hold any text).
      auto with_other = parse(user_key, secret_key, other);
      const std::string message = with_secret.status().message();
      FUZZ_CHECK(!with_other.ok() && with_other.status().message().find(secret) != std::string::npos);
      FUZZ_CHECK(with_other.status().message().find(other) == std::string::npos ||
                 message.find(other) != std::string::npos);
    }
  }
  auto spec = parse("chap-username", "chap-password", secret);
  if (spec.ok() && spec->transport == "iscsi") {
    FUZZ_CHECK(!spec->portals.empty());
    FUZZ_CHECK(blockcsi::ValidateIscsiName(spec->target_iqn).ok());
  }
  if (spec.ok() && spec->transport == "rbd") {
    // The image id is the identity the node verifies; never attach without it.
    FUZZ_CHECK(!spec->rbd.image_id.empty() && spec->expected_serial == spec->rbd.image_id);
    FUZZ_CHECK(!spec->rbd.pool.empty() && !spec->rbd.image.empty() && !spec->rbd.user.empty());
  }
#elif defined(FUZZ_TARGET_ISCSI_NAMES)
  auto portal = blockcsi::ParsePortal(input);
  if (portal.ok()) {
    FUZZ_CHECK(portal->port > 0 && portal->port < 65536);
    auto again = blockcsi::ParsePortal(portal->ToString());
    FUZZ_CHECK(again.ok() && again->host == portal->host && again->port == portal->port);
  }
  (void)blockcsi::ValidateIscsiName(input);
  (void)blockcsi::ParseLun(input);
  (void)blockcsi::ValidateSerial(input);
  auto wwn = blockcsi::NormalizeWwn(input);
  if (wwn.ok()) {
    auto again = blockcsi::NormalizeWwn(*wwn);
    FUZZ_CHECK(again.ok() && *again == *wwn);
  }
#elif defined(FUZZ_TARGET_VPD)
  // Two pages back to back, the first byte telling where page 0x80 ends.
  size_t cut = size == 0 ? 0 : data[0] % size;
  std::string_view rest = input.substr(size == 0 ? 0 : 1);
  cut = std::min(cut, rest.size());
  (void)blockcsi::ParseVpdPage80(rest.substr(0, cut));
  (void)blockcsi::ParseVpdPages(rest.substr(0, cut), rest.substr(cut));
#elif defined(FUZZ_TARGET_ATTACH_RECORD)
  auto record = blockcsi::AttachRecordFromJson(std::string(input), "fuzz.json");
  if (record.ok()) {
    auto again = blockcsi::AttachRecordFromJson(blockcsi::AttachRecordToJson(*record), "again.json");
    FUZZ_CHECK(again.ok() && again->volume_id == record->volume_id && again->device_path == record->device_path);
  }
  auto name = blockcsi::EscapeVolumeIdForFile(std::string(input));
  FUZZ_CHECK(name.find('/') == std::string::npos && name != "." && name != "..");
  auto back = blockcsi::UnescapeVolumeIdFromFile(name);
  FUZZ_CHECK(back.ok() && *back == input);
#elif defined(FUZZ_TARGET_SYSFS)
  // The walk the kernel connector does after a login, over an arbitrary
  // tree. First line: "<target iqn> <portal>" to look for.
  auto newline = input.find('\n');
  std::vector<std::string> wanted = Words(input.substr(0, newline == std::string_view::npos ? 0 : newline));
  std::string target = wanted.size() > 0 ? wanted[0] : "iqn.2026-11.io.blockcsi:vol-1";
  auto portal = blockcsi::ParsePortal(wanted.size() > 1 ? wanted[1] : "127.0.0.1:3260");
  if (!portal.ok()) return 0;
  TextHost fs(input);
  for (const char* iface : {"", "blockcsi"}) {
    auto session = blockcsi::FindIscsiSession(fs, target, *portal, iface);
    if (!session) continue;
    FUZZ_CHECK(!session->sid.empty());
    for (int lun : {0, 1}) {
      for (const auto& dir : blockcsi::ScsiDevicesOfLun(fs, *session, lun)) {
        auto name = blockcsi::BlockNameOfScsiDevice(fs, dir);
        if (!name.ok()) continue;
        // A block name from sysfs is used in /dev paths: never a path itself.
        FUZZ_CHECK(name->find('/') == std::string::npos && *name != "." && *name != "..");
        (void)blockcsi::BlockDeviceSize(fs, *name);
        (void)blockcsi::ReadSysfsIdentity(fs, *name);
        if (auto dm = blockcsi::MultipathHolder(fs, *name)) {
          (void)blockcsi::MultipathSlaves(fs, *dm);
          (void)blockcsi::DmName(fs, *dm);
        }
      }
      (void)blockcsi::OtherLunDevices(fs, *session, lun);
    }
  }
#elif defined(FUZZ_TARGET_VOLUME_ID)
  bool volume_ok = blockcsi::ValidateVolumeId(input).ok();
  FUZZ_CHECK(volume_ok == blockcsi::IsVolumeId(input));
  if (volume_ok) {
    FUZZ_CHECK(input.find('/') == std::string_view::npos && input.find("..") == std::string_view::npos);
  }
  if (blockcsi::ValidateSnapshotId(input).ok()) FUZZ_CHECK(input.find('/') == std::string_view::npos);
#elif defined(FUZZ_TARGET_STORAGE_CLASS)
  auto params = blockcsi::ParseVolumeParameters(ParseMap(input), {"thin"});
  if (params.ok() && !params->fs_type.empty()) FUZZ_CHECK(blockcsi::IsSupportedFsType(params->fs_type));
#elif defined(FUZZ_TARGET_MOUNT_OPTIONS)
  for (const char* fs : {"ext4", "xfs", "btrfs", ""}) {
    (void)blockcsi::ValidateMountFlags("vol-fuzz", fs, Words(input));
    auto mkfs = blockcsi::ParseMkfsOptions("vol-fuzz", fs, input);
    if (mkfs.ok() && *fs != '\0') {
      auto argv = blockcsi::MkfsArgv(fs, "/dev/loop9", *mkfs);
      // Never a force flag: mkfs must still refuse a device that gained a signature.
      for (const auto& a : argv) FUZZ_CHECK(a != "-F" && a != "-f" && a != "--force");
    }
  }
#else
#error "define one FUZZ_TARGET_*"
#endif
  return 0;
}
