// The mount table as the kernel prints it (/proc/self/mountinfo): a pure
// parser, apart from Mounter so that a program that only reads the table
// (the bridge) does not link libmount.
#pragma once

#include <string>
#include <string_view>
#include <vector>

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

}  // namespace blockcsi
