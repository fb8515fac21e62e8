// `blockctl volumes`: every volume this node has an attach record for, with
// its device, identity, staging and publish mounts, filesystem use and the
// state of its bridge or session. Read-only; works with the plugin down.
#include <CLI/CLI.hpp>
#include <ostream>

#include "cli/node_state.h"
#include "cli/table.h"
#include "cli/verb.h"
#include "node/volume_crypt.h"

namespace blockcsi::cli {
namespace {

class VolumesVerb final : public Verb {
 public:
  std::string Name() const override { return "volumes"; }
  std::string Summary() const override {
    return "List this node's volumes: device, identity, mounts, use, bridge/session state";
  }
  void Configure(CLI::App& /*command*/) override {}

  int Run(const GlobalOptions& options, const Io& io) override {
    NodeSnapshot snapshot = GatherHostSnapshot(options.host, options.state_dir);
    for (const auto& e : snapshot.errors) io.Error(e);
    Table table({"volume", "state", "origin", "device", "serial", "wwn", "access", "fs type", "encryption",
                 "staging path", "publish paths", "size", "used", "attachment"});
    for (const VolumeView& v : DescribeVolumes(snapshot)) {
      std::string publish;
      for (const auto& p : v.publish_paths) publish += (publish.empty() ? "" : ",") + p;
      std::string size =
          v.usage ? HumanBytes(v.usage->total_bytes) : (v.size_bytes > 0 ? HumanBytes(v.size_bytes) : std::string());
      std::string used;
      if (v.usage && v.usage->total_bytes > 0) {
        used = HumanBytes(v.usage->used_bytes) + " (" +
               std::to_string(v.usage->used_bytes * 100 / v.usage->total_bytes) + "%)";
      }
      // The pods' device of an encrypted volume is its dm-crypt mapping.
      std::string encryption;
      if (!v.crypt_mapping.empty()) {
        encryption = "luks2 " + CryptMappingPath(v.crypt_mapping) + (v.crypt_open ? "" : " (closed)");
      }
      std::string staging = v.staging_path;
      if (!staging.empty() && v.access_type != "block" && !v.staging_mounted) staging += " (not mounted)";
      table.AddRow({v.volume_id, v.state, v.origin,
                    v.device + (v.device.empty() || v.device_present ? "" : " (missing)"), v.serial, v.wwn,
                    v.access_type, v.fs_type, encryption, staging, publish, size, used, v.attachment});
    }
    table.Print(io.out, options.format());
    return kExitOk;
  }
};

BLOCKCTL_REGISTER_VERB(VolumesVerb);

}  // namespace
}  // namespace blockcsi::cli
