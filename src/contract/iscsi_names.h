// Syntax checks for the iSCSI names and addresses that arrive in
// publish_context: portals, iSCSI names (RFC 3720 §3.2.6), LUNs, SCSI unit
// serials and NAA WWNs. Each returns INVALID_ARGUMENT with a message that
// names what is wrong (and the offending value, which is never a secret).
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace blockcsi {

struct Portal {
  std::string host;  // without brackets for IPv6
  int port = 0;
  bool ipv6 = false;
  // "host:port" / "[v6]:port", the form iscsiadm and libiscsi take.
  std::string ToString() const;
};

// "192.0.2.1:3260", "[2001:db8::1]:3260", "array-a.example.com:3260".
// The port is required (1..65535).
StatusOr<Portal> ParsePortal(std::string_view text);

// "iqn.YYYY-MM.reversed.domain[:anything]", "eui.<16 hex>" or
// "naa.<16|32 hex>"; at most 223 bytes; iqn names in lower case.
Status ValidateIscsiName(std::string_view name);

// SAM flat addressing: 0..16383.
inline constexpr int kMaxLun = 16383;
StatusOr<int> ParseLun(std::string_view text);

// VPD 0x80 unit serial: 1..252 printable ASCII characters.
Status ValidateSerial(std::string_view serial);

// NAA WWN as hex digits (16 or 32, NAA type 1, 2, 3, 5 or 6); returns it in
// lower case. No "naa." or "0x" prefix.
StatusOr<std::string> NormalizeWwn(std::string_view wwn);

}  // namespace blockcsi
