#include "backend/local/lio_exporter.h"

#include <set>
#include <string_view>

#include "backend/volume_id.h"
#include "common/host.h"

namespace blockcsi {
namespace {

// Follows links: every path asked about is a configfs group (a directory).
bool IsDir(const Host& host, const std::string& path) { return host.Kind(path) == PathKind::kDirectory; }

// mkdir -p that treats "already there" as done (configfs pre-creates some).
Status MakeDirs(const Host& host, const std::string& path) { return host.MakeDirectory(path, 0755); }

// Writes a configfs attribute (parents made first, for plain test trees).
Status WriteAttr(const Host& host, const std::string& path, const std::string& value) {
  BLOCKCSI_RETURN_IF_ERROR(MakeDirs(host, path.substr(0, path.rfind('/'))));
  return host.OverwriteFile(path, value + "\n");
}

// Writes a CHAP attribute (user name or secret) of a node ACL's auth group.
// Unlike the other attributes, the kernel keeps every byte written there as
// the value: a trailing newline would become part of the secret, and no
// initiator's login would match it (seen on a real configfs).
Status WriteAuthAttr(const Host& host, const std::string& path, const std::string& value) {
  BLOCKCSI_RETURN_IF_ERROR(MakeDirs(host, path.substr(0, path.rfind('/'))));
  return host.OverwriteFile(path, value);
}

std::string ReadAttr(const Host& host, const std::string& path) {
  auto text = ReadTrimmed(host, path);
  return text.ok() ? *text : "";
}

std::vector<std::string> ListDir(const Host& host, const std::string& path) {
  auto names = host.ListDir(path);
  return names.ok() ? *names : std::vector<std::string>{};
}

// The unit serial a backstore reports. configfs shows it as
// "T10 VPD Unit Serial Number: <serial>"; a plain tree holds what was written.
std::string ReadUnitSerial(const Host& host, const std::string& core) {
  constexpr std::string_view kLabel = "T10 VPD Unit Serial Number: ";
  std::string text = ReadAttr(host, core + "/wwn/vpd_unit_serial");
  if (text.rfind(kLabel, 0) == 0) text.erase(0, kLabel.size());
  return text;
}

// rmdir of a configfs group. configfs refuses (ENOTEMPTY) while the group
// holds a link or a group made by mkdir (an ACL's mapped LUN): those go first,
// deepest first. The groups configfs made itself (attrib, auth, ...) refuse
// their own rmdir (EPERM) and go with their parent. In a plain directory tree
// (tests) the attribute files are real files and are removed with the tree.
bool IsNotEmpty(const Status& s) {
  return s.code() == StatusCode::kFailedPrecondition || s.code() == StatusCode::kAlreadyExists;
}

Status RemoveConfigDir(const Host& host, const std::string& path) {
  for (const auto& name : ListDir(host, path)) {
    if (host.ReadLink(path + "/" + name).ok()) BLOCKCSI_RETURN_IF_ERROR(host.RemovePath(path + "/" + name));
  }
  Status removed = host.RemovePath(path);
  if (removed.ok() || !IsNotEmpty(removed)) return removed;
  for (const auto& name : ListDir(host, path)) {
    if (IsDir(host, path + "/" + name)) (void)RemoveConfigDir(host, path + "/" + name);
  }
  removed = host.RemovePath(path);
  if (removed.ok() || !IsNotEmpty(removed)) return removed;
  return host.RemoveTree(path);
}

}  // namespace

LioExporter::LioExporter(std::string configfs_root, std::vector<std::string> portals)
    : host_(HostRootedAt(std::move(configfs_root))), portals_(std::move(portals)) {}

std::string LioExporter::LioWwnForSerial(const std::string& serial) {
  std::string wwn = "6001405";
  for (char c : serial) {
    if (wwn.size() == 32) break;
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) wwn += c;
    if (c >= 'A' && c <= 'F') wwn += static_cast<char>(c - 'A' + 'a');
  }
  wwn.resize(32, '0');
  return wwn;
}

ExportedLunIdentity LioExporter::IdentityFor(const std::string& volume_id) const {
  std::string serial = "bcsi" + std::string(IdHex(volume_id));
  return {serial, LioWwnForSerial(serial)};
}

std::string LioExporter::Core(const std::string& volume_id) const { return "/target/core/fileio_0/" + volume_id; }
std::string LioExporter::Tpg(const std::string& iqn) const { return "/target/iscsi/" + iqn + "/tpgt_1"; }

Status LioExporter::Healthy() {
  if (!IsDir(*host_, "/target/iscsi") && !IsDir(*host_, "/target")) {
    return Unavailable("LIO configfs is not mounted at " + host_->Resolve("/target"));
  }
  return OkStatus();
}

Status LioExporter::ApplyAclsLocked(const DesiredExport& d, const std::string& tpg, std::vector<std::string>& repairs) {
  std::map<std::string, const ChapCredentials*> secrets;
  for (const auto& c : d.chap) secrets[c.username] = &c;
  bool chap_wanted = false;
  for (const auto& a : d.acls) chap_wanted |= a.chap;
  BLOCKCSI_RETURN_IF_ERROR(WriteAttr(*host_, tpg + "/attrib/authentication", chap_wanted ? "1" : "0"));

  std::set<std::string> want;
  for (const auto& acl : d.acls) {
    const std::string dir = tpg + "/acls/" + acl.initiator_iqn;
    auto known = secrets.find(acl.chap_username);
    const ChapCredentials* chap = acl.chap_username.empty() || known == secrets.end() ? nullptr : known->second;
    if (acl.chap && chap == nullptr && !IsDir(*host_, dir)) {
      repairs.push_back("withheld ACL of " + acl.initiator_iqn + " on " + d.iqn +
                        ": CHAP secret unknown after a restart, grant again");
      continue;
    }
    want.insert(acl.initiator_iqn);
    bool fresh = !IsDir(*host_, dir);
    BLOCKCSI_RETURN_IF_ERROR(MakeDirs(*host_, dir));
    // Credentials before the mapped LUN: nothing is reachable without CHAP.
    if (acl.chap && chap != nullptr) {
      BLOCKCSI_RETURN_IF_ERROR(WriteAuthAttr(*host_, dir + "/auth/userid", chap->username));
      BLOCKCSI_RETURN_IF_ERROR(WriteAuthAttr(*host_, dir + "/auth/password", chap->password));
      if (chap->mutual()) {
        // The kernel's names (a plain test tree takes any name; the real
        // configfs refuses an unknown one with EACCES, as the vm tests saw).
        BLOCKCSI_RETURN_IF_ERROR(WriteAuthAttr(*host_, dir + "/auth/userid_mutual", chap->mutual_username));
        BLOCKCSI_RETURN_IF_ERROR(WriteAuthAttr(*host_, dir + "/auth/password_mutual", chap->mutual_password));
      }
    }
    if (!IsDir(*host_, dir + "/lun_1")) {
      BLOCKCSI_RETURN_IF_ERROR(MakeDirs(*host_, dir + "/lun_1"));
      BLOCKCSI_RETURN_IF_ERROR(host_->Symlink(host_->Resolve(tpg + "/lun/lun_1"), dir + "/lun_1/lun_1"));
    }
    if (fresh) repairs.push_back("allowed " + acl.initiator_iqn + " on " + d.iqn);
  }
  for (const auto& acl : ListDir(*host_, tpg + "/acls")) {
    if (want.count(acl)) continue;
    // Removing the node ACL makes the kernel close the initiator's sessions.
    BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(*host_, tpg + "/acls/" + acl));
    repairs.push_back("disallowed " + acl + " on " + d.iqn);
  }
  return OkStatus();
}

StatusOr<std::vector<std::string>> LioExporter::ApplyLocked(const DesiredExport& d) {
  std::vector<std::string> repairs;
  const std::string core = Core(d.volume_id);
  const std::string tpg = Tpg(d.iqn);
  const std::string lun_dir = tpg + "/lun/lun_1";
  // configfs resolves a link's target when the link is made, relative to the
  // caller's working directory rather than to the link: links are absolute.
  const std::string lun_link_target = host_->Resolve(core);

  auto known = applied_size_.find(d.iqn);
  bool core_ok = IsDir(*host_, core) && ReadAttr(*host_, core + "/udev_path") == d.image_path &&
                 ReadUnitSerial(*host_, core) == d.serial &&
                 (known == applied_size_.end() || known->second == d.size_bytes);
  if (!core_ok && IsDir(*host_, core)) {
    // The backstore is fixed once enabled: unhook it from the LUNs, re-create.
    for (const auto& acl : ListDir(*host_, tpg + "/acls")) {
      BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(*host_, tpg + "/acls/" + acl + "/lun_1"));
    }
    BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(*host_, lun_dir));
    BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(*host_, core));
  }
  if (!core_ok) {
    BLOCKCSI_RETURN_IF_ERROR(MakeDirs(*host_, core));
    BLOCKCSI_RETURN_IF_ERROR(WriteAttr(*host_, core + "/control",
                                       "fd_dev_name=" + d.image_path + ",fd_dev_size=" + std::to_string(d.size_bytes)));
    BLOCKCSI_RETURN_IF_ERROR(WriteAttr(*host_, core + "/udev_path", d.image_path));
    BLOCKCSI_RETURN_IF_ERROR(WriteAttr(*host_, core + "/wwn/vpd_unit_serial", d.serial));
    BLOCKCSI_RETURN_IF_ERROR(WriteAttr(*host_, core + "/enable", "1"));
    applied_size_[d.iqn] = d.size_bytes;
    repairs.push_back("configured backstore of " + d.volume_id);
  }
  // Thin: LIO advertises logical block provisioning (LBPME, UNMAP and WRITE
  // SAME with UNMAP in VPD 0xB2) only when asked, and fileio then punches
  // unmapped ranges out of the image. Written after enable (fileio sets its
  // UNMAP limits when the backstore is configured; before, the kernel
  // refuses) and before the LUN is linked, so that no initiator scans it
  // thick. The kernel takes both on a live backstore: one a blockcsi from
  // before thin LUNs made is switched in place, never re-created for it.
  bool made_thin = false;
  for (const char* attr : {"/attrib/emulate_tpu", "/attrib/emulate_tpws"}) {
    if (ReadAttr(*host_, core + attr) == "1") continue;
    BLOCKCSI_RETURN_IF_ERROR(WriteAttr(*host_, core + attr, "1"));
    made_thin = true;
  }
  if (made_thin && core_ok) repairs.push_back("made backstore of " + d.volume_id + " thin");
  bool new_target = !IsDir(*host_, tpg);
  if (new_target) {
    BLOCKCSI_RETURN_IF_ERROR(MakeDirs(*host_, tpg));
    // Only listed initiators; never demo mode (which would let anyone in).
    BLOCKCSI_RETURN_IF_ERROR(WriteAttr(*host_, tpg + "/attrib/generate_node_acls", "0"));
    BLOCKCSI_RETURN_IF_ERROR(WriteAttr(*host_, tpg + "/attrib/demo_mode_write_protect", "1"));
    for (const auto& portal : portals_) BLOCKCSI_RETURN_IF_ERROR(MakeDirs(*host_, tpg + "/np/" + portal));
    repairs.push_back("created target " + d.iqn);
  }
  if (!IsDir(*host_, lun_dir)) {
    BLOCKCSI_RETURN_IF_ERROR(MakeDirs(*host_, lun_dir));
    BLOCKCSI_RETURN_IF_ERROR(host_->Symlink(lun_link_target, lun_dir + "/" + d.volume_id));
    repairs.push_back("added LUN 1 of " + d.iqn);
  }

  BLOCKCSI_RETURN_IF_ERROR(ApplyAclsLocked(d, tpg, repairs));
  if (ReadAttr(*host_, tpg + "/enable") != "1") BLOCKCSI_RETURN_IF_ERROR(WriteAttr(*host_, tpg + "/enable", "1"));
  return repairs;
}

StatusOr<std::vector<std::string>> LioExporter::Apply(const DesiredExport& desired) {
  MutexLock lock(mu_);
  return ApplyLocked(desired);
}

StatusOr<std::vector<std::string>> LioExporter::Reconcile(const std::vector<DesiredExport>& desired,
                                                          const std::string& iqn_prefix) {
  MutexLock lock(mu_);
  std::vector<std::string> repairs;
  std::set<std::string> wanted;
  Status first_error;
  for (const auto& d : desired) {
    wanted.insert(d.iqn);
    auto r = ApplyLocked(d);
    if (!r.ok()) {
      if (first_error.ok()) first_error = r.status();
      continue;
    }
    repairs.insert(repairs.end(), r->begin(), r->end());
  }
  std::string ns = iqn_prefix + ":";
  for (const auto& iqn : ListDir(*host_, "/target/iscsi")) {
    if (iqn.rfind(ns, 0) != 0 || wanted.count(iqn)) continue;
    BLOCKCSI_RETURN_IF_ERROR(RemoveLocked(iqn));
    repairs.push_back("removed target " + iqn + " that has no volume");
  }
  if (!first_error.ok()) return first_error;
  return repairs;
}

Status LioExporter::CloseSessions(const std::string& iqn, const std::string& initiator_iqn) {
  MutexLock lock(mu_);
  // The ACL is gone by now (Apply ran first), and with it the sessions; if a
  // stale ACL directory is still there, removing it is what closes them.
  return RemoveConfigDir(*host_, Tpg(iqn) + "/acls/" + initiator_iqn);
}

Status LioExporter::RemoveLocked(const std::string& iqn) {
  const std::string tpg = Tpg(iqn);
  std::string volume_id = iqn.substr(iqn.rfind(':') + 1);
  for (const auto& acl : ListDir(*host_, tpg + "/acls")) {
    BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(*host_, tpg + "/acls/" + acl));
  }
  BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(*host_, tpg + "/lun/lun_1"));
  for (const auto& np : ListDir(*host_, tpg + "/np"))
    BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(*host_, tpg + "/np/" + np));
  BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(*host_, tpg));
  BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(*host_, "/target/iscsi/" + iqn));
  if (IsVolumeId(volume_id)) BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(*host_, Core(volume_id)));
  applied_size_.erase(iqn);
  return OkStatus();
}

Status LioExporter::Remove(const std::string& iqn) {
  MutexLock lock(mu_);
  return RemoveLocked(iqn);
}

}  // namespace blockcsi
