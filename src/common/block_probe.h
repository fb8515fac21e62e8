// BlockProbe: what a block device already carries, read with libblkid.
// The node formats a device only when this reports nothing at all.
// Implementations must be thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace blockcsi {

struct BlockSignature {
  std::string type;   // "ext4", "xfs", "dos", "gpt", "LVM2_member", "linux_raid_member", ...
  std::string usage;  // "filesystem", "partition_table", "raid", "crypto", "other"
  std::string uuid;
  std::string label;
};

struct ProbeResult {
  uint64_t size_bytes = 0;
  std::vector<BlockSignature> signatures;  // empty = blank device
  bool blank() const { return signatures.empty(); }
  // "ext4 (filesystem), dos (partition_table)" for messages.
  std::string Describe() const;
};

class BlockProbe {
 public:
  virtual ~BlockProbe() = default;
  virtual StatusOr<ProbeResult> Probe(const std::string& device) = 0;
};

std::unique_ptr<BlockProbe> MakeBlkidProbe();

// Opens `device` and sets its soft block size to its logical sector size,
// for as long as the returned descriptor stays open (the kernel keeps the
// size only while the device is open). Why: a block device's page cache
// otherwise works in 4 KiB blocks once its size allows, so each 1 KiB write
// of mkfs.ext4 (superblock copies, group descriptors, bitmaps) first reads
// the whole 4 KiB block; through a userspace bridge that is one synchronous
// round trip to the target each, 76 for a 64 MiB ext4. With
// sector-sized blocks a covered block is never read; the same bytes are
// written. Best effort: a path it cannot open or set (a test's fake device)
// gives an empty descriptor, and mkfs only runs slower.
UniqueFd HoldSectorBlockSize(const std::string& device);

}  // namespace blockcsi
