// Durations as our flags write them: "500ms", "2s", "1m", "1h" (one unit).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/status.h"

namespace blockcsi {

StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text);
std::string FormatDuration(std::chrono::milliseconds d);

}  // namespace blockcsi
