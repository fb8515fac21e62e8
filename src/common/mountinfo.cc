#include "common/mountinfo.h"

#include <sstream>

namespace blockcsi {

bool MountEntry::read_only() const {
  std::stringstream ss(options);
  std::string opt;
  while (std::getline(ss, opt, ',')) {
    if (opt == "ro") return true;
  }
  return false;
}

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo octal.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::vector<MountEntry> ParseMountInfo(std::string_view text) {
  std::vector<MountEntry> entries;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::vector<std::string> parts;
    std::string part;
    while (fields >> part) parts.push_back(part);
    // id parent maj:min root target options [optional...] - fstype source superopts
    size_t sep = 0;
    for (size_t i = 6; i < parts.size(); ++i) {
      if (parts[i] == "-") {
        sep = i;
        break;
      }
    }
    if (parts.size() < 10 || sep == 0 || sep + 2 >= parts.size()) continue;
    MountEntry e;
    try {
      e.mount_id = std::stoi(parts[0]);
    } catch (...) {
      continue;
    }
    e.major_minor = parts[2];
    e.root = Unescape(parts[3]);
    e.target = Unescape(parts[4]);
    e.options = parts[5];
    e.fs_type = parts[sep + 1];
    e.source = Unescape(parts[sep + 2]);
    entries.push_back(std::move(e));
  }
  return entries;
}

}  // namespace blockcsi
