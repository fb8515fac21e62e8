// LioExporter: the Exporter for the kernel's LIO target, writing configfs
// under a configurable root (/sys/kernel/config on a real host; a temp
// directory in tests, which assert the exact files written).
//
//   target/core/fileio_0/<vol-id>/{control,udev_path,wwn/vpd_unit_serial,enable,
//                                  attrib/emulate_tpu,attrib/emulate_tpws}
//   target/iscsi/<iqn>/tpgt_1/{enable,attrib/*,np/<portal>/,lun/lun_1/<link>}
//   target/iscsi/<iqn>/tpgt_1/acls/<initiator>/{lun_1/<link>,auth/*}
//
// Backstores are thin (emulate_tpu, emulate_tpws): LIO advertises UNMAP and
// punches unmapped ranges out of the image. Fencing is the kernel's:
// removing a node ACL shuts down that initiator's sessions. A fileio LUN's
// size is fixed at configuration, so a new size is applied by re-creating
// the backstore (as with tgt). Thread-safe: one mutex serialises every
// change.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/local/exporter.h"
#include "common/host.h"
#include "common/mutex.h"

namespace blockcsi {

class LioExporter final : public Exporter {
 public:
  // `portals`: "ip:port" network portals each target listens on.
  explicit LioExporter(std::string configfs_root, std::vector<std::string> portals = {});

  std::string Kind() const override { return "lio"; }
  ExportedLunIdentity IdentityFor(const std::string& volume_id) const override;
  StatusOr<std::vector<std::string>> Apply(const DesiredExport& desired) override;
  StatusOr<std::vector<std::string>> Reconcile(const std::vector<DesiredExport>& desired,
                                               const std::string& iqn_prefix) override;
  Status CloseSessions(const std::string& iqn, const std::string& initiator_iqn) override;
  Status Remove(const std::string& iqn) override;
  Status Healthy() override;

  // LIO derives the NAA WWN from the unit serial: NAA 6, IEEE company id
  // 0x001405, then the serial's hex digits (others skipped), 25 nibbles.
  static std::string LioWwnForSerial(const std::string& serial);

 private:
  StatusOr<std::vector<std::string>> ApplyLocked(const DesiredExport& desired) REQUIRES(mu_);
  // The target's node ACLs made what `d` grants (CHAP credentials before the
  // mapped LUN), the others removed; authentication on when any grant wants CHAP.
  Status ApplyAclsLocked(const DesiredExport& d, const std::string& tpg, std::vector<std::string>& repairs)
      REQUIRES(mu_);
  Status RemoveLocked(const std::string& iqn) REQUIRES(mu_);
  std::string Core(const std::string& volume_id) const;
  std::string Tpg(const std::string& iqn) const;

  const std::unique_ptr<Host> host_;  // rooted at the configfs root
  const std::vector<std::string> portals_;
  // Serialises every change of the configfs tree, and guards:
  Mutex mu_;
  std::map<std::string, uint64_t> applied_size_ GUARDED_BY(mu_);  // iqn → size of the live backstore
};

}  // namespace blockcsi
