// StorageClass parameters (CreateVolume, GetCapacity) and VolumeSnapshotClass
// parameters (CreateSnapshot): which keys this driver accepts, what they mean,
// and how they are split between the volume_context (read by the node) and
// the backend. Pure functions; thread-safe.
//
// Accepted keys:
//   fsType       ext4 | xfs | btrfs; also arrives as csi.storage.k8s.io/fstype (the
//                external-provisioner's name). Travels in volume_context.
//   mkfsOptions  extra mkfs arguments; validated by the node, which runs mkfs.
//   chap         "true" | "false": publishing then needs CHAP secrets.
//   backend      which configured backend serves the volume (--backend-config).
//   encrypted    "true" | "false": LUKS2 at rest (contract/volume_key.h); the
//                provisioner and node-stage secrets then carry encryptionKey.
//   + every key of the backend's SupportedParameters().
// Keys prefixed `csi.storage.k8s.io/` are the sidecars' own (PVC/PV names
// with --extra-create-metadata, secret references): accepted and not handed
// to the backend. Anything else is INVALID_ARGUMENT naming the key, so that a
// typo in a StorageClass fails the first PVC instead of being ignored.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "backend/storage_class.h"
#include "common/status.h"

namespace blockcsi {

// Filesystems the node can make and grow.
bool IsSupportedFsType(std::string_view fs_type);

struct VolumeParameters {
  std::string fs_type;       // "" → the node's default (ext4)
  std::string mkfs_options;  // passed to the node untouched
  bool chap = false;
  bool encrypted = false;
  // What is persisted with the volume: the backend's own keys plus the
  // driver's keys (fsType, mkfsOptions, chap, encrypted, backend), so that the
  // volume_context and the CHAP requirement can be rebuilt from the
  // backend's record alone (ListVolumes, ControllerGetVolume, Publish).
  std::map<std::string, std::string> persisted;
};

// INVALID_ARGUMENT naming the offending key (and, for non-secret keys, the
// value) for unknown keys, bad values, or fsType and csi.storage.k8s.io/fstype
// disagreeing.
StatusOr<VolumeParameters> ParseVolumeParameters(const std::map<std::string, std::string>& parameters,
                                                 const std::vector<std::string>& backend_keys);

// Rebuilds the parameters from a backend record's persisted map (never fails:
// the map was validated when the volume was made).
VolumeParameters VolumeParametersFromRecord(const std::map<std::string, std::string>& persisted);

// The volume_context CreateVolume returns and the node receives.
std::map<std::string, std::string> VolumeContextFor(const VolumeParameters& parameters);

// Snapshot classes carry no parameters of ours yet: only the sidecars' keys.
Status ValidateSnapshotParameters(const std::map<std::string, std::string>& parameters);

}  // namespace blockcsi
