#include "backend/local/lio_exporter.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "backend/volume_id.h"
#include "common/atomic_file.h"

namespace blockcsi {
namespace {

bool IsDir(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// mkdir that treats "already there" as done (configfs pre-creates some).
Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return OkStatus();
  return ErrnoToStatus(errno, "mkdir " + path);
}

Status MakeDirs(const std::string& path) {
  for (size_t pos = 1; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    BLOCKCSI_RETURN_IF_ERROR(MakeDir(path.substr(0, pos)));
  }
  return OkStatus();
}

// Writes a configfs attribute. Not atomic: configfs attributes are not
// files that can be renamed over; the kernel applies each write whole.
Status WriteAttr(const std::string& path, const std::string& value) {
  std::string dir = path.substr(0, path.rfind('/'));
  BLOCKCSI_RETURN_IF_ERROR(MakeDirs(dir));
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoToStatus(errno, "open " + path);
  std::string line = value + "\n";
  ssize_t n = ::write(fd, line.data(), line.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size())) return ErrnoToStatus(err, "write " + path);
  return OkStatus();
}

std::string ReadAttr(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return "";
  std::string s = *text;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> names;
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

// rmdir; in a plain directory tree (tests) the attribute files are real
// files and are removed first. On configfs they are not, and rmdir works.
Status RemoveConfigDir(const std::string& path) {
  if (!Exists(path)) return OkStatus();
  if (::rmdir(path.c_str()) == 0) return OkStatus();
  if (errno != ENOTEMPTY && errno != EEXIST) return ErrnoToStatus(errno, "rmdir " + path);
  for (const auto& name : ListDir(path)) {
    std::string child = path + "/" + name;
    struct stat st {};
    if (::lstat(child.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(child));
    } else if (::unlink(child.c_str()) != 0) {
      return ErrnoToStatus(errno, "unlink " + child);
    }
  }
  if (::rmdir(path.c_str()) != 0) return ErrnoToStatus(errno, "rmdir " + path);
  return OkStatus();
}

Status Symlink(const std::string& target, const std::string& link) {
  if (Exists(link)) return OkStatus();
  if (::symlink(target.c_str(), link.c_str()) != 0) return ErrnoToStatus(errno, "link " + link);
  return OkStatus();
}

}  // namespace

LioExporter::LioExporter(std::string configfs_root, std::vector<std::string> portals)
    : root_(configfs_root.empty() || configfs_root == "/" ? "" : std::move(configfs_root)),
      portals_(std::move(portals)) {}

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

std::string LioExporter::Core(const std::string& volume_id) const {
  return root_ + "/target/core/fileio_0/" + volume_id;
}
std::string LioExporter::Tpg(const std::string& iqn) const { return root_ + "/target/iscsi/" + iqn + "/tpgt_1"; }

Status LioExporter::Healthy() {
  if (!IsDir(root_ + "/target/iscsi") && !IsDir(root_ + "/target")) {
    return Unavailable("LIO configfs is not mounted at " + root_ + "/target");
  }
  return OkStatus();
}

Status LioExporter::ApplyAclsLocked(const DesiredExport& d, const std::string& tpg, std::vector<std::string>& repairs) {
  std::map<std::string, const ChapCredentials*> secrets;
  for (const auto& c : d.chap) secrets[c.username] = &c;
  bool chap_wanted = false;
  for (const auto& a : d.acls) chap_wanted |= a.chap;
  BLOCKCSI_RETURN_IF_ERROR(WriteAttr(tpg + "/attrib/authentication", chap_wanted ? "1" : "0"));

  std::set<std::string> want;
  for (const auto& acl : d.acls) {
    const std::string dir = tpg + "/acls/" + acl.initiator_iqn;
    auto known = secrets.find(acl.chap_username);
    const ChapCredentials* chap = acl.chap_username.empty() || known == secrets.end() ? nullptr : known->second;
    if (acl.chap && chap == nullptr && !IsDir(dir)) {
      repairs.push_back("withheld ACL of " + acl.initiator_iqn + " on " + d.iqn +
                        ": CHAP secret unknown after a restart, grant again");
      continue;
    }
    want.insert(acl.initiator_iqn);
    bool fresh = !IsDir(dir);
    BLOCKCSI_RETURN_IF_ERROR(MakeDirs(dir));
    // Credentials before the mapped LUN: nothing is reachable without CHAP.
    if (acl.chap && chap != nullptr) {
      BLOCKCSI_RETURN_IF_ERROR(WriteAttr(dir + "/auth/userid", chap->username));
      BLOCKCSI_RETURN_IF_ERROR(WriteAttr(dir + "/auth/password", chap->password));
      if (chap->mutual()) {
        BLOCKCSI_RETURN_IF_ERROR(WriteAttr(dir + "/auth/userid_mut", chap->mutual_username));
        BLOCKCSI_RETURN_IF_ERROR(WriteAttr(dir + "/auth/password_mut", chap->mutual_password));
      }
    }
    if (!IsDir(dir + "/lun_1")) {
      BLOCKCSI_RETURN_IF_ERROR(MakeDirs(dir + "/lun_1"));
      BLOCKCSI_RETURN_IF_ERROR(Symlink("../../../lun/lun_1", dir + "/lun_1/lun_1"));
    }
    if (fresh) repairs.push_back("allowed " + acl.initiator_iqn + " on " + d.iqn);
  }
  for (const auto& acl : ListDir(tpg + "/acls")) {
    if (want.count(acl)) continue;
    // Removing the node ACL makes the kernel close the initiator's sessions.
    BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(tpg + "/acls/" + acl));
    repairs.push_back("disallowed " + acl + " on " + d.iqn);
  }
  return OkStatus();
}

StatusOr<std::vector<std::string>> LioExporter::ApplyLocked(const DesiredExport& d) {
  std::vector<std::string> repairs;
  const std::string core = Core(d.volume_id);
  const std::string tpg = Tpg(d.iqn);
  const std::string lun_dir = tpg + "/lun/lun_1";
  // Relative links keep the tree valid under any root.
  const std::string lun_link_target = "../../../../../core/fileio_0/" + d.volume_id;

  auto known = applied_size_.find(d.iqn);
  bool core_ok = IsDir(core) && ReadAttr(core + "/udev_path") == d.image_path &&
                 ReadAttr(core + "/wwn/vpd_unit_serial") == d.serial &&
                 (known == applied_size_.end() || known->second == d.size_bytes);
  if (!core_ok && IsDir(core)) {
    // The backstore is fixed once enabled: unhook it from the LUNs, re-create.
    for (const auto& acl : ListDir(tpg + "/acls")) {
      BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(tpg + "/acls/" + acl + "/lun_1"));
    }
    BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(lun_dir));
    BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(core));
  }
  if (!core_ok) {
    BLOCKCSI_RETURN_IF_ERROR(MakeDirs(core));
    BLOCKCSI_RETURN_IF_ERROR(
        WriteAttr(core + "/control", "fd_dev_name=" + d.image_path + ",fd_dev_size=" + std::to_string(d.size_bytes)));
    BLOCKCSI_RETURN_IF_ERROR(WriteAttr(core + "/udev_path", d.image_path));
    BLOCKCSI_RETURN_IF_ERROR(WriteAttr(core + "/wwn/vpd_unit_serial", d.serial));
    BLOCKCSI_RETURN_IF_ERROR(WriteAttr(core + "/enable", "1"));
    applied_size_[d.iqn] = d.size_bytes;
    repairs.push_back("configured backstore of " + d.volume_id);
  }
  bool new_target = !IsDir(tpg);
  if (new_target) {
    BLOCKCSI_RETURN_IF_ERROR(MakeDirs(tpg));
    // Only listed initiators; never demo mode (which would let anyone in).
    BLOCKCSI_RETURN_IF_ERROR(WriteAttr(tpg + "/attrib/generate_node_acls", "0"));
    BLOCKCSI_RETURN_IF_ERROR(WriteAttr(tpg + "/attrib/demo_mode_write_protect", "1"));
    for (const auto& portal : portals_) BLOCKCSI_RETURN_IF_ERROR(MakeDirs(tpg + "/np/" + portal));
    repairs.push_back("created target " + d.iqn);
  }
  if (!IsDir(lun_dir)) {
    BLOCKCSI_RETURN_IF_ERROR(MakeDirs(lun_dir));
    BLOCKCSI_RETURN_IF_ERROR(Symlink(lun_link_target, lun_dir + "/" + d.volume_id));
    repairs.push_back("added LUN 1 of " + d.iqn);
  }

  BLOCKCSI_RETURN_IF_ERROR(ApplyAclsLocked(d, tpg, repairs));
  if (ReadAttr(tpg + "/enable") != "1") BLOCKCSI_RETURN_IF_ERROR(WriteAttr(tpg + "/enable", "1"));
  return repairs;
}

StatusOr<std::vector<std::string>> LioExporter::Apply(const DesiredExport& desired) {
  std::lock_guard lock(mu_);
  return ApplyLocked(desired);
}

StatusOr<std::vector<std::string>> LioExporter::Reconcile(const std::vector<DesiredExport>& desired,
                                                          const std::string& iqn_prefix) {
  std::lock_guard lock(mu_);
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
  for (const auto& iqn : ListDir(root_ + "/target/iscsi")) {
    if (iqn.rfind(ns, 0) != 0 || wanted.count(iqn)) continue;
    BLOCKCSI_RETURN_IF_ERROR(RemoveLocked(iqn));
    repairs.push_back("removed target " + iqn + " that has no volume");
  }
  if (!first_error.ok()) return first_error;
  return repairs;
}

Status LioExporter::CloseSessions(const std::string& iqn, const std::string& initiator_iqn) {
  std::lock_guard lock(mu_);
  // The ACL is gone by now (Apply ran first), and with it the sessions; if a
  // stale ACL directory is still there, removing it is what closes them.
  return RemoveConfigDir(Tpg(iqn) + "/acls/" + initiator_iqn);
}

Status LioExporter::RemoveLocked(const std::string& iqn) {
  const std::string tpg = Tpg(iqn);
  std::string volume_id = iqn.substr(iqn.rfind(':') + 1);
  for (const auto& acl : ListDir(tpg + "/acls")) {
    BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(tpg + "/acls/" + acl));
  }
  BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(tpg + "/lun/lun_1"));
  for (const auto& np : ListDir(tpg + "/np")) BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(tpg + "/np/" + np));
  BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(tpg));
  BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(root_ + "/target/iscsi/" + iqn));
  if (IsVolumeId(volume_id)) BLOCKCSI_RETURN_IF_ERROR(RemoveConfigDir(Core(volume_id)));
  applied_size_.erase(iqn);
  return OkStatus();
}

Status LioExporter::Remove(const std::string& iqn) {
  std::lock_guard lock(mu_);
  return RemoveLocked(iqn);
}

}  // namespace blockcsi
