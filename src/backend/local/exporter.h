// Exporter: the live half of the target backend — makes a target daemon
// (tgtd, or LIO through configfs) export what the pool says, declaratively:
// Apply() compares one target with the desired state and changes only what
// differs, so create, grant, revoke, expand and the reconcile loop share one
// code path. Implementations are thread-safe (they serialise their changes)
// and hold the only copy of CHAP secrets, in memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/chap.h"
#include "common/status.h"

namespace blockcsi {

// One initiator allowed in. `chap`: its grant asked for CHAP.
struct DesiredAcl {
  std::string initiator_iqn;
  bool chap = false;
  // User name of this initiator's credentials in DesiredExport::chap; empty
  // when they are not known. LIO keeps credentials per ACL, so each ACL must
  // get its own grant's, never another node's.
  std::string chap_username;
};

struct DesiredExport {
  std::string iqn;
  std::string volume_id;
  std::string image_path;
  uint64_t size_bytes = 0;
  std::string serial;
  std::string wwn;
  std::vector<DesiredAcl> acls;
  // The CHAP credentials of the grants that asked for CHAP and whose
  // secrets this process knows (it never persists them). A CHAP grant with
  // no credentials here keeps whatever the live target already has; if the
  // target has no account (the daemon restarted too), the initiator is left
  // out of the ACL until it is granted again: fail closed, never open.
  std::vector<ChapCredentials> chap;
};

// The identity a LUN of a volume carries, as a node reads it back.
struct ExportedLunIdentity {
  std::string serial;  // VPD 0x80
  std::string wwn;     // NAA from VPD 0x83, lower-case hex
};

class Exporter {
 public:
  virtual ~Exporter() = default;
  virtual std::string Kind() const = 0;  // "tgt" | "lio"

  virtual ExportedLunIdentity IdentityFor(const std::string& volume_id) const = 0;

  // Makes the live target named desired.iqn equal `desired` (target, LUN 1
  // with the image, size, serial and WWN, accounts, ACL). Returns a line per
  // repair made, empty when it already matched.
  virtual StatusOr<std::vector<std::string>> Apply(const DesiredExport& desired) = 0;

  // Apply() of each export, one result per export in order; a failing one
  // does not stop the rest. An exporter whose live state is costly to read
  // (tgt: a tgtadm process whose output grows with every target) reads it
  // once for all of them.
  virtual std::vector<StatusOr<std::vector<std::string>>> ApplyEach(const std::vector<DesiredExport>& desired) {
    std::vector<StatusOr<std::vector<std::string>>> out;
    out.reserve(desired.size());
    for (const auto& d : desired) out.push_back(Apply(d));
    return out;
  }

  // Applies every export in `desired` and removes live targets whose IQN
  // starts with `iqn_prefix` + ":" but are not in `desired`. One read of the
  // live state for all of them.
  virtual StatusOr<std::vector<std::string>> Reconcile(const std::vector<DesiredExport>& desired,
                                                       const std::string& iqn_prefix) = 0;

  // Closes every session `initiator_iqn` has on the target (fencing). The
  // caller removes the ACL first so the initiator cannot log in again.
  virtual Status CloseSessions(const std::string& iqn, const std::string& initiator_iqn) = 0;

  // Removes the target (closing its sessions). Missing → OK.
  virtual Status Remove(const std::string& iqn) = 0;

  // OK when the daemon answers.
  virtual Status Healthy() = 0;
};

}  // namespace blockcsi
