// String helpers shared by every layer: one home, so that no folder grows
// its own copy. Pure functions; thread-safe.
#pragma once

#include <string>

#include "common/status.h"

namespace blockcsi {

// Volume ids become file names: every byte outside [A-Za-z0-9._-] is
// written %XX, so any id maps to one safe, reversible name.
std::string EscapeVolumeIdForFile(const std::string& volume_id);
StatusOr<std::string> UnescapeVolumeIdFromFile(const std::string& name);

}  // namespace blockcsi
