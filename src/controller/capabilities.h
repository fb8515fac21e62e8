// Volume capabilities as this driver understands them: which access modes and
// access types it serves, how two publishes are compared, and the controller
// capabilities it advertises. Pure functions; thread-safe.
//
// The rules, from the block device's point of view:
//   - Any access mode works for raw block: sharing a LUN between nodes is
//     the application's business (a cluster filesystem, a database with its
//     own fencing).
//   - Mount volumes carry ext4/xfs, which are not cluster filesystems: a
//     multi-node writer mode on a mount volume is INVALID_ARGUMENT.
//     MULTI_NODE_READER_ONLY mounts are fine (read-only on every node).
//   - Single-node modes (SINGLE_NODE_*) admit one node at a time.
//   - MULTI_NODE_SINGLE_WRITER admits many nodes but one writable grant.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "csi.pb.h"

namespace blockcsi {

using AccessMode = csi::v1::VolumeCapability::AccessMode::Mode;

// INVALID_ARGUMENT naming `what` (e.g. "volume \"pvc-1\"") when the
// capability is missing its access type or mode, names an unknown mode, asks
// for a multi-node writer on a mount volume, or an unsupported fs_type (the
// node's ValidateAccessTypeAndMode checks the same modes, without fs_type).
Status ValidateCapabilityAndFsType(const csi::v1::VolumeCapability& capability, std::string_view what);

bool IsSingleNodeMode(AccessMode mode);
bool IsReadOnlyMode(AccessMode mode);
bool IsBlock(const csi::v1::VolumeCapability& capability);

// The fingerprint stored with a grant (AccessGrant::capability): access type
// and mode, e.g. "mount/SINGLE_NODE_WRITER". The fs_type and mount flags are
// left out on purpose: they are the node's concern and a second publish
// with other mount flags is the same attachment.
std::string CapabilityFingerprint(const csi::v1::VolumeCapability& capability);
// The access mode a fingerprint was made from (UNKNOWN when unparsable).
AccessMode ModeFromFingerprint(std::string_view fingerprint);

std::string_view AccessModeName(AccessMode mode);

void AddControllerCapabilities(csi::v1::ControllerGetCapabilitiesResponse* response);

}  // namespace blockcsi
