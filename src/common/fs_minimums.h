// The smallest device each filesystem's mkfs formats on this host, so that
// CreateVolume can size a volume its node will be able to stage, and
// NodeStageVolume can refuse a device that is too small in one line instead
// of failing in mkfs. Asked of the mkfs programs themselves where they tell
// (mkfs.xfs -N, a dry run, on a too-small size: "Filesystem must be larger
// than 300MB."; mkfs.btrfs on a 1 MiB scratch file: "minimum size for each
// btrfs device is 114294784"), else Debian 12's figures. Each program is
// asked once per process, in a private scratch directory removed after.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/executor.h"
#include "common/host.h"
#include "common/mutex.h"

namespace blockcsi {

// xfsprogs 6.1 (Debian 12): 300 MiB. btrfs-progs 6.2: 114294784 bytes.
inline constexpr uint64_t kXfsMinimumBytesFallback = uint64_t{300} << 20;
inline constexpr uint64_t kBtrfsMinimumBytesFallback = 114294784;

// The minimum mkfs.xfs states ("must be larger than 300MB": xfsprogs' MB
// are MiB), 0 when the text does not say. Pure.
uint64_t ParseXfsMinimum(std::string_view mkfs_output);
// The minimum mkfs.btrfs states, 0 when the text does not say. Pure.
uint64_t ParseBtrfsMinimum(std::string_view mkfs_output);

class FilesystemMinimums {
 public:
  // `scratch_parent`: where the probe's private directory is made, through
  // `host`.
  FilesystemMinimums(std::shared_ptr<Executor> executor, std::shared_ptr<const Host> host,
                     std::string scratch_parent = "/tmp");
  FilesystemMinimums(const FilesystemMinimums&) = delete;
  FilesystemMinimums& operator=(const FilesystemMinimums&) = delete;

  // Bytes; 0 for a filesystem without a minimum worth enforcing (ext4,
  // which mke2fs makes on a few MiB) or one we do not know.
  uint64_t MinimumBytes(const std::string& fs_type);

 private:
  uint64_t Probe(const std::string& fs_type);

  const std::shared_ptr<Executor> executor_;
  const std::string scratch_parent_;
  const std::shared_ptr<const Host> host_;
  Mutex mu_;
  std::map<std::string, uint64_t> known_ GUARDED_BY(mu_);
};

}  // namespace blockcsi
