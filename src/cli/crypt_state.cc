// What blockctl knows of the dm-crypt layer of encrypted volumes: the
// mappings the node plugin opened (named "blockcsi-..."), and which of them
// no attach record accounts for.
#include <algorithm>

#include "cli/node_state.h"
#include "common/strings.h"
#include "node/volume_crypt.h"

namespace blockcsi::cli {
namespace {

// Every mapping the node opens is named so (CryptMappingName); any other dm
// device (LVM, multipath, someone's own dm-crypt) is not ours to judge.
constexpr char kMappingPrefix[] = "blockcsi-";

}  // namespace

void GatherCryptMappings(const Host& host_fs, NodeSnapshot& s) {
  auto names = host_fs.ListDir("/sys/block");
  if (!names.ok()) return;
  for (const auto& block : *names) {
    if (!block.starts_with("dm-")) continue;
    auto name = ReadTrimmed(host_fs, "/sys/block/" + block + "/dm/name");
    if (name.ok() && name->starts_with(kMappingPrefix)) s.crypt_mappings.push_back(*name);
  }
}

void AddOrphanMappings(const NodeSnapshot& s, std::vector<Finding>& out) {
  for (const auto& name : s.crypt_mappings) {
    bool known = std::any_of(s.records.begin(), s.records.end(),
                             [&](const AttachRecord& r) { return ParseStagedAnnotation(r).crypt_mapping == name; });
    if (!known) {
      out.push_back({name, kVerdictOrphanMapping, CryptMappingPath(name) + ", which no attach record names"});
    }
  }
}

}  // namespace blockcsi::cli
