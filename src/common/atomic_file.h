// Crash-safe file replacement: write a temp file beside the target, fsync
// it, rename it over the target, fsync the directory. After a crash at any
// point the target holds the old contents or the new, never a mix.
// Stateless; concurrent writers of one path must be serialised by the caller.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/fault_points.h"
#include "common/status.h"

namespace blockcsi {

// The fault points (common/fault_points.h) of one write, each reached right
// after its durable step succeeded, in this order. Whole names at the
// caller ("node.record.renamed"), so that hack/check_fault_points.py finds
// every point in the source.
struct AtomicWritePoints {
  std::string_view temp_written;  // the temp file holds the contents
  std::string_view temp_synced;   // the temp file was fsynced
  std::string_view renamed;       // it replaced the target
  std::string_view dir_synced;    // the directory was fsynced
};

struct AtomicWriteOptions {
  mode_t mode = 0600;
  // None: no points. An error from `fault_hook` at a point ends the write
  // there (before the rename: no temp left).
  std::optional<AtomicWritePoints> fault_points;
  FaultHook fault_hook;
  // false: no fsync of the directory after the rename (and no dir-synced
  // point). The temp file is still synced before the rename, so the target
  // is never torn; only the rename may roll back to the previous version
  // after a power loss. For a file whose previous version, already durable,
  // serves as well after a reboot (say why at the call).
  bool sync_directory = true;
};

Status WriteFileAtomically(const std::string& path, std::string_view contents, const AtomicWriteOptions& options = {});

StatusOr<std::string> ReadFileToString(const std::string& path);

// Removes `path` and fsyncs its directory; a missing file is OK.
Status RemoveFileDurably(const std::string& path);

// mkdir -p with `mode` for directories it creates.
Status MakeDirectories(const std::string& path, mode_t mode = 0700);

}  // namespace blockcsi
