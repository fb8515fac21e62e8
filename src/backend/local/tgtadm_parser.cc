#include "backend/local/tgtadm_parser.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <set>

#include "common/strings.h"
#include "contract/chap_rules.h"

namespace blockcsi {
namespace {

size_t Indent(std::string_view line) {
  size_t n = 0;
  while (n < line.size() && line[n] == ' ') ++n;
  return n;
}

template <typename T>
bool ParseNumber(std::string_view s, T* out) {
  s = TrimWhitespace(s);
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// "Key: value" → value, when the line starts with `key` + ':'.
bool Field(std::string_view line, std::string_view key, std::string_view* value) {
  if (!line.starts_with(key) || line.size() <= key.size() || line[key.size()] != ':') return false;
  *value = TrimWhitespace(line.substr(key.size() + 1));
  return true;
}

// Quotes at most 120 bytes of a line, unprintable bytes as '?': an error
// must stay short and printable whatever tgtd printed.
std::string Excerpt(std::string_view line) {
  std::string out;
  for (char c : line.substr(0, 120)) out += (c < 0x20 || c > 0x7e) ? '?' : c;
  if (line.size() > 120) out += "...";
  return out;
}

Status Unexpected(int line_number, std::string_view line) {
  return InvalidArgument("tgtadm output line " + std::to_string(line_number) + " not understood: \"" + Excerpt(line) +
                         "\"");
}

Status Incomplete(int line_number, const TgtTarget& target) {
  return InvalidArgument("tgtadm output line " + std::to_string(line_number) + ": target " +
                         std::to_string(target.tid) + " \"" + Excerpt(target.iqn) +
                         "\" ends before all its sections (system, I_T nexus, LUN, account, ACL)");
}

// A target name, initiator name or address as we (or an administrator
// through tgtadm's argv) could have set it: no whitespace, no control bytes.
bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c <= 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

const TgtLun* TgtTarget::FindLun(int lun_number) const {
  for (const auto& lun : luns) {
    if (lun.lun == lun_number) return &lun;
  }
  return nullptr;
}

namespace {

// A target's sections, in the order tgtd prints them.
enum class Section { kNone, kSystem, kNexus, kLun, kAccount, kAcl };

// The tids and names of the targets parsed so far: a repeat is found in
// O(log n), not by a scan of every earlier target (a scan makes a listing
// of 1,000 targets a million comparisons).
struct SeenTargets {
  std::set<int> tids;
  std::set<std::string, std::less<>> names;
};

// "Target 1: iqn...": a new target after a complete one, with a tid and a
// name no target before it has.
Status ParseTargetHeader(int line_number, std::string_view line, Section section, std::vector<TgtTarget>& targets,
                         SeenTargets& seen) {
  if (!line.starts_with("Target ")) return Unexpected(line_number, line);
  if (!targets.empty() && section != Section::kAcl) return Incomplete(line_number, targets.back());
  size_t colon = line.find(':');
  TgtTarget target;
  if (colon == std::string_view::npos || !ParseNumber(line.substr(7, colon - 7), &target.tid)) {
    return Unexpected(line_number, line);
  }
  target.iqn = std::string(TrimWhitespace(line.substr(colon + 1)));
  // A target without a name cannot be matched to a volume: reconcile
  // must see an error, not a nameless target (found by fuzzing).
  if (!IsToken(target.iqn) || target.tid <= 0) return Unexpected(line_number, line);
  // tgtd never lists a tid or a name twice: a second one means the
  // listing is not what it seems (a "Target 3:" block forged inside an
  // account name would make a later bind hit another volume).
  if (!seen.tids.insert(target.tid).second || !seen.names.insert(target.iqn).second) {
    return InvalidArgument("tgtadm output line " + std::to_string(line_number) + " lists target " +
                           std::to_string(target.tid) + " \"" + Excerpt(target.iqn) +
                           "\" a second time; refusing to act on it");
  }
  targets.push_back(std::move(target));
  return OkStatus();
}

// A section heading (indent 4): the section that follows `section`, or
// kNone for anything else.
Section NextSection(std::string_view line, Section section) {
  Section next = Section::kNone;
  if (line == "System information:") {
    next = Section::kSystem;
  } else if (line == "I_T nexus information:") {
    next = Section::kNexus;
  } else if (line == "LUN information:") {
    next = Section::kLun;
  } else if (line == "Account information:") {
    next = Section::kAccount;
  } else if (line == "ACL information:") {
    next = Section::kAcl;
  }
  // tgtd prints each section once, in this order. A name with newlines
  // can insert lines into one section, but the real block's remaining
  // sections still follow: a forged block always shows up here as a
  // section out of order or a target without all of them.
  if (next == Section::kNone || static_cast<int>(next) != static_cast<int>(section) + 1) return Section::kNone;
  return next;
}

// A numbered line ("I_T nexus: 2", "Connection: 0", "LUN: 1") starts an
// entry; the lines after it describe the last one. When `line` is `key`'s:
// appends the entry and says whether its number parsed; otherwise nullopt.
template <typename Entry, typename Number>
std::optional<bool> StartEntry(std::string_view line, std::string_view key, Number Entry::*number,
                               std::vector<Entry>& entries) {
  std::string_view value;
  if (!Field(line, key, &value)) return std::nullopt;
  Entry entry;
  if (!ParseNumber(value, &(entry.*number))) return false;
  entries.push_back(std::move(entry));
  return true;
}

// One line of the I_T nexus section; false when it cannot be accounted for.
bool ParseNexusLine(std::string_view line, TgtTarget& target) {
  if (auto started = StartEntry(line, "I_T nexus", &TgtSession::sid, target.sessions)) return *started;
  if (target.sessions.empty()) return false;
  TgtSession& session = target.sessions.back();
  if (auto started = StartEntry(line, "Connection", &TgtConnection::cid, session.connections)) return *started;
  std::string_view value;
  if (Field(line, "Initiator", &value)) {
    // "iqn... alias: none": an initiator name has no spaces.
    session.initiator = std::string(value.substr(0, value.find(' ')));
  } else if (Field(line, "IP Address", &value) && !session.connections.empty()) {
    session.connections.back().address = std::string(value);
  }
  return true;
}

// One line of the LUN section; false when it cannot be accounted for.
bool ParseLunLine(std::string_view line, TgtTarget& target) {
  if (auto started = StartEntry(line, "LUN", &TgtLun::lun, target.luns)) {
    if (!*started) return false;
    // tgtd lists a LUN number once per target; a second one was forged.
    const int number = target.luns.back().lun;
    return std::count_if(target.luns.begin(), target.luns.end(), [&](const TgtLun& l) { return l.lun == number; }) == 1;
  }
  if (target.luns.empty()) return false;
  TgtLun& lun = target.luns.back();
  std::string_view value;
  if (Field(line, "Type", &value)) {
    lun.type = std::string(value);
  } else if (Field(line, "SCSI ID", &value)) {
    lun.scsi_id = std::string(value);
  } else if (Field(line, "SCSI SN", &value)) {
    lun.scsi_sn = std::string(value);
  } else if (Field(line, "Size", &value)) {
    // "67 MB, Block size: 512"
    std::string_view mb = value.substr(0, value.find(' '));
    if (!ParseNumber(mb, &lun.size_mb)) return false;
  } else if (Field(line, "Backing store path", &value)) {
    lun.backing_path = value == "None" ? "" : std::string(value);
  } else if (Field(line, "Thin-provisioning", &value)) {
    // A reconcile switches a LUN on what this says: tgtd prints only these.
    if (value != "Yes" && value != "No") return false;
    lun.thin_provisioning = value == "Yes";
  }
  return true;
}

// One line of the account section; false for a name that cannot be ours.
bool ParseAccountLine(std::string_view line, TgtTarget& target) {
  constexpr std::string_view kOutgoing = " (outgoing)";
  bool outgoing = line.size() > kOutgoing.size() && line.substr(line.size() - kOutgoing.size()) == kOutgoing;
  std::string_view user = outgoing ? line.substr(0, line.size() - kOutgoing.size()) : line;
  // Only names chap_rules.h allows can be ours; anything else was not
  // made through us and is not acted on.
  if (!IsValidChapName(user)) return false;
  (outgoing ? target.outgoing_accounts : target.incoming_accounts).emplace_back(user);
  return true;
}

// One line inside `section` of `target`; false when it cannot be accounted for.
bool ParseSectionLine(Section section, std::string_view line, TgtTarget& target) {
  switch (section) {
    case Section::kSystem:
      return true;  // driver and state: nothing we act on
    case Section::kNexus:
      return ParseNexusLine(line, target);
    case Section::kLun:
      return ParseLunLine(line, target);
    case Section::kAccount:
      return ParseAccountLine(line, target);
    case Section::kAcl:
      if (!IsToken(line)) return false;
      target.acls.emplace_back(line);
      return true;
    case Section::kNone:
      return false;
  }
  return false;
}

// The non-blank lines of `text`, trimmed, each with its indent and its
// line number (counted from 1, blank lines included).
class LineReader {
 public:
  struct Line {
    std::string_view text;
    size_t indent = 0;
    int number = 0;
  };
  explicit LineReader(std::string_view text) : rest_(text) {}
  bool Next(Line* line) {
    while (!rest_.empty()) {
      size_t eol = rest_.find('\n');
      std::string_view raw = rest_.substr(0, eol);
      rest_ = eol == std::string_view::npos ? std::string_view() : rest_.substr(eol + 1);
      ++number_;
      line->text = TrimWhitespace(raw);
      if (line->text.empty()) continue;
      line->indent = Indent(raw);
      line->number = number_;
      return true;
    }
    return false;
  }
  int number() const { return number_; }

 private:
  std::string_view rest_;
  int number_ = 0;
};

}  // namespace

StatusOr<std::vector<TgtTarget>> ParseTgtadmTargets(std::string_view text, int* failed_line) {
  int unused = 0;
  int& at = failed_line != nullptr ? *failed_line : unused;
  std::vector<TgtTarget> targets;
  SeenTargets seen;
  Section section = Section::kNone;
  LineReader lines(text);
  LineReader::Line next;
  while (lines.Next(&next)) {
    const int line_number = next.number;
    at = line_number;  // where a refusal below is
    const std::string_view line = next.text;
    if (next.indent == 0) {
      BLOCKCSI_RETURN_IF_ERROR(ParseTargetHeader(line_number, line, section, targets, seen));
      section = Section::kNone;
      continue;
    }
    if (targets.empty()) return Unexpected(line_number, line);
    if (next.indent == 4) {
      section = NextSection(line, section);
      if (section == Section::kNone) return Unexpected(line_number, line);
      continue;
    }
    if (!ParseSectionLine(section, line, targets.back())) return Unexpected(line_number, line);
  }
  at = lines.number();
  if (!targets.empty() && section != Section::kAcl) return Incomplete(lines.number(), targets.back());
  return targets;
}

StatusOr<std::vector<TgtConnectionEntry>> ParseTgtadmConnections(std::string_view text) {
  // "Session: 3" / "    Connection: 0" / "        Initiator: iqn..." /
  // "        IP Address: 10.0.0.1", one such group per connection.
  std::vector<TgtConnectionEntry> out;
  LineReader lines(text);
  LineReader::Line next;
  enum class Want { kSession, kConnection, kInitiator, kAddress } want = Want::kSession;
  TgtConnectionEntry entry;
  while (lines.Next(&next)) {
    std::string_view value;
    bool ok = false;
    switch (want) {
      case Want::kSession:
        ok = next.indent == 0 && Field(next.text, "Session", &value) && ParseNumber(value, &entry.sid);
        want = Want::kConnection;
        break;
      case Want::kConnection:
        ok = next.indent == 4 && Field(next.text, "Connection", &value) && ParseNumber(value, &entry.cid);
        want = Want::kInitiator;
        break;
      case Want::kInitiator:
        ok = next.indent == 8 && Field(next.text, "Initiator", &value) && IsToken(value);
        entry.initiator = std::string(value);
        want = Want::kAddress;
        break;
      case Want::kAddress:
        ok = next.indent == 8 && Field(next.text, "IP Address", &value) && IsToken(value);
        entry.address = std::string(value);
        out.push_back(std::move(entry));
        entry = {};
        want = Want::kSession;
        break;
    }
    if (!ok) return Unexpected(next.number, next.text);
  }
  if (want != Want::kSession) return InvalidArgument("tgtadm connection listing ends inside a connection");
  return out;
}

std::vector<TgtadmHeading> TgtadmHeadings(std::string_view text) {
  std::vector<TgtadmHeading> tids;
  LineReader lines(text);
  LineReader::Line next;
  while (lines.Next(&next)) {
    if (next.indent != 0 || !next.text.starts_with("Target ")) continue;
    size_t colon = next.text.find(':');
    int tid = 0;
    if (colon == std::string_view::npos || !ParseNumber(next.text.substr(7, colon - 7), &tid) || tid <= 0) continue;
    tids.push_back({tid, next.number});
  }
  return tids;
}

bool TgtadmShowsSessionPlainly(std::string_view text, uint64_t sid, const std::string& initiator) {
  // Exact lines and indents, as tgtd's snprintf of a session prints them;
  // only the alias is free, and it must stay on its line.
  const std::string nexus = "\n        I_T nexus: " + std::to_string(sid) + "\n";
  size_t at = text.find(nexus);
  if (at == std::string_view::npos || text.find(nexus, at + 1) != std::string_view::npos) return false;
  std::string_view rest = text.substr(at + nexus.size());
  auto take_line = [&](std::string_view* line) {
    size_t eol = rest.find('\n');
    if (eol == std::string_view::npos) return false;
    *line = rest.substr(0, eol);
    rest = rest.substr(eol + 1);
    return true;
  };
  std::string_view initiator_line, connection_line, address_line, after;
  if (!take_line(&initiator_line) || !take_line(&connection_line) || !take_line(&address_line)) return false;
  const std::string initiator_prefix = "            Initiator: " + initiator + " alias: ";
  if (!initiator_line.starts_with(initiator_prefix)) return false;
  std::string_view alias = initiator_line.substr(initiator_prefix.size());
  constexpr size_t kMaxPlainAlias = 255;  // an alias that long is not a host name
  if (alias.size() > kMaxPlainAlias) return false;
  for (char c : alias) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  constexpr std::string_view kConnection = "            Connection: ";
  uint32_t cid = 0;
  if (!connection_line.starts_with(kConnection) || !ParseNumber(connection_line.substr(kConnection.size()), &cid) ||
      connection_line.substr(kConnection.size()).find(' ') != std::string_view::npos) {
    return false;
  }
  constexpr std::string_view kAddress = "                IP Address: ";
  if (!address_line.starts_with(kAddress) || !IsToken(address_line.substr(kAddress.size()))) return false;
  if (!take_line(&after)) return false;
  return after.starts_with("        I_T nexus: ") || after == "    LUN information:";
}

StatusOr<std::vector<std::string>> ParseTgtadmAccounts(std::string_view text) {
  std::vector<std::string> accounts;
  bool header = false;
  LineReader lines(text);
  LineReader::Line next;
  while (lines.Next(&next)) {
    const int line_number = next.number;
    const std::string_view line = next.text;
    if (line == "Account list:" && next.indent == 0) {
      if (header) return Unexpected(line_number, line);  // tgtd prints it once
      header = true;
      continue;
    }
    if (!header || next.indent == 0 || !IsValidChapName(line)) return Unexpected(line_number, line);
    for (const auto& seen : accounts) {
      if (seen == line) return Unexpected(line_number, line);
    }
    accounts.emplace_back(line);
  }
  return accounts;
}

}  // namespace blockcsi
