// What the node lets a StorageClass or a PersistentVolume ask for: the
// filesystem types it formats, the mount flags it passes to the kernel and
// the extra mkfs options (volume_context mkfsOptions). Everything is checked
// against allow-lists and turned into argv, never into a shell string, so a
// parameter cannot force a format (-f/-F), name another device, or mount
// with dev/suid. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace blockcsi {

inline constexpr char kDefaultFsType[] = "ext4";

// ext4, xfs, btrfs.
bool IsStageableFsType(std::string_view fs_type);

// INVALID_ARGUMENT naming the volume and the first flag that is not allowed
// for `fs_type` ("" for raw block: no flag is allowed then).
Status ValidateMountFlags(std::string_view volume_id, std::string_view fs_type, const std::vector<std::string>& flags);

// Splits `text` on whitespace and validates each option for `fs_type`'s mkfs.
// INVALID_ARGUMENT naming the volume and the offending option.
StatusOr<std::vector<std::string>> ParseMkfsOptions(std::string_view volume_id, std::string_view fs_type,
                                                    std::string_view text);

// The mkfs argv for a blank device: fast and safe defaults (no discard, lazy
// inode table and journal init for ext4), then `extra`; never a force flag,
// so mkfs itself refuses a device that gained a signature since the probe.
std::vector<std::string> MkfsArgv(std::string_view fs_type, const std::string& device,
                                  const std::vector<std::string>& extra);

}  // namespace blockcsi
