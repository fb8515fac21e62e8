// Mounter: mounting, bind mounting, unmounting and reading the mount table.
// The real implementation uses libmount; tests use an in-memory fake.
// Implementations must be thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace blockcsi {

struct MountEntry {
  int mount_id = 0;
  std::string major_minor;  // "7:3" — the device backing the mount
  std::string root;         // path inside the filesystem ("/" unless a bind of a subdir)
  std::string target;       // where it is mounted
  std::string fs_type;
  std::string source;   // e.g. /dev/loop3
  std::string options;  // per-mount options, e.g. "rw,relatime"
  bool read_only() const;
};

// Parses /proc/self/mountinfo text. Pure; malformed lines are skipped.
std::vector<MountEntry> ParseMountInfo(std::string_view text);

class Mounter {
 public:
  virtual ~Mounter() = default;
  // Mounts `source` at `target` with filesystem `fs_type` and comma separated
  // `options` (may be empty).
  virtual Status Mount(const std::string& source, const std::string& target, const std::string& fs_type,
                       const std::string& options) = 0;
  // Bind mounts `source` (a directory or a device node) onto `target`;
  // read-only binds are remounted read-only, as the kernel requires.
  virtual Status BindMount(const std::string& source, const std::string& target, bool read_only) = 0;
  // Unmounts `target`; not mounted is NOT_FOUND.
  virtual Status Unmount(const std::string& target) = 0;
  virtual StatusOr<std::vector<MountEntry>> List() = 0;
};

// Finds the entry mounted at `target` (the last one wins, as the kernel's view does).
const MountEntry* FindMountAt(const std::vector<MountEntry>& table, std::string_view target);

std::unique_ptr<Mounter> MakeLibmountMounter();

}  // namespace blockcsi
