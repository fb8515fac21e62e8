#include "controller/capabilities.h"

#include "controller/parameters.h"

namespace blockcsi {

using Mode = csi::v1::VolumeCapability::AccessMode;

std::string_view AccessModeName(AccessMode mode) {
  switch (mode) {
    case Mode::SINGLE_NODE_WRITER:
      return "SINGLE_NODE_WRITER";
    case Mode::SINGLE_NODE_READER_ONLY:
      return "SINGLE_NODE_READER_ONLY";
    case Mode::MULTI_NODE_READER_ONLY:
      return "MULTI_NODE_READER_ONLY";
    case Mode::MULTI_NODE_SINGLE_WRITER:
      return "MULTI_NODE_SINGLE_WRITER";
    case Mode::MULTI_NODE_MULTI_WRITER:
      return "MULTI_NODE_MULTI_WRITER";
    case Mode::SINGLE_NODE_SINGLE_WRITER:
      return "SINGLE_NODE_SINGLE_WRITER";
    case Mode::SINGLE_NODE_MULTI_WRITER:
      return "SINGLE_NODE_MULTI_WRITER";
    default:
      return "UNKNOWN";
  }
}

bool IsSingleNodeMode(AccessMode mode) {
  return mode == Mode::SINGLE_NODE_WRITER || mode == Mode::SINGLE_NODE_READER_ONLY ||
         mode == Mode::SINGLE_NODE_SINGLE_WRITER || mode == Mode::SINGLE_NODE_MULTI_WRITER;
}

bool IsReadOnlyMode(AccessMode mode) {
  return mode == Mode::SINGLE_NODE_READER_ONLY || mode == Mode::MULTI_NODE_READER_ONLY;
}

bool IsBlock(const csi::v1::VolumeCapability& capability) { return capability.has_block(); }

Status ValidateCapabilityAndFsType(const csi::v1::VolumeCapability& capability, std::string_view what) {
  auto bad = [&](const std::string& why) { return InvalidArgument(std::string(what) + ": " + why); };
  if (!capability.has_block() && !capability.has_mount()) {
    return bad("volume capability has no access type (block or mount)");
  }
  if (!capability.has_access_mode()) return bad("volume capability has no access mode");
  AccessMode mode = capability.access_mode().mode();
  if (AccessModeName(mode) == "UNKNOWN") {
    return bad("access mode " + std::to_string(static_cast<int>(mode)) + " is not supported");
  }
  if (capability.has_mount()) {
    if (mode == Mode::MULTI_NODE_SINGLE_WRITER || mode == Mode::MULTI_NODE_MULTI_WRITER) {
      return bad("access mode " + std::string(AccessModeName(mode)) +
                 " needs a raw block volume: ext4 and xfs cannot be mounted writable on several nodes");
    }
    const std::string& fs = capability.mount().fs_type();
    if (!fs.empty() && !IsSupportedFsType(fs)) {
      return bad("fs_type \"" + fs + "\" is not supported (ext4, xfs or btrfs)");
    }
  }
  return OkStatus();
}

std::string CapabilityFingerprint(const csi::v1::VolumeCapability& capability) {
  return std::string(capability.has_block() ? "block/" : "mount/") +
         std::string(AccessModeName(capability.access_mode().mode()));
}

AccessMode ModeFromFingerprint(std::string_view fingerprint) {
  auto slash = fingerprint.find('/');
  if (slash == std::string_view::npos) return Mode::UNKNOWN;
  std::string_view name = fingerprint.substr(slash + 1);
  for (int m = Mode::Mode_MIN; m <= Mode::Mode_MAX; ++m) {
    if (Mode::Mode_IsValid(m) && AccessModeName(static_cast<AccessMode>(m)) == name) {
      return static_cast<AccessMode>(m);
    }
  }
  return Mode::UNKNOWN;
}

void AddControllerCapabilities(csi::v1::ControllerGetCapabilitiesResponse* response) {
  using Rpc = csi::v1::ControllerServiceCapability::RPC;
  for (auto type :
       {Rpc::CREATE_DELETE_VOLUME, Rpc::PUBLISH_UNPUBLISH_VOLUME, Rpc::LIST_VOLUMES, Rpc::LIST_VOLUMES_PUBLISHED_NODES,
        Rpc::GET_CAPACITY, Rpc::CREATE_DELETE_SNAPSHOT, Rpc::LIST_SNAPSHOTS, Rpc::CLONE_VOLUME, Rpc::EXPAND_VOLUME,
        Rpc::PUBLISH_READONLY, Rpc::GET_VOLUME, Rpc::VOLUME_CONDITION, Rpc::SINGLE_NODE_MULTI_WRITER}) {
    response->add_capabilities()->mutable_rpc()->set_type(type);
  }
}

}  // namespace blockcsi
