#include "node/volume_trim.h"

#include "common/mounter.h"
#include "node/staged_facts.h"

namespace blockcsi {

TrimVerdict TrimVerdictFor(const AttachRecord& record) {
  StagedFacts staged = StagedFacts::Of(record);
  if (staged.staging_path.empty()) return {TrimVerdict::kNotOurs, "not staged (attached only)"};
  if (staged.block()) {
    return {TrimVerdict::kNotOurs,
            "raw block volume: the node cannot know which blocks hold the pod's data; discard from inside the pod "
            "(blkdiscard, or fstrim of the filesystem the pod made on it)"};
  }
  if (record.read_only) return {TrimVerdict::kNotOurs, "attached read-only (a discard is a write)"};
  if (!staged.crypt_mapping.empty()) {
    // FITRIM through the mapping would fail with EOPNOTSUPP every round:
    // said once here, as what it is, instead of as a failure.
    return {TrimVerdict::kSkipped,
            "encrypted: its dm-crypt mapping does not pass discards to the storage (opened without allow_discards, "
            "so that the storage cannot see which blocks are in use); its freed space stays allocated"};
  }
  return {};
}

std::string WhyNotTrimmable(const AttachRecord& record) { return TrimVerdictFor(record).why; }

StatusOr<uint64_t> TrimVolume(const Host& host, const AttachRecord& record, const std::vector<MountEntry>& table) {
  const std::string& volume_id = record.volume_id;
  if (std::string why = WhyNotTrimmable(record); !why.empty()) {
    return FailedPrecondition("volume " + volume_id + " is not trimmed: " + why);
  }
  StagedFacts staged = StagedFacts::Of(record);
  const MountEntry* entry = FindMountAt(table, staged.staging_path);
  if (entry == nullptr) {
    return FailedPrecondition("volume " + volume_id + ": nothing is mounted at its staging path " +
                              staged.staging_path);
  }
  if (entry->read_only()) {
    return FailedPrecondition("volume " + volume_id + ": its filesystem at " + staged.staging_path +
                              " is mounted read-only (a discard is a write)");
  }
  // btrfs shows an anonymous device number in mountinfo, not its device's:
  // its mount is recognised by its source instead.
  bool own_device = entry->source == record.device_path;
  if (!own_device && entry->fs_type != "btrfs") {
    auto device_number = host.DeviceNumber(record.device_path);
    own_device = device_number.ok() && *device_number == entry->major_minor;
  }
  if (!own_device) {
    return FailedPrecondition("volume " + volume_id + ": " + staged.staging_path + " is mounted from " + entry->source +
                              ", not from the volume's device " + record.device_path);
  }
  auto trimmed = host.TrimFilesystem(staged.staging_path, entry->major_minor);
  if (!trimmed.ok()) return trimmed.status().WithContext("volume " + volume_id);
  return *trimmed;
}

}  // namespace blockcsi
