// Fuzz targets for the parsers and validators that take outside input in the
// controller, attach and node layers: tgtadm output, publish_context and
// secrets (AttachSpec), iSCSI names and portals, VPD pages (read from sysfs or
// over iSCSI), attach records, volume and snapshot ids, StorageClass
// parameters, mount flags and mkfs options. One FUZZ_TARGET_* per binary.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "attach/attach_record_store.h"
#include "attach/attach_spec.h"
#include "attach/iscsi_names.h"
#include "attach/lun_identity.h"
#include "controller/parameters.h"
#include "controller/tgtadm_parser.h"
#include "controller/volume_id.h"
#include "node/fs_options.h"

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
#if defined(FUZZ_TARGET_TGTADM)
  auto targets = blockcsi::ParseTgtadmTargets(input);
  (void)blockcsi::ParseTgtadmAccounts(input);
  if (targets.ok()) {
    for (const auto& t : *targets) FUZZ_CHECK(!t.iqn.empty());
  }
#elif defined(FUZZ_TARGET_ATTACH_SPEC)
  // First line: secrets' chap password; the rest: publish_context.
  auto split = input.find('\n');
  std::string secret(input.substr(0, split == std::string_view::npos ? 0 : split));
  auto context = ParseMap(split == std::string_view::npos ? input : input.substr(split + 1));
  std::map<std::string, std::string> secrets{{"chap-username", "u"}, {"chap-password", secret}};
  auto spec = blockcsi::ParseAttachSpec("vol-fuzz", context, secrets, "iqn.2026-11.io.blockcsi:node:n1");
  if (!spec.ok() && secret.size() >= 12 && secret.find_first_of(" ,=:") == std::string::npos) {
    // A secret must never be echoed into an error message.
    bool in_context = false;
    for (const auto& [k, v] : context)
      in_context |= k.find(secret) != std::string::npos || v.find(secret) != std::string::npos;
    FUZZ_CHECK(in_context || spec.status().message().find(secret) == std::string::npos);
  }
  if (spec.ok()) {
    FUZZ_CHECK(!spec->portals.empty());
    FUZZ_CHECK(blockcsi::ValidateIscsiName(spec->target_iqn).ok());
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
