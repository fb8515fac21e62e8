// The kernel initiator's objects as sysfs shows them, read through the
// rooted Host (tests point it at a fake tree): iSCSI sessions, their
// SCSI host, the LUN's SCSI device and block device, and dm-multipath maps.
// Everything is found by walking session → host → target → LUN → block;
// nothing depends on udev links. Pure reads and sysfs attribute writes;
// thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/host.h"
#include "common/lun_identity.h"
#include "common/status.h"
#include "contract/iscsi_names.h"

namespace blockcsi {

struct IscsiSessionInfo {
  std::string sid;         // "3" for session3
  std::string host;        // "host5"
  std::string device_dir;  // "/sys/devices/platform/host5/session3"
  std::string state;       // "LOGGED_IN", "FAILED", ...
};

// The session of (target, portal, iface) — nullopt when not logged in.
// `iface` empty matches any.
std::optional<IscsiSessionInfo> FindIscsiSession(const Host& fs, const std::string& target_iqn, const Portal& portal,
                                                 const std::string& iface);

// "/sys/devices/.../target5:0:0/5:0:0:<lun>" dirs of `lun` under the session
// (normally one), and the other LUNs' SCSI devices present there.
std::vector<std::string> ScsiDevicesOfLun(const Host& fs, const IscsiSessionInfo& session, int lun);
std::vector<std::string> OtherLunDevices(const Host& fs, const IscsiSessionInfo& session, int lun);

// The block device name ("sdc") of a SCSI device dir; NOT_FOUND until the
// kernel has created it.
StatusOr<std::string> BlockNameOfScsiDevice(const Host& fs, const std::string& scsi_device_dir);

// Asks the SCSI host to scan just this LUN ("- - <lun>" to .../scan).
Status ScanLun(const Host& fs, const IscsiSessionInfo& session, int lun);

// /sys/block/<name>/size in bytes.
StatusOr<uint64_t> BlockDeviceSize(const Host& fs, const std::string& name);
// VPD 0x80/0x83 of a SCSI disk ("sdc"), from its vpd_pg80/vpd_pg83 files.
StatusOr<LunIdentity> ReadSysfsIdentity(const Host& fs, const std::string& name);

// The dm-multipath map ("dm-2") holding block device `name`, if any.
std::optional<std::string> MultipathHolder(const Host& fs, const std::string& name);
std::vector<std::string> MultipathSlaves(const Host& fs, const std::string& dm);
std::string DmName(const Host& fs, const std::string& dm);

}  // namespace blockcsi
