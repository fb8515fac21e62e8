// BlockProbe: what a block device already carries, read with libblkid.
// The node formats a device only when this reports nothing at all.
// Implementations must be thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

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

}  // namespace blockcsi
