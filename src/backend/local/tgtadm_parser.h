// Pure parsers of `tgtadm --op show` output (tgt 1.0.x text format, captured
// under test/testdata/tgtadm/). Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace blockcsi {

struct TgtLun {
  int lun = 0;
  std::string type;  // "disk", "controller"
  std::string scsi_id;
  std::string scsi_sn;
  uint64_t size_mb = 0;  // tgtd prints decimal megabytes, rounded to the nearest
  std::string backing_path;
  // "Thin-provisioning: Yes": tgtd advertises logical block provisioning
  // (LBPME, UNMAP in VPD 0xB2) and punches UNMAPped ranges out of the file.
  bool thin_provisioning = false;
};

struct TgtConnection {
  int cid = 0;
  std::string address;
};

struct TgtSession {
  int sid = 0;  // the I_T nexus id, which tgtadm's --sid takes
  std::string initiator;
  std::vector<TgtConnection> connections;
};

struct TgtTarget {
  int tid = 0;
  std::string iqn;
  // As the target listing prints them, after an InitiatorAlias the initiator
  // chose, unescaped: never used for a decision (sessions come from
  // ParseTgtadmConnections), only for diagnostics.
  std::vector<TgtSession> sessions;
  std::vector<TgtLun> luns;
  std::vector<std::string> incoming_accounts;
  std::vector<std::string> outgoing_accounts;
  std::vector<std::string> acls;  // initiator names (or addresses, not ours)

  const TgtLun* FindLun(int lun) const;
};

// What `tgtadm --op show` prints as a LUN's "Size: N MB" for an image of
// `bytes`: the size in whole 512-byte sectors, rounded to the nearest
// megabyte (10^6), not truncated (320 MiB shows as 336 MB). A mismatch here
// would make every reconcile pass delete and re-add a healthy LUN under its
// live sessions.
inline uint64_t TgtadmShownMegabytes(uint64_t bytes) { return (bytes / 512 * 512 + 500000) / 1000000; }

// `tgtadm --op show --mode target`. INVALID_ARGUMENT on a line it cannot
// place; `failed_line` (when given) gets the number of the line refused.
StatusOr<std::vector<TgtTarget>> ParseTgtadmTargets(std::string_view text, int* failed_line = nullptr);

// One connection of `tgtadm --mode conn --op show --tid N`. That listing
// holds no text an initiator chose freely: the initiator name passed the
// target's ACL, the address is tgtd's.
struct TgtConnectionEntry {
  uint64_t sid = 0;  // the session's TSIH, which is its I_T nexus id
  uint32_t cid = 0;
  std::string initiator;
  std::string address;
};

// `tgtadm --mode conn --op show --tid N`. INVALID_ARGUMENT on a line it
// cannot place.
StatusOr<std::vector<TgtConnectionEntry>> ParseTgtadmConnections(std::string_view text);

// Every line of a target listing that reads as a target heading ("Target 3:
// ..." at the start of a line), in order: the real targets and any an
// initiator's alias forged. `line` counts from 1 as ParseTgtadmTargets does.
struct TgtadmHeading {
  int tid = 0;
  int line = 0;
};
std::vector<TgtadmHeading> TgtadmHeadings(std::string_view text);

// Whether the target listing shows session `sid` of `initiator` as tgtd
// prints a plain one: its I_T nexus line once, then exactly "Initiator:
// <initiator> alias: <one printable line>", "Connection: <n>", "IP Address:
// <address>", then the next session or the LUN section. A session whose
// alias holds a line break (or so much that tgtd cut it short) is not.
bool TgtadmShowsSessionPlainly(std::string_view text, uint64_t sid, const std::string& initiator);

// `tgtadm --op show --mode account`: the account names.
StatusOr<std::vector<std::string>> ParseTgtadmAccounts(std::string_view text);

}  // namespace blockcsi
