#include "common/duration.h"

#include <charconv>

namespace blockcsi {

StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  auto bad = [&] {
    return InvalidArgument("duration \"" + std::string(text) +
                           "\" must be a number with a unit: ms, s, m or h (e.g. 500ms, 2s, 1m)");
  };
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr == text.data()) return bad();
  std::string_view unit(ptr, static_cast<size_t>(text.data() + text.size() - ptr));
  uint64_t factor = 0;
  if (unit == "ms")
    factor = 1;
  else if (unit == "s")
    factor = 1000;
  else if (unit == "m")
    factor = 60'000;
  else if (unit == "h")
    factor = 3'600'000;
  else
    return bad();
  if (value > (uint64_t{1} << 40) / factor) return bad();
  return std::chrono::milliseconds(static_cast<int64_t>(value * factor));
}

std::string FormatDuration(std::chrono::milliseconds d) {
  auto ms = d.count();
  if (ms % 3'600'000 == 0 && ms != 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0 && ms != 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0 && ms != 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

}  // namespace blockcsi
