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
// "true" for a static volume (static_volume.h): a LUN blockcsi did not
// create, so serial/wwn are optional (checked when given) and the PV may
// name the initiator the array's ACL expects (kInitiatorName).
inline constexpr char kStatic[] = "static";
inline constexpr char kInitiatorName[] = "initiatorName";

// Transport "rbd" (portals, targetIqn, lun and serial/wwn do not apply):
// the pool and image, the image id the node verifies in place of a SCSI
// serial, the monitors (mon_host syntax) and the cephx id to open it as.
inline constexpr char kRbdPool[] = "rbdPool";
inline constexpr char kRbdImage[] = "rbdImage";
inline constexpr char kRbdImageId[] = "rbdImageId";
inline constexpr char kCephMonitors[] = "cephMonitors";
inline constexpr char kCephUser[] = "cephUser";

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

// cephx credentials (node-stage and controller secrets), ceph-csi's names so
// that one Secret serves both drivers.
inline constexpr char kCephUserId[] = "userID";
inline constexpr char kCephUserKey[] = "userKey";

}  // namespace blockcsi::secret_keys
