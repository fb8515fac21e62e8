// The publish_context schema: what ControllerPublishVolume returns and
// NodeStageVolume receives (through VolumeAttachment.status.attachmentMetadata).
// Both sides use these names and nothing else. Never a secret in here.
#pragma once

namespace blockcsi::publish_context {

// Comma separated portals, "host:port" each ("[v6]:port" for IPv6), in
// preference order.
inline constexpr char kPortals[] = "portals";
inline constexpr char kTargetIqn[] = "targetIqn";
inline constexpr char kLun[] = "lun";
// The LUN's identity as the target reports it: VPD 0x80 unit serial and the
// NAA WWN from VPD 0x83 (hex, no prefix). The node refuses any other LUN.
// At least one of the two must be present. With tgt: `scsi_sn=<serial>`
// sets page 0x80; page 0x83 carries an NAA 3 built from tid and LUN (not
// unique: a reused tid repeats it) and an NAA 6 built from the hex digits
// of `scsi_id`, so `scsi_id=6<31 hex digits>` makes the wwn exactly that
// string (lower case). The node accepts a wwn matching any NAA designator.
inline constexpr char kSerial[] = "serial";
inline constexpr char kWwn[] = "wwn";
// "true" when the target requires CHAP; the node then needs node-stage
// secrets (see the secret keys below).
inline constexpr char kChapRequired[] = "chapRequired";
// "iscsi" (default) or "rbd".
inline constexpr char kTransport[] = "transport";
// "true" when the attachment is read-only (PUBLISH_READONLY).
inline constexpr char kReadOnly[] = "readOnly";

}  // namespace blockcsi::publish_context

namespace blockcsi::volume_context {

inline constexpr char kFsType[] = "fsType";
inline constexpr char kMkfsOptions[] = "mkfsOptions";

}  // namespace blockcsi::volume_context

namespace blockcsi::secret_keys {

// Keys of the CSI secrets (controller-publish and node-stage) for CHAP.
inline constexpr char kChapUsername[] = "chap-username";
inline constexpr char kChapPassword[] = "chap-password";
inline constexpr char kChapMutualUsername[] = "chap-mutual-username";
inline constexpr char kChapMutualPassword[] = "chap-mutual-password";

}  // namespace blockcsi::secret_keys
