// A read-mostly view of the host's /sys and /dev under a root directory, so
// tests point it at a temp tree. Paths passed in are absolute host paths
// ("/sys/class/iscsi_session"); the root is prepended. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace blockcsi {

class Filesystem {
 public:
  virtual ~Filesystem() = default;
  virtual StatusOr<std::string> ReadFile(const std::string& path) const = 0;
  virtual Status WriteFile(const std::string& path, const std::string& contents) const = 0;
  // Crash-safe replacement of a regular file (temp + fsync + rename, mode
  // 0600), for configuration that may hold secrets (open-iscsi node records):
  // after a crash the file holds the old contents or the new, never a mix.
  virtual Status ReplaceFile(const std::string& path, const std::string& contents) const = 0;
  virtual StatusOr<std::vector<std::string>> ListDir(const std::string& path) const = 0;  // sorted names
  virtual StatusOr<std::string> ReadLink(const std::string& path) const = 0;
  virtual bool Exists(const std::string& path) const = 0;
  // The real path the seam maps `path` to (for handing to other programs).
  virtual std::string Resolve(const std::string& path) const = 0;
};

// `root` "" or "/" means the real host.
std::unique_ptr<Filesystem> MakeRootedFilesystem(std::string root);

// ReadFile with surrounding whitespace trimmed (sysfs values end in '\n').
StatusOr<std::string> ReadTrimmed(const Filesystem& fs, const std::string& path);

}  // namespace blockcsi
