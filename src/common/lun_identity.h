// LUN identity: what a SCSI device says it is (VPD page 0x80 unit serial,
// VPD page 0x83 designators) and the check against what publish_context
// promised. The raw pages are the same bytes whether they come over a
// libiscsi session (INQUIRY EVPD) or from sysfs (vpd_pg80 / vpd_pg83), so
// one parser serves both connectors. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace blockcsi {

struct LunIdentity {
  std::string serial;              // VPD 0x80, surrounding spaces trimmed
  std::vector<std::string> naa;    // NAA designators of VPD 0x83 (LUN association), lower-case hex
  std::vector<std::string> other;  // other designators, "t10:..." / "eui:..." for messages
  // What we call the LUN's WWN: the most specific NAA designator (type 6,
  // then 5, then the others in page order). tgt reports a locally assigned
  // NAA 3 built from tid and LUN (reused when a tid is reused) and an NAA 6
  // built from the LU's scsi_id hex digits, so the NAA 6 is the one that
  // identifies a volume.
  std::string wwn() const;
  std::string Describe() const;  // "serial=X wwn=Y" for messages and logs
};

// Raw VPD pages, header included (byte 1 page code, bytes 2..3 length).
StatusOr<std::string> ParseVpdPage80(std::string_view page);
// Fills naa/other from page 0x83's designation descriptors.
Status ParseVpdPage83(std::string_view page, LunIdentity* identity);
StatusOr<LunIdentity> ParseVpdPages(std::string_view page80, std::string_view page83);

// OK when every identity the spec carries matches; FAILED_PRECONDITION
// naming both sides otherwise ("wrong LUN").
Status VerifyLunIdentity(const std::string& volume_id, const std::string& expected_serial,
                         const std::string& expected_wwn, const LunIdentity& actual);

}  // namespace blockcsi
