// String helpers shared by every layer: one home, so that no folder grows
// its own copy. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace blockcsi {

// Volume ids become file names: every byte outside [A-Za-z0-9._-] is
// written %XX, so any id maps to one safe, reversible name.
std::string EscapeVolumeIdForFile(const std::string& volume_id);
StatusOr<std::string> UnescapeVolumeIdFromFile(const std::string& name);

// `s` without leading and trailing whitespace (space, tab, CR, LF, VT, FF).
std::string_view TrimWhitespace(std::string_view s);

// Every item between `sep`s, empty ones included ("a,,b" gives three, ""
// gives one empty item), so that a caller can report an empty item.
std::vector<std::string> SplitString(std::string_view s, char sep);

// The items with `sep` between them.
std::string JoinStrings(const std::vector<std::string>& items, std::string_view sep);

// ASCII lower case; other bytes as they are.
std::string AsciiLower(std::string_view s);
bool StartsWithNoCase(std::string_view s, std::string_view prefix);

// Two lower-case hex digits per byte.
std::string HexEncode(std::string_view bytes);

}  // namespace blockcsi
