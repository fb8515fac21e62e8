#include "common/lun_identity.h"

#include <algorithm>

#include "common/strings.h"

namespace blockcsi {
namespace {

// VPD serials are ASCII; NULs are padding on some arrays.
std::string Trim(std::string_view s) {
  std::string out(TrimWhitespace(s));
  out.erase(std::remove(out.begin(), out.end(), '\0'), out.end());
  return out;
}

}  // namespace

std::string LunIdentity::wwn() const {
  for (char type : {'6', '5'}) {
    for (const auto& n : naa) {
      if (!n.empty() && n[0] == type) return n;
    }
  }
  return naa.empty() ? "" : naa.front();
}

std::string LunIdentity::Describe() const {
  std::string out = "serial=" + (serial.empty() ? std::string("(none)") : serial);
  out += " wwn=" + (naa.empty() ? std::string("(none)") : wwn());
  return out;
}

StatusOr<std::string> ParseVpdPage80(std::string_view page) {
  if (page.size() < 4) return InvalidArgument("VPD page 0x80 is shorter than its header");
  if (static_cast<unsigned char>(page[1]) != 0x80) return InvalidArgument("VPD page is not 0x80");
  size_t len = (static_cast<unsigned char>(page[2]) << 8) | static_cast<unsigned char>(page[3]);
  if (4 + len > page.size()) return InvalidArgument("VPD page 0x80 is truncated");
  return Trim(page.substr(4, len));
}

Status ParseVpdPage83(std::string_view page, LunIdentity* identity) {
  if (page.size() < 4) return InvalidArgument("VPD page 0x83 is shorter than its header");
  if (static_cast<unsigned char>(page[1]) != 0x83) return InvalidArgument("VPD page is not 0x83");
  size_t len = (static_cast<unsigned char>(page[2]) << 8) | static_cast<unsigned char>(page[3]);
  if (4 + len > page.size()) return InvalidArgument("VPD page 0x83 is truncated");
  size_t pos = 4;
  size_t end = 4 + len;
  while (pos + 4 <= end) {
    auto b = [&](size_t i) { return static_cast<unsigned char>(page[pos + i]); };
    int code_set = b(0) & 0x0f;
    int association = (b(1) >> 4) & 0x03;
    int type = b(1) & 0x0f;
    size_t dlen = b(3);
    if (pos + 4 + dlen > end) return InvalidArgument("VPD page 0x83 has a truncated designator");
    std::string_view designator = page.substr(pos + 4, dlen);
    pos += 4 + dlen;
    // Only designators of the LUN itself (association 0) identify it; the
    // target port and target device ones are shared by every LUN.
    if (association != 0) continue;
    switch (type) {
      case 3:  // NAA, binary
        if (code_set == 1) identity->naa.push_back(HexEncode(designator));
        break;
      case 1:  // T10 vendor id, ASCII
        identity->other.push_back("t10:" + Trim(designator));
        break;
      case 2:  // EUI-64
        identity->other.push_back("eui:" + HexEncode(designator));
        break;
      case 8:  // SCSI name string
        identity->other.push_back("name:" + Trim(designator));
        break;
      default:
        break;
    }
  }
  return OkStatus();
}

StatusOr<LunIdentity> ParseVpdPages(std::string_view page80, std::string_view page83) {
  LunIdentity id;
  if (!page80.empty()) {
    BLOCKCSI_ASSIGN_OR_RETURN(id.serial, ParseVpdPage80(page80));
  }
  if (!page83.empty()) BLOCKCSI_RETURN_IF_ERROR(ParseVpdPage83(page83, &id));
  return id;
}

Status VerifyLunIdentity(const std::string& volume_id, const std::string& expected_serial,
                         const std::string& expected_wwn, const LunIdentity& actual) {
  std::string want;
  bool ok = true;
  if (!expected_serial.empty()) {
    want += "serial=" + expected_serial;
    if (actual.serial != expected_serial) ok = false;
  }
  if (!expected_wwn.empty()) {
    want += (want.empty() ? "" : " ") + std::string("wwn=") + expected_wwn;
    if (std::find(actual.naa.begin(), actual.naa.end(), expected_wwn) == actual.naa.end()) ok = false;
  }
  if (ok) return OkStatus();
  return FailedPrecondition("volume \"" + volume_id + "\": wrong LUN: the device reports " + actual.Describe() +
                            " but publish_context expects " + want + "; refusing to use it");
}

}  // namespace blockcsi
