#include "controller/parameters.h"

#include <algorithm>

#include "contract/publish_context.h"
#include "contract/volume_key.h"

namespace blockcsi {

// The node makes and grows these (src/common/mkfs_mount_options.h); keep the lists equal.
bool IsSupportedFsType(std::string_view fs_type) { return fs_type == "ext4" || fs_type == "xfs" || fs_type == "btrfs"; }

namespace {

bool IsSidecarKey(std::string_view key) { return key.starts_with(storage_class::kSidecarPrefix); }

}  // namespace

StatusOr<VolumeParameters> ParseVolumeParameters(const std::map<std::string, std::string>& parameters,
                                                 const std::vector<std::string>& backend_keys) {
  VolumeParameters out;
  std::string sidecar_fs_type;
  for (const auto& [key, value] : parameters) {
    if (key == storage_class::kSidecarFsType) {
      sidecar_fs_type = value;
      continue;
    }
    if (IsSidecarKey(key)) continue;
    if (key == storage_class::kFsType) {
      out.fs_type = value;
    } else if (key == storage_class::kMkfsOptions) {
      out.mkfs_options = value;
    } else if (key == storage_class::kChap) {
      if (value != "true" && value != "false") {
        return InvalidArgument("parameter \"chap\" must be \"true\" or \"false\", not \"" + value + "\"");
      }
      out.chap = value == "true";
    } else if (key == volume_key::kEncryptedParameter) {
      if (value != "true" && value != "false") {
        return InvalidArgument("parameter \"encrypted\" must be \"true\" or \"false\", not \"" + value + "\"");
      }
      out.encrypted = value == "true";
    } else if (key == storage_class::kBackend) {
      // The routing key: with --backend-config the RoutingBackend picks the
      // named backend (and checks the name); a single backend ignores it.
    } else if (std::find(backend_keys.begin(), backend_keys.end(), key) == backend_keys.end()) {
      return InvalidArgument("unknown parameter \"" + key +
                             "\" (accepted: fsType, mkfsOptions, chap, encrypted, backend, csi.storage.k8s.io/*" +
                             [&] {
                               std::string extra;
                               for (const auto& k : backend_keys) extra += ", " + k;
                               return extra;
                             }() +
                             ")");
    }
    out.persisted[key] = value;
  }
  if (!sidecar_fs_type.empty()) {
    if (!out.fs_type.empty() && out.fs_type != sidecar_fs_type) {
      return InvalidArgument("parameter fsType \"" + out.fs_type + "\" disagrees with csi.storage.k8s.io/fstype \"" +
                             sidecar_fs_type + "\"");
    }
    out.fs_type = sidecar_fs_type;
    out.persisted[storage_class::kFsType] = sidecar_fs_type;
  }
  if (!out.fs_type.empty() && !IsSupportedFsType(out.fs_type)) {
    return InvalidArgument("parameter fsType \"" + out.fs_type + "\" is not supported (ext4, xfs or btrfs)");
  }
  return out;
}

VolumeParameters VolumeParametersFromRecord(const std::map<std::string, std::string>& persisted) {
  VolumeParameters out;
  out.persisted = persisted;
  if (auto it = persisted.find(storage_class::kFsType); it != persisted.end()) out.fs_type = it->second;
  if (auto it = persisted.find(storage_class::kMkfsOptions); it != persisted.end()) out.mkfs_options = it->second;
  if (auto it = persisted.find(storage_class::kChap); it != persisted.end()) out.chap = it->second == "true";
  if (auto it = persisted.find(volume_key::kEncryptedParameter); it != persisted.end()) {
    out.encrypted = it->second == "true";
  }
  return out;
}

std::map<std::string, std::string> VolumeContextFor(const VolumeParameters& parameters) {
  std::map<std::string, std::string> context;
  if (!parameters.fs_type.empty()) context[volume_context::kFsType] = parameters.fs_type;
  if (!parameters.mkfs_options.empty()) context[volume_context::kMkfsOptions] = parameters.mkfs_options;
  if (parameters.chap) context[storage_class::kChap] = "true";
  // The node refuses to stage an encrypted volume as a plain one.
  if (parameters.encrypted) context[volume_key::kEncryptionContext] = volume_key::kEncryptionLuks2;
  return context;
}

Status ValidateSnapshotParameters(const std::map<std::string, std::string>& parameters) {
  for (const auto& [key, value] : parameters) {
    if (!IsSidecarKey(key)) {
      return InvalidArgument("unknown snapshot parameter \"" + key + "\" (accepted: csi.storage.k8s.io/*)");
    }
  }
  return OkStatus();
}

}  // namespace blockcsi
