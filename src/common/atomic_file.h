// Crash-safe file replacement: write a temp file beside the target, fsync
// it, rename it over the target, fsync the directory. After a crash at any
// point the target holds the old contents or the new, never a mix.
// Stateless; concurrent writers of one path must be serialised by the caller.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace blockcsi {

struct AtomicWriteOptions {
  mode_t mode = 0600;
  // Called right after each durable step succeeded, in order: "temp-written",
  // "temp-synced" (fsync of the temp file), "renamed", "dir-synced" (fsync of
  // the directory). Tests record the order or crash between steps;
  // AttachRecordStore arms fault points with it.
  std::function<void(std::string_view step)> step_hook;
};

Status WriteFileAtomically(const std::string& path, std::string_view contents, const AtomicWriteOptions& options = {});

StatusOr<std::string> ReadFileToString(const std::string& path);

// Removes `path` and fsyncs its directory; a missing file is OK.
Status RemoveFileDurably(const std::string& path);

// mkdir -p with `mode` for directories it creates.
Status MakeDirectories(const std::string& path, mode_t mode = 0700);

}  // namespace blockcsi
