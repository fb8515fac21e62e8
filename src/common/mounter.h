// Mounter: mounting, bind mounting, unmounting and reading the mount table.
// The real implementation uses libmount; tests use an in-memory fake.
// Implementations must be thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mountinfo.h"
#include "common/status.h"

namespace blockcsi {

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
  // Detaches `target` from the tree now and lets the kernel finish the
  // unmount when its last user goes (MNT_DETACH): for a filesystem whose
  // device is gone and that cannot be unmounted cleanly. Default:
  // UNIMPLEMENTED (a mounter that cannot).
  virtual Status UnmountLazily(const std::string& target) {
    return Status(StatusCode::kUnimplemented, "lazy unmount of " + target + " is not supported here");
  }
  virtual StatusOr<std::vector<MountEntry>> List() = 0;
};

// Finds the entry mounted at `target` (the last one wins, as the kernel's view does).
const MountEntry* FindMountAt(const std::vector<MountEntry>& table, std::string_view target);

std::unique_ptr<Mounter> MakeLibmountMounter();

}  // namespace blockcsi
