#include "common/logging.h"
#include "node/node_internal.h"
#include "node/node_service.h"
#include "node/volume_crypt.h"

// The dm-crypt layer of an encrypted volume: opened between the attach
// and the filesystem at stage, closed between them at unstage.
namespace blockcsi {

using namespace node_internal;  // NOLINT(google-build-using-namespace): the node_*.cc files share these helpers

namespace {

// What libblkid calls a LUKS header (version 1 and 2 alike; cryptsetup
// refuses a LUKS1 header when asked for luks2).
constexpr char kLuksSignature[] = "crypto_LUKS";

}  // namespace

// The same rule as for filesystems, one layer down: a blank device gets a
// LUKS2 header; a LUKS header is opened with the volume's key, and a key
// that does not open it is PERMISSION_DENIED, never a reason to format (a
// header without any keyslot, which no key opens, excepted);
// anything else (a plain filesystem, a partition table: someone's data,
// perhaps this volume staged before it was encrypted) is refused. A
// mapping left open by an earlier attempt is kept when it sits on this very
// device, so a retry never closes what a publish may already be using.
Status NodeService::OpenMapping(const StagePlan& plan, const AttachRecord& record) {
  const std::string& volume_id = plan.volume_id;
  const std::string& device = record.device_path;
  const std::string mapping = CryptMappingPath(plan.crypt_mapping);
  if (options_.host->Kind(mapping) != PathKind::kMissing) {
    auto raw = options_.host->DeviceNumber(device);
    auto backing = MappingBackingNumbers(*options_.host, mapping);
    if (raw.ok() && backing.ok() && *backing == std::vector<std::string>{*raw}) return OkStatus();
    return FailedPrecondition("volume " + volume_id + ": dm-crypt mapping " + mapping + " exists but does not sit on " +
                              device + (backing.ok() ? "" : " (" + backing.status().message() + ")") +
                              "; close it (blockctl cleanup) before staging");
  }
  auto probed = options_.probe->Probe(device);
  if (!probed.ok()) return probed.status().WithContext("volume " + volume_id + ": probe " + device);
  if (probed->blank()) {
    if (plan.read_only) {
      return FailedPrecondition("volume " + volume_id +
                                " is blank but attached read-only: cannot write its LUKS2 header");
    }
    BLOCKCSI_RETURN_IF_ERROR(FormatLuks(*options_.executor, volume_id, device, plan.data_key));
    BLOCKCSI_RETURN_IF_ERROR(Fault("node.stage.after-luks-format").WithContext("volume " + volume_id));
  } else if (probed->signatures.size() != 1 || probed->signatures.front().type != kLuksSignature) {
    return FailedPrecondition("volume " + volume_id + " is encrypted but device " + device + " carries " +
                              probed->Describe() +
                              ", not a LUKS header or a blank device; refusing to format or "
                              "open it");
  }
  Status opened = OpenLuks(*options_.executor, volume_id, device, plan.crypt_mapping, plan.data_key, plan.read_only);
  if (!opened.ok() && !plan.read_only) {
    // The one LUKS header that is formatted again: one without any keyslot,
    // what a luksFormat killed between its header and its first keyslot
    // leaves (this stage's earlier attempt). No key opens it, so nobody can
    // read what is behind it; refusing it would leave the volume unusable
    // for good. Asked only once the open failed (a header that opens is
    // never dumped).
    auto keyless = LuksHeaderHasNoKeyslot(*options_.executor, volume_id, device);
    if (keyless.ok() && *keyless) {
      LogWarn("LUKS2 header without a keyslot (a format cut short): formatting it again",
              {{"volume_id", volume_id}, {"device", device}});
      BLOCKCSI_RETURN_IF_ERROR(FormatLuks(*options_.executor, volume_id, device, plan.data_key));
      opened = OpenLuks(*options_.executor, volume_id, device, plan.crypt_mapping, plan.data_key, plan.read_only);
    }
  }
  BLOCKCSI_RETURN_IF_ERROR(opened);
  return Fault("node.stage.after-luks-open").WithContext("volume " + volume_id);
}

Status NodeService::CloseMapping(const AttachRecord& record, bool deferred) {
  const std::string name = StagedFacts::Of(record).crypt_mapping;
  if (name.empty()) return OkStatus();
  return CloseLuks(*options_.executor, *options_.host, record.volume_id, name, deferred);
}

}  // namespace blockcsi
