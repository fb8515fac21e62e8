#include "common/strings.h"

#include <cctype>

namespace blockcsi {

std::string EscapeVolumeIdForFile(const std::string& volume_id) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : volume_id) {
    bool safe = std::isalnum(c) || c == '-' || c == '_' || (c == '.' && !out.empty());
    if (safe) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

StatusOr<std::string> UnescapeVolumeIdFromFile(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] != '%') {
      out += name[i];
      continue;
    }
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    if (i + 2 >= name.size()) return InvalidArgument("bad escape in " + name);
    int hi = hex(name[i + 1]), lo = hex(name[i + 2]);
    if (hi < 0 || lo < 0) return InvalidArgument("bad escape in " + name);
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace blockcsi
