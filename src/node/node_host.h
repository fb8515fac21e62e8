// NodeHost: the node service's remaining contact with the host beyond the
// Mounter, BlockProbe and Executor seams: target paths (make, remove,
// inspect), device numbers, statvfs, block device sizes and capabilities.
// Unit tests use an in-memory fake. Implementations must be thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace blockcsi {

struct FsUsage {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t total_inodes = 0;
  uint64_t free_inodes = 0;
  uint64_t used_inodes = 0;
  // ST_RDONLY: the mount or its filesystem is read-only (a filesystem the
  // kernel remounted read-only after I/O errors shows up here).
  bool read_only = false;
};

enum class PathKind { kMissing, kDirectory, kBlockDevice, kFile, kOther };

class NodeHost {
 public:
  virtual ~NodeHost() = default;
  virtual PathKind Kind(const std::string& path) = 0;
  // mkdir -p (0750 for what it creates).
  virtual Status MakeDirectory(const std::string& path) = 0;
  // An empty regular file (parents created) for a raw block bind target.
  virtual Status MakeFile(const std::string& path) = 0;
  // rmdir or unlink; a missing path is OK.
  virtual Status RemovePath(const std::string& path) = 0;
  // "major:minor" of a block device node, as mountinfo prints it.
  virtual StatusOr<std::string> DeviceNumber(const std::string& device) = 0;
  virtual StatusOr<uint64_t> BlockDeviceSize(const std::string& device) = 0;
  // What loop device `loop_name` ("loop7") reads from (sysfs backing_file);
  // NOT_FOUND when it is not a configured loop device.
  virtual StatusOr<std::string> LoopBackingFile(const std::string& loop_name) = 0;
  virtual StatusOr<FsUsage> StatFs(const std::string& path) = 0;
  // CAP_SYS_RESOURCE in the effective set: the kernel asks for it to grow a
  // mounted ext4.
  virtual bool HasCapSysResource() = 0;
};

std::unique_ptr<NodeHost> MakeRealNodeHost();

}  // namespace blockcsi
