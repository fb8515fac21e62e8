// Helpers shared by the node_*.cc files (the NodeService RPCs): request
// validation and mountinfo checks. Not an interface.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "common/fault_points.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/mkfs_mount_options.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "contract/volume_key.h"
#include "node/fs_maintenance.h"
#include "node/node_service.h"

namespace blockcsi {

// What NodeStageVolume does, as PlanStage worked it out from the request.
struct NodeService::StagePlan {
  std::string volume_id;
  std::string staging_path;
  bool block = false;
  std::string fs_type;  // empty for block
  std::vector<std::string> mount_flags;
  std::vector<std::string> mkfs_extra;
  bool read_only = false;
  AttachSpec spec;
  // Encrypted volumes: the dm-crypt mapping's name and the data key
  // (unwrapped once, wiped when the plan goes); empty for plain volumes.
  std::string crypt_mapping;
  SecretBytes data_key;
};

}  // namespace blockcsi

namespace blockcsi::node_internal {

using csi::v1::VolumeCapability;
using AccessMode = csi::v1::VolumeCapability::AccessMode;

// A stacked mount (the same target mounted twice by a crashed retry) is
// peeled one layer per Unmount; more layers than this is someone else's doing.
constexpr int kMaxMountLayers = 8;

inline std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

inline Status ValidateVolumeId(const std::string& volume_id) {
  if (volume_id.empty()) return InvalidArgument("volume_id is required");
  if (volume_id.size() > 256 || volume_id.find('\0') != std::string::npos) {
    return InvalidArgument("volume_id " + Quote(volume_id.substr(0, 64)) + " is malformed");
  }
  return OkStatus();
}

// Absolute, clean paths only: a ".." component could walk the bind mount
// out of the kubelet's directory.
inline Status ValidatePath(const std::string& volume_id, std::string_view field, const std::string& path) {
  if (path.empty()) return InvalidArgument("volume " + volume_id + ": " + std::string(field) + " is required");
  if (path.front() != '/') {
    return InvalidArgument("volume " + volume_id + ": " + std::string(field) + " " + Quote(path) +
                           " is not an absolute path");
  }
  if (path.size() > 4096 || path.find('\0') != std::string::npos) {
    return InvalidArgument("volume " + volume_id + ": " + std::string(field) + " is malformed");
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string_view part(path.data() + start, end - start);
    if (part == ".." || part == ".") {
      return InvalidArgument("volume " + volume_id + ": " + std::string(field) + " " + Quote(path) + " contains " +
                             Quote(part));
    }
    start = end + 1;
  }
  return OkStatus();
}

// NodeGetVolumeStats / NodeExpandVolume name where a known volume is; a
// path that cannot be a staging or publish path ("some/path", "..") holds
// no volume: NOT_FOUND, the spec's code for "the volume is not there".
inline Status RequireVolumePath(const std::string& volume_id, const std::string& path) {
  Status st = ValidatePath(volume_id, "volume_path", path);
  if (st.ok()) return st;
  return NotFound(st.message() + ", so the volume is not there");
}

inline std::string TrimTrailingSlash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

inline bool IsReaderOnly(AccessMode::Mode mode) {
  return mode == AccessMode::SINGLE_NODE_READER_ONLY || mode == AccessMode::MULTI_NODE_READER_ONLY;
}

// Whether the node can serve the capability's access type and mode: a
// non-cluster filesystem mounted writable on several nodes would be
// corrupted, so multi-node writers are for raw block only. Unlike the
// controller's ValidateCapabilityAndFsType, the fs_type is not checked
// here: NodeStageVolume resolves it (capability, else volume_context, else
// the default) and checks the result.
inline Status ValidateAccessTypeAndMode(const VolumeCapability& cap, const std::string& volume_id) {
  if (!cap.has_block() && !cap.has_mount()) {
    return InvalidArgument("volume " + volume_id + ": volume_capability needs an access type (block or mount)");
  }
  AccessMode::Mode mode = cap.access_mode().mode();
  switch (mode) {
    case AccessMode::SINGLE_NODE_WRITER:
    case AccessMode::SINGLE_NODE_READER_ONLY:
    case AccessMode::MULTI_NODE_READER_ONLY:
    case AccessMode::SINGLE_NODE_SINGLE_WRITER:
    case AccessMode::SINGLE_NODE_MULTI_WRITER:
      return OkStatus();
    case AccessMode::MULTI_NODE_SINGLE_WRITER:
    case AccessMode::MULTI_NODE_MULTI_WRITER:
      if (cap.has_block()) return OkStatus();
      return InvalidArgument("volume " + volume_id + ": access mode " + AccessMode::Mode_Name(mode) +
                             " is only supported for raw block volumes");
    default:
      return InvalidArgument("volume " + volume_id + ": access mode " + AccessMode::Mode_Name(mode) +
                             " is not supported");
  }
}

inline std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A bind mount of a device node shows the devtmpfs as its filesystem and
// the node's path below /dev as its root in mountinfo ("/sdb",
// "/mapper/blockcsi-pv1").
inline bool IsBindOfDeviceNode(const MountEntry& e, const std::string& device) {
  if (device.empty() || (e.fs_type != "devtmpfs" && e.fs_type != "tmpfs")) return false;
  return e.root == (device.rfind("/dev/", 0) == 0 ? device.substr(4) : "/" + Basename(device));
}

// The device the volume's data goes through (DataDevice), with the links
// of a dm-crypt mapping's path resolved: udev makes /dev/mapper/<name> a
// link to /dev/dm-N, and a bind mount of it shows the node it leads to.
inline std::string VolumeDevice(const Host& host, const AttachRecord& record) {
  std::string device = DataDevice(record);
  if (device == record.device_path) return device;
  auto real = host.RealPath(device);
  return real.ok() ? *real : device;
}

// A read-only raw block publish of a writable attachment: a bind mount of
// the device node, even a read-only one, does not stop writes to the
// device, so the node binds a read-only loop device layered on the volume's
// device instead. Such a layer shows in mountinfo as a bind of "/loopN"
// whose loop reads from the volume's device.
inline bool IsReadOnlyLayerOf(const Host& host, const MountEntry& e, const std::string& device) {
  if (device.empty() || e.root.rfind("/loop", 0) != 0 || (e.fs_type != "devtmpfs" && e.fs_type != "tmpfs")) {
    return false;
  }
  auto backing = host.LoopBackingFile(e.root.substr(1));
  return backing.ok() && *backing == device;
}

inline std::map<std::string, std::string> ToMap(const google::protobuf::Map<std::string, std::string>& m) {
  return {m.begin(), m.end()};
}

// One staging per volume, as the attach record names it. A stage at a
// second path would mount the filesystem a second time (the kernel shares
// one superblock, so both paths serve and an unstage of one leaves the
// other), and restaging a raw block volume as a filesystem would format
// what the pod wrote to the device. A record whose staging is gone (a
// crash mid-unstage) is no staging: the retry may go anywhere. `record`:
// the volume's attach record, null when it has none.
inline Status CheckRecordedStaging(const AttachRecord* record, const Host& host, const std::string& volume_id,
                                   const std::string& staging_path, bool block, const std::string& fs_type,
                                   const std::vector<MountEntry>& table) {
  if (record == nullptr) return OkStatus();
  StagedFacts staged = StagedFacts::Of(*record);
  if (staged.staging_path.empty()) return OkStatus();  // a stage died before recording; redoing it is safe
  bool still_staged = staged.block() || FindMountAt(table, staged.staging_path) != nullptr;
  const std::string device = VolumeDevice(host, *record);
  if (!still_staged && !device.empty()) {
    // The staging mount is gone but the device may still be mounted
    // elsewhere (a publish bind): that is still this staging.
    if (auto devnum = host.DeviceNumber(device); devnum.ok()) {
      still_staged = std::any_of(table.begin(), table.end(), [&](const MountEntry& e) {
        return e.major_minor == *devnum || IsBindOfDeviceNode(e, device);
      });
    }
  }
  if (!still_staged) return OkStatus();
  if (staged.staging_path != staging_path) {
    return FailedPrecondition("volume " + volume_id + " is already staged at " + staged.staging_path +
                              "; NodeUnstageVolume it there before staging it at " + staging_path);
  }
  if (staged.block() && !block) {
    return AlreadyExists("volume " + volume_id + " is staged at " + staging_path +
                         " as raw block; the request asks for a " + fs_type + " filesystem");
  }
  return OkStatus();
}

}  // namespace blockcsi::node_internal
