#include "contract/iscsi_names.h"

#include <arpa/inet.h>

#include <cctype>
#include <charconv>

namespace blockcsi {
namespace {

bool IsHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || IsDigit(c); }

std::string Quote(std::string_view s) { return "\"" + std::string(s.substr(0, 300)) + "\""; }

// A DNS name: labels of letters, digits and '-', 1..63 each, 253 in all.
bool IsHostName(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  size_t start = 0;
  while (start <= host.size()) {
    size_t dot = host.find('.', start);
    std::string_view label = host.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || label.size() > 63) return false;
    if (label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) return false;
    }
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return true;
}

bool LooksNumericDotted(std::string_view host) {
  for (char c : host) {
    if (!IsDigit(c) && c != '.') return false;
  }
  return true;
}

}  // namespace

std::string Portal::ToString() const { return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port); }

StatusOr<Portal> ParsePortal(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("portal " + Quote(text) + " " + std::string(why) +
                           " (want host:port, [IPv6]:port or name:port)");
  };
  if (text.empty()) return bad("is empty");
  Portal portal;
  std::string_view port_text;
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("has no closing ']'");
    portal.host = std::string(text.substr(1, close - 1));
    portal.ipv6 = true;
    in6_addr addr{};
    if (::inet_pton(AF_INET6, portal.host.c_str(), &addr) != 1) return bad("has an invalid IPv6 address");
    if (close + 1 >= text.size() || text[close + 1] != ':') return bad("has no port");
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("has no port");
    portal.host = std::string(text.substr(0, colon));
    if (portal.host.find(':') != std::string::npos) return bad("looks like an IPv6 address without brackets");
    port_text = text.substr(colon + 1);
    if (portal.host.empty()) return bad("has no host");
    if (LooksNumericDotted(portal.host)) {
      in_addr addr{};
      if (::inet_pton(AF_INET, portal.host.c_str(), &addr) != 1) return bad("has an invalid IPv4 address");
    } else if (!IsHostName(portal.host)) {
      return bad("has an invalid host name");
    }
  }
  if (port_text.empty() || port_text.size() > 5) return bad("has an invalid port");
  for (char c : port_text) {
    if (!IsDigit(c)) return bad("has an invalid port");
  }
  std::from_chars(port_text.data(), port_text.data() + port_text.size(), portal.port);
  if (portal.port < 1 || portal.port > 65535) return bad("has a port outside 1..65535");
  return portal;
}

Status ValidateIscsiName(std::string_view name) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("iSCSI name " + Quote(name) + " " + std::string(why));
  };
  if (name.empty()) return bad("is empty");
  if (name.size() > 223) return bad("is longer than 223 bytes (RFC 3720)");
  if (name.starts_with("iqn.")) {
    // iqn.YYYY-MM.<reversed domain>[:<unique part>]
    if (name.size() < 12 || !IsDigit(name[4]) || !IsDigit(name[5]) || !IsDigit(name[6]) || !IsDigit(name[7]) ||
        name[8] != '-' || !IsDigit(name[9]) || !IsDigit(name[10]) || name[11] != '.') {
      return bad("must start with iqn.YYYY-MM. (RFC 3720 §3.2.6.3.1)");
    }
    int month = (name[9] - '0') * 10 + (name[10] - '0');
    if (month < 1 || month > 12) return bad("has a month outside 01..12");
    std::string_view rest = name.substr(12);
    size_t colon = rest.find(':');
    std::string_view authority = rest.substr(0, colon);
    if (authority.empty() || authority.front() == '.' || authority.back() == '.' ||
        authority.find("..") != std::string_view::npos) {
      return bad("has an invalid naming authority (a reversed domain name)");
    }
    for (char c : authority) {
      if (!IsLowerAlnum(c) && c != '-' && c != '.') {
        return bad("has an invalid naming authority (lower-case letters, digits, '-' and '.')");
      }
    }
    for (char c : rest) {
      // RFC 3722 stringprep leaves ASCII lower-case letters, digits, '-', '.', ':'.
      if (!IsLowerAlnum(c) && c != '-' && c != '.' && c != ':') {
        return bad("may contain only lower-case letters, digits, '-', '.' and ':'");
      }
    }
    return OkStatus();
  }
  if (name.starts_with("eui.")) {
    std::string_view hex = name.substr(4);
    if (hex.size() != 16) return bad("must be eui. followed by 16 hex digits");
    for (char c : hex) {
      if (!IsHex(c)) return bad("must be eui. followed by 16 hex digits");
    }
    return OkStatus();
  }
  if (name.starts_with("naa.")) {
    std::string_view hex = name.substr(4);
    if (hex.size() != 16 && hex.size() != 32) return bad("must be naa. followed by 16 or 32 hex digits");
    for (char c : hex) {
      if (!IsHex(c)) return bad("must be naa. followed by 16 or 32 hex digits");
    }
    return OkStatus();
  }
  return bad("must start with iqn., eui. or naa.");
}

StatusOr<int> ParseLun(std::string_view text) {
  auto bad = [&] {
    return InvalidArgument("LUN " + Quote(text) + " must be a decimal number in 0.." + std::to_string(kMaxLun));
  };
  if (text.empty() || text.size() > 5) return bad();
  for (char c : text) {
    if (!IsDigit(c)) return bad();
  }
  int lun = 0;
  std::from_chars(text.data(), text.data() + text.size(), lun);
  if (lun > kMaxLun) return bad();
  return lun;
}

Status ValidateSerial(std::string_view serial) {
  if (serial.empty()) return InvalidArgument("serial is empty");
  if (serial.size() > 252) return InvalidArgument("serial is longer than 252 characters (VPD page 0x80)");
  for (char c : serial) {
    if (c < 0x21 || c > 0x7e) {
      return InvalidArgument("serial " + Quote(serial) +
                             " may contain only printable ASCII without spaces (VPD page 0x80)");
    }
  }
  return OkStatus();
}

StatusOr<std::string> NormalizeWwn(std::string_view wwn) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("WWN " + Quote(wwn) + " " + std::string(why) +
                           " (want the NAA designator of VPD page 0x83 as 16 or 32 hex digits, no prefix)");
  };
  if (wwn.size() != 16 && wwn.size() != 32) return bad("has the wrong length");
  std::string out;
  for (char c : wwn) {
    if (!IsHex(c)) return bad("is not hexadecimal");
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  char naa = out[0];
  bool ok = wwn.size() == 32 ? naa == '6' : (naa == '1' || naa == '2' || naa == '3' || naa == '5');
  if (!ok) return bad("has an NAA type that does not match its length");
  return out;
}

}  // namespace blockcsi
