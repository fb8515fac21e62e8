#include "attach/iscsi_sysfs.h"

#include <charconv>

namespace blockcsi {
namespace {

// Joins a sysfs symlink target onto the directory holding the link and
// folds "..", the way the kernel's relative links are meant to be read.
std::string ResolveRelative(const std::string& link_dir, const std::string& target) {
  std::vector<std::string> parts;
  auto push_all = [&](const std::string& path) {
    size_t start = 0;
    while (start <= path.size()) {
      size_t slash = path.find('/', start);
      std::string part = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
      if (part == "..") {
        if (!parts.empty()) parts.pop_back();
      } else if (!part.empty() && part != ".") {
        parts.push_back(part);
      }
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
  };
  if (target.empty() || target[0] != '/') push_all(link_dir);
  push_all(target);
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  return out;
}

std::string Read(const Host& fs, const std::string& path) {
  auto v = ReadTrimmed(fs, path);
  return v.ok() ? *v : "";
}

}  // namespace

std::optional<IscsiSessionInfo> FindIscsiSession(const Host& fs, const std::string& target_iqn, const Portal& portal,
                                                 const std::string& iface) {
  auto sessions = fs.ListDir("/sys/class/iscsi_session");
  if (!sessions.ok()) return std::nullopt;
  for (const auto& name : *sessions) {
    if (!name.starts_with("session")) continue;
    std::string base = "/sys/class/iscsi_session/" + name;
    if (Read(fs, base + "/targetname") != target_iqn) continue;
    std::string ifacename = Read(fs, base + "/ifacename");
    if (!iface.empty() && !ifacename.empty() && ifacename != iface) continue;
    std::string sid = name.substr(7);
    std::string conn = "/sys/class/iscsi_connection/connection" + sid + ":0";
    std::string address = Read(fs, conn + "/persistent_address");
    std::string port = Read(fs, conn + "/persistent_port");
    if (address != portal.host || port != std::to_string(portal.port)) continue;
    auto link = fs.ReadLink(base);
    if (!link.ok()) continue;
    // ../../devices/platform/host5/session3/iscsi_session/session3
    std::string resolved = ResolveRelative("/sys/class/iscsi_session", *link);
    size_t at = resolved.find("/session" + sid + "/");
    if (at == std::string::npos) continue;
    IscsiSessionInfo info;
    info.sid = sid;
    info.device_dir = resolved.substr(0, at) + "/session" + sid;
    size_t host_at = info.device_dir.rfind("/host");
    if (host_at == std::string::npos) continue;
    info.host = info.device_dir.substr(host_at + 1, info.device_dir.find('/', host_at + 1) - host_at - 1);
    info.state = Read(fs, base + "/state");
    return info;
  }
  return std::nullopt;
}

namespace {

// (dir, lun) of every SCSI device under the session's targets.
std::vector<std::pair<std::string, int>> LunDevices(const Host& fs, const IscsiSessionInfo& session) {
  std::vector<std::pair<std::string, int>> out;
  auto entries = fs.ListDir(session.device_dir);
  if (!entries.ok()) return out;
  for (const auto& target : *entries) {
    if (!target.starts_with("target")) continue;
    std::string target_dir = session.device_dir + "/" + target;
    std::string prefix = target.substr(6) + ":";  // "5:0:0:"
    auto devices = fs.ListDir(target_dir);
    if (!devices.ok()) continue;
    for (const auto& dev : *devices) {
      if (!dev.starts_with(prefix)) continue;
      int lun = -1;
      std::string_view tail(dev);
      tail.remove_prefix(prefix.size());
      auto [p, ec] = std::from_chars(tail.data(), tail.data() + tail.size(), lun);
      if (ec != std::errc() || p != tail.data() + tail.size()) continue;
      out.emplace_back(target_dir + "/" + dev, lun);
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> ScsiDevicesOfLun(const Host& fs, const IscsiSessionInfo& session, int lun) {
  std::vector<std::string> out;
  for (const auto& [dir, l] : LunDevices(fs, session)) {
    if (l == lun) out.push_back(dir);
  }
  return out;
}

std::vector<std::string> OtherLunDevices(const Host& fs, const IscsiSessionInfo& session, int lun) {
  std::vector<std::string> out;
  for (const auto& [dir, l] : LunDevices(fs, session)) {
    if (l != lun) out.push_back(dir);
  }
  return out;
}

StatusOr<std::string> BlockNameOfScsiDevice(const Host& fs, const std::string& scsi_device_dir) {
  auto names = fs.ListDir(scsi_device_dir + "/block");
  if (!names.ok() || names->empty()) return NotFound("no block device yet under " + scsi_device_dir);
  return names->front();
}

Status ScanLun(const Host& fs, const IscsiSessionInfo& session, int lun) {
  return fs.WriteFile("/sys/class/scsi_host/" + session.host + "/scan", "- - " + std::to_string(lun));
}

StatusOr<uint64_t> BlockDeviceSize(const Host& fs, const std::string& name) {
  BLOCKCSI_ASSIGN_OR_RETURN(std::string text, ReadTrimmed(fs, "/sys/block/" + name + "/size"));
  uint64_t sectors = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), sectors);
  if (ec != std::errc() || p != text.data() + text.size()) {
    return Internal("unreadable size of " + name + ": \"" + text + "\"");
  }
  return sectors * 512;  // sysfs counts 512-byte sectors whatever the block size
}

StatusOr<LunIdentity> ReadSysfsIdentity(const Host& fs, const std::string& name) {
  std::string dev = "/sys/block/" + name + "/device";
  auto p80 = fs.ReadFile(dev + "/vpd_pg80");
  auto p83 = fs.ReadFile(dev + "/vpd_pg83");
  if (!p80.ok() && !p83.ok()) return NotFound(name + " exposes neither vpd_pg80 nor vpd_pg83");
  return ParseVpdPages(p80.ok() ? *p80 : "", p83.ok() ? *p83 : "");
}

std::optional<std::string> MultipathHolder(const Host& fs, const std::string& name) {
  auto holders = fs.ListDir("/sys/block/" + name + "/holders");
  if (!holders.ok()) return std::nullopt;
  for (const auto& h : *holders) {
    if (!h.starts_with("dm-")) continue;
    if (Read(fs, "/sys/block/" + h + "/dm/uuid").starts_with("mpath-")) return h;
  }
  return std::nullopt;
}

std::vector<std::string> MultipathSlaves(const Host& fs, const std::string& dm) {
  auto slaves = fs.ListDir("/sys/block/" + dm + "/slaves");
  return slaves.ok() ? *slaves : std::vector<std::string>{};
}

std::string DmName(const Host& fs, const std::string& dm) { return Read(fs, "/sys/block/" + dm + "/dm/name"); }

}  // namespace blockcsi
