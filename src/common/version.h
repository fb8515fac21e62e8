// Build identity, filled in by CMake at configure time.
#pragma once

#include <string_view>

namespace blockcsi {

std::string_view BuildVersion();  // e.g. "0.1.0"
std::string_view BuildCommit();   // git describe, or "unknown"

}  // namespace blockcsi
