// Formatting, checking and growing filesystems through the Executor seam:
// the exact argv each step runs is here, in one place, so the unit tests
// can hold it to the letter. Stateless; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/executor.h"
#include "common/host.h"
#include "common/status.h"

namespace blockcsi {

// mkfs on a device the caller has probed blank. `extra` comes from
// ParseMkfsOptions. A failure names the volume and carries mkfs's stderr.
Status FormatDevice(Executor& executor, const std::string& volume_id, const std::string& fs_type,
                    const std::string& device, const std::vector<std::string>& extra);

// ext4 only: when the superblock says the filesystem is not clean or its
// journal needs recovery, run `e2fsck -p` before mounting. Errors e2fsck
// cannot fix unattended → FAILED_PRECONDITION (an operator must look).
Status RepairExt4IfNeeded(Executor& executor, const std::string& volume_id, const std::string& device);

// Grows the mounted filesystem to fill its (already rescanned) device:
// xfs_growfs / resize2fs / btrfs filesystem resize max. ext4 online growth
// needs CAP_SYS_RESOURCE; without it → FAILED_PRECONDITION saying so.
Status GrowFilesystem(Executor& executor, const Host& host, const std::string& volume_id, const std::string& fs_type,
                      const std::string& device, const std::string& mount_path);

}  // namespace blockcsi
