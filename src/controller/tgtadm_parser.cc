#include "controller/tgtadm_parser.h"

#include <charconv>

namespace blockcsi {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

size_t Indent(std::string_view line) {
  size_t n = 0;
  while (n < line.size() && line[n] == ' ') ++n;
  return n;
}

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

template <typename T>
bool ParseNumber(std::string_view s, T* out) {
  s = Trim(s);
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// "Key: value" → value, when the line starts with `key` + ':'.
bool Field(std::string_view line, std::string_view key, std::string_view* value) {
  if (!StartsWith(line, key) || line.size() <= key.size() || line[key.size()] != ':') return false;
  *value = Trim(line.substr(key.size() + 1));
  return true;
}

Status Unexpected(int line_number, std::string_view line) {
  return InvalidArgument("tgtadm output line " + std::to_string(line_number) + " not understood: \"" +
                         std::string(line) + "\"");
}

}  // namespace

const TgtLun* TgtTarget::FindLun(int lun_number) const {
  for (const auto& lun : luns) {
    if (lun.lun == lun_number) return &lun;
  }
  return nullptr;
}

StatusOr<std::vector<TgtTarget>> ParseTgtadmTargets(std::string_view text) {
  enum class Section { kNone, kSystem, kNexus, kLun, kAccount, kAcl };
  std::vector<TgtTarget> targets;
  Section section = Section::kNone;
  int line_number = 0;
  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view raw = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ++line_number;
    std::string_view line = Trim(raw);
    if (line.empty()) continue;
    size_t indent = Indent(raw);
    std::string_view value;
    if (indent == 0) {
      // "Target 1: iqn..."
      if (!StartsWith(line, "Target ")) return Unexpected(line_number, line);
      size_t colon = line.find(':');
      TgtTarget target;
      if (colon == std::string_view::npos || !ParseNumber(line.substr(7, colon - 7), &target.tid)) {
        return Unexpected(line_number, line);
      }
      target.iqn = std::string(Trim(line.substr(colon + 1)));
      // A target without a name cannot be matched to a volume: reconcile
      // must see an error, not a nameless target (found by fuzzing).
      if (target.iqn.empty()) return Unexpected(line_number, line);
      targets.push_back(std::move(target));
      section = Section::kNone;
      continue;
    }
    if (targets.empty()) return Unexpected(line_number, line);
    TgtTarget& target = targets.back();
    if (indent == 4) {
      if (line == "System information:") {
        section = Section::kSystem;
      } else if (line == "I_T nexus information:") {
        section = Section::kNexus;
      } else if (line == "LUN information:") {
        section = Section::kLun;
      } else if (line == "Account information:") {
        section = Section::kAccount;
      } else if (line == "ACL information:") {
        section = Section::kAcl;
      } else {
        return Unexpected(line_number, line);
      }
      continue;
    }
    switch (section) {
      case Section::kSystem:
        break;  // driver and state: nothing we act on
      case Section::kNexus:
        if (Field(line, "I_T nexus", &value)) {
          TgtSession session;
          if (!ParseNumber(value, &session.sid)) return Unexpected(line_number, line);
          target.sessions.push_back(std::move(session));
        } else if (target.sessions.empty()) {
          return Unexpected(line_number, line);
        } else if (Field(line, "Initiator", &value)) {
          // "iqn... alias: none": an initiator name has no spaces.
          target.sessions.back().initiator = std::string(value.substr(0, value.find(' ')));
        } else if (Field(line, "Connection", &value)) {
          TgtConnection conn;
          if (!ParseNumber(value, &conn.cid)) return Unexpected(line_number, line);
          target.sessions.back().connections.push_back(conn);
        } else if (Field(line, "IP Address", &value)) {
          if (!target.sessions.back().connections.empty()) {
            target.sessions.back().connections.back().address = std::string(value);
          }
        }
        break;
      case Section::kLun:
        if (Field(line, "LUN", &value)) {
          TgtLun lun;
          if (!ParseNumber(value, &lun.lun)) return Unexpected(line_number, line);
          target.luns.push_back(std::move(lun));
        } else if (target.luns.empty()) {
          return Unexpected(line_number, line);
        } else if (Field(line, "Type", &value)) {
          target.luns.back().type = std::string(value);
        } else if (Field(line, "SCSI ID", &value)) {
          target.luns.back().scsi_id = std::string(value);
        } else if (Field(line, "SCSI SN", &value)) {
          target.luns.back().scsi_sn = std::string(value);
        } else if (Field(line, "Size", &value)) {
          // "67 MB, Block size: 512"
          std::string_view mb = value.substr(0, value.find(' '));
          if (!ParseNumber(mb, &target.luns.back().size_mb)) return Unexpected(line_number, line);
        } else if (Field(line, "Backing store path", &value)) {
          target.luns.back().backing_path = value == "None" ? "" : std::string(value);
        }
        break;
      case Section::kAccount: {
        constexpr std::string_view kOutgoing = " (outgoing)";
        if (line.size() > kOutgoing.size() && line.substr(line.size() - kOutgoing.size()) == kOutgoing) {
          target.outgoing_accounts.emplace_back(line.substr(0, line.size() - kOutgoing.size()));
        } else {
          target.incoming_accounts.emplace_back(line);
        }
        break;
      }
      case Section::kAcl:
        target.acls.emplace_back(line);
        break;
      case Section::kNone:
        return Unexpected(line_number, line);
    }
  }
  return targets;
}

StatusOr<std::vector<std::string>> ParseTgtadmAccounts(std::string_view text) {
  std::vector<std::string> accounts;
  bool header = false;
  int line_number = 0;
  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view raw = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ++line_number;
    std::string_view line = Trim(raw);
    if (line.empty()) continue;
    if (line == "Account list:") {
      header = true;
      continue;
    }
    if (!header || Indent(raw) == 0) return Unexpected(line_number, line);
    accounts.emplace_back(line);
  }
  return accounts;
}

}  // namespace blockcsi
