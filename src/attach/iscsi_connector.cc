#include "attach/iscsi_connector.h"

#include <algorithm>
#include <cstdio>
#include <future>
#include <map>
#include <set>

#include "attach/iscsi_sysfs.h"
#include "common/keyed_lock.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "contract/iscsi_names.h"

namespace blockcsi {
namespace {

// iscsiadm exit codes (open-iscsi include/iscsi_err.h).
constexpr int kErrSessionExists = 15;
constexpr int kErrFatalLogin = 19;
constexpr int kErrNoObjectsFound = 21;
constexpr int kErrLoginAuthFailed = 24;

struct PathDevice {
  std::string portal;
  IscsiSessionInfo session;
  std::string block;  // "sdc"
  uint64_t size = 0;
  LunIdentity identity;
};

class IscsiConnector final : public Connector {
 public:
  explicit IscsiConnector(IscsiConnectorOptions o) : options_(std::move(o)) {
    if (!options_.executor) options_.executor = MakeProcessExecutor();
    if (!options_.clock) options_.clock = RealClock();
  }

  std::string family() const override { return "iscsi"; }

  void Prepare(const AttachSpec& spec, AttachRecord* record) override {
    record->connector_state["iface"] = IfaceFor(spec);
  }

  StatusOr<ConnectResult> Connect(const AttachSpec& spec, AttachRecord* record) override {
    BLOCKCSI_RETURN_IF_ERROR(EnsureIface(IfaceFor(spec), spec.initiator_iqn));
    // Portals are logged in to in parallel: a dead portal costs its login
    // timeout and retries, and must not add them to the healthy paths' time.
    std::vector<StatusOr<PathDevice>> results;
    if (spec.portals.size() == 1) {
      results.push_back(ConnectPath(spec, spec.portals.front()));
    } else {
      std::vector<std::future<StatusOr<PathDevice>>> pending;
      for (const std::string& portal_text : spec.portals) {
        pending.push_back(
            std::async(std::launch::async, [this, &spec, portal_text] { return ConnectPath(spec, portal_text); }));
      }
      for (auto& f : pending) results.push_back(f.get());
    }
    std::vector<PathDevice> paths;
    Status worst;
    for (size_t i = 0; i < spec.portals.size(); ++i) {
      const std::string& portal_text = spec.portals[i];
      auto& path = results[i];
      if (!path.ok()) {
        // One dead portal must not block the others.
        LogWarn("iSCSI path failed",
                {{"volume_id", spec.volume_id}, {"portal", portal_text}, {"error", path.status().message()}});
        if (worst.ok() || path.status().code() == StatusCode::kPermissionDenied) worst = path.status();
        continue;
      }
      record->connector_state["path." + portal_text] = path->block;
      record->connector_state["session." + portal_text] = path->session.sid;
      paths.push_back(std::move(*path));
    }
    if (paths.empty()) return worst;

    ConnectResult result;
    result.identity = paths.front().identity;
    result.size_bytes = paths.front().size;
    // Every path must be the same LUN: a path that disagrees is a
    // misconfigured portal and would corrupt data under multipath.
    for (const auto& p : paths) {
      if (p.identity.serial != result.identity.serial || p.identity.naa != result.identity.naa ||
          p.size != result.size_bytes) {
        return FailedPrecondition("volume \"" + spec.volume_id + "\": paths disagree: " + paths.front().portal +
                                  " reports " + result.identity.Describe() + " size " +
                                  std::to_string(result.size_bytes) + ", " + p.portal + " reports " +
                                  p.identity.Describe() + " size " + std::to_string(p.size));
      }
    }
    if (spec.portals.size() > 1) {
      BLOCKCSI_ASSIGN_OR_RETURN(std::string dm, WaitForMultipath(spec, paths));
      record->connector_state["dm"] = dm;
      result.device_path = "/dev/" + dm;
    } else if (auto dm = MultipathHolder(*options_.host_fs, paths.front().block)) {
      // multipathd claimed the single path; the disk itself is busy then.
      record->connector_state["dm"] = *dm;
      result.device_path = "/dev/" + *dm;
    } else {
      result.device_path = "/dev/" + paths.front().block;
    }
    return result;
  }

  Status Disconnect(const AttachRecord& record) override {
    std::string iface = record.connector_state.count("iface") ? record.connector_state.at("iface") : options_.iface;
    // Block devices this attachment reaches, found afresh (names may have
    // changed since the record was written).
    std::vector<std::pair<std::string, IscsiSessionInfo>> sessions;
    std::set<std::string> disks;
    std::string dm;
    for (const std::string& portal_text : record.portals) {
      auto portal = ParsePortal(portal_text);
      if (!portal.ok()) continue;
      auto session = FindIscsiSession(*options_.host_fs, record.target_iqn, *portal, iface);
      if (!session) continue;
      sessions.emplace_back(portal_text, *session);
      for (const auto& dev : ScsiDevicesOfLun(*options_.host_fs, *session, record.lun)) {
        auto block = BlockNameOfScsiDevice(*options_.host_fs, dev);
        if (!block.ok()) continue;
        disks.insert(*block);
        if (auto holder = MultipathHolder(*options_.host_fs, *block)) dm = *holder;
      }
    }
    // 1. Flush buffers of the device the node used.
    std::string top = !dm.empty() ? dm : (disks.empty() ? "" : *disks.begin());
    if (!top.empty()) {
      auto r = options_.executor->Run(Command("blockdev").Arg("--flushbufs").Arg("/dev/" + top).Timeout(kFlushTimeout));
      if (!r.ok() || !r->ok()) {
        LogWarn("flushing buffers failed", {{"volume_id", record.volume_id}, {"device", "/dev/" + top}});
      }
    }
    // 2. Flush the multipath map (it queues I/O otherwise).
    if (!dm.empty()) {
      std::string name = DmName(*options_.host_fs, dm);
      auto r =
          options_.executor->Run(Command("multipath").Arg("-f").Arg(name.empty() ? dm : name).Timeout(kFlushTimeout));
      if ((!r.ok() || !r->ok()) && options_.host_fs->Exists("/sys/block/" + dm)) {
        return Unavailable("cannot flush multipath map " + (name.empty() ? dm : name) + " of volume \"" +
                           record.volume_id + "\": " + (r.ok() ? r->stderr_text : r.status().message()));
      }
    }
    // 3. Delete the SCSI devices of this LUN on every path.
    for (const auto& [portal_text, session] : sessions) {
      for (const auto& dev : ScsiDevicesOfLun(*options_.host_fs, session, record.lun)) {
        if (!options_.host_fs->Exists(dev + "/delete")) continue;
        Status st = options_.host_fs->WriteFile(dev + "/delete", "1");
        if (!st.ok() && options_.host_fs->Exists(dev))
          return st.WithContext("delete SCSI device of " + record.volume_id);
      }
    }
    return LogOutUnlessShared(record, iface);
  }

  // Step 4 of Disconnect: log out only when no other LUN of the target is in
  // use here, then drop the node record. Serialised per path with attaches,
  // so a LUN being attached through the same session is seen (or waited for).
  Status LogOutUnlessShared(const AttachRecord& record, const std::string& iface) {
    for (const std::string& portal_text : record.portals) {
      auto portal = ParsePortal(portal_text);
      if (!portal.ok()) continue;
      auto path_lock = path_locks_.Lock(record.target_iqn + " " + portal_text);
      auto session = FindIscsiSession(*options_.host_fs, record.target_iqn, *portal, iface);
      if (session) {
        auto others = OtherLunDevices(*options_.host_fs, *session, record.lun);
        if (!others.empty()) {
          LogInfo("keeping iSCSI session: another LUN of the target is in use on this node",
                  {{"volume_id", record.volume_id},
                   {"portal", portal_text},
                   {"session", session->sid},
                   {"other", others.front()}});
          continue;
        }
        auto r =
            options_.executor->Run(Node(record.target_iqn, portal_text, iface).Arg("--logout").Timeout(kLogoutTimeout));
        if (!r.ok()) return r.status();
        if (!r->ok() && r->exit_code != kErrNoObjectsFound) {
          return Unavailable("iSCSI logout from " + record.target_iqn + " at " + portal_text +
                             " failed: " + Trim(r->stderr_text));
        }
      }
      auto r = options_.executor->Run(Node(record.target_iqn, portal_text, iface).Arg("-o").Arg("delete"));
      if (!r.ok()) return r.status();
      if (!r->ok() && r->exit_code != kErrNoObjectsFound) {
        return Internal("deleting the node record of " + record.target_iqn + " at " + portal_text +
                        " failed: " + Trim(r->stderr_text));
      }
    }
    return OkStatus();
  }

  StatusOr<LunIdentity> ReadIdentity(const AttachRecord& record) override {
    BLOCKCSI_ASSIGN_OR_RETURN(std::string disk, AnyDisk(record));
    return ReadSysfsIdentity(*options_.host_fs, disk);
  }

  StatusOr<uint64_t> Rescan(AttachRecord* record) override {
    for (const auto& [key, value] : record->connector_state) {
      if (!key.starts_with("path.")) continue;
      std::string rescan = "/sys/block/" + value + "/device/rescan";
      if (options_.host_fs->Exists(rescan)) BLOCKCSI_RETURN_IF_ERROR(options_.host_fs->WriteFile(rescan, "1"));
    }
    auto dm = record->connector_state.find("dm");
    if (dm != record->connector_state.end()) {
      std::string name = DmName(*options_.host_fs, dm->second);
      BLOCKCSI_RETURN_IF_ERROR(RunChecked(*options_.executor, Command("multipathd").Arg("resize").Arg("map").Arg(name),
                                          StatusCode::kUnavailable)
                                   .status());
      return BlockDeviceSize(*options_.host_fs, dm->second);
    }
    BLOCKCSI_ASSIGN_OR_RETURN(std::string disk, AnyDisk(*record));
    return BlockDeviceSize(*options_.host_fs, disk);
  }

  AttachHealth Check(const AttachRecord& record) override {
    std::string name = record.device_path.substr(record.device_path.rfind('/') + 1);
    if (name.empty() || !options_.host_fs->Exists("/sys/block/" + name)) {
      return {true, "device " + record.device_path + " is gone"};
    }
    std::string iface = record.connector_state.count("iface") ? record.connector_state.at("iface") : options_.iface;
    int live = 0;
    std::string down;
    for (const std::string& portal_text : record.portals) {
      auto portal = ParsePortal(portal_text);
      if (!portal.ok()) continue;
      auto session = FindIscsiSession(*options_.host_fs, record.target_iqn, *portal, iface);
      if (session && session->state == "LOGGED_IN") {
        ++live;
      } else {
        down += (down.empty() ? "" : ", ") + portal_text;
      }
    }
    if (live == 0) return {true, "no iSCSI session to " + record.target_iqn + " is logged in (" + down + ")"};
    return {};
  }

  Status Reconcile(std::vector<AttachRecord>* records) override {
    // Kernel sessions outlive the plugin by themselves and Disconnect finds
    // sessions and devices afresh, so nothing needs adopting; what does not
    // match is reported for the operator (and for NodeUnstage to clean).
    std::set<std::string> targets;
    for (const auto& record : *records) {
      targets.insert(record.target_iqn);
      if (record.state != "attached") continue;
      if (Check(record).abnormal) {
        LogWarn("attached volume has lost its device or sessions",
                {{"volume_id", record.volume_id}, {"device", record.device_path}, {"why", Check(record).message}});
      }
    }
    auto sessions = options_.host_fs->ListDir("/sys/class/iscsi_session");
    if (!sessions.ok()) return OkStatus();
    for (const auto& name : *sessions) {
      std::string base = "/sys/class/iscsi_session/" + name;
      auto iface = ReadTrimmed(*options_.host_fs, base + "/ifacename");
      auto target = ReadTrimmed(*options_.host_fs, base + "/targetname");
      if (!iface.ok() || !IsOurIface(*iface) || !target.ok() || targets.count(*target) > 0) continue;
      LogWarn("iSCSI session on our iface with no attach record (left by a crash or by hand); not touching it",
              {{"session", name}, {"target", *target}});
    }
    return OkStatus();
  }

 private:
  static constexpr std::chrono::seconds kFlushTimeout{60};

  // The iface a volume logs in through: ours, carrying this node's
  // initiator name; or, for a static PV naming its own initiatorName (issue
  // #24), one per such name — "<iface>-<FNV-1a 64 of the name>", stable
  // across restarts — carrying that name, so that the node's own iface never
  // changes under the sessions of other volumes.
  std::string IfaceFor(const AttachSpec& spec) const {
    if (spec.initiator_iqn.empty() || spec.initiator_iqn == options_.initiator_iqn) return options_.iface;
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : spec.initiator_iqn) h = (h ^ c) * 0x100000001b3ull;
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
    return options_.iface + "-" + hex;
  }
  bool IsOurIface(const std::string& name) const {
    return name == options_.iface || name.starts_with(options_.iface + "-");
  }
  static constexpr std::chrono::seconds kLogoutTimeout{60};

  static std::string Trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  Command Node(const std::string& target, const std::string& portal, const std::string& iface) const {
    Command c("iscsiadm");
    c.Arg("-m").Arg("node").Arg("-T").Arg(target).Arg("-p").Arg(portal).Arg("-I").Arg(iface);
    return c;
  }

  // Non-secret settings only: iscsiadm's argv is readable from /proc.
  Status UpdateNode(const AttachSpec& spec, const std::string& portal, const std::string& key,
                    const std::string& value) {
    Command c = Node(spec.target_iqn, portal, IfaceFor(spec));
    c.Arg("-o").Arg("update").Arg("-n").Arg(key).Arg("-v").Arg(value);
    return RunChecked(*options_.executor, c, StatusCode::kInternal).status();
  }

  // The file of the node record `iscsiadm -m node -o new` made for target,
  // portal and our iface. open-iscsi keeps two layouts:
  // <nodes>/<iqn>/<ip>,<port> (a file; tpgt unknown, what `-o new` without a
  // tpgt makes) and <nodes>/<iqn>/<ip>,<port>,<tpgt>/<iface> (from
  // discovery). Whichever tpgt: more than one candidate is ambiguous, and
  // writing credentials into the wrong record is worse than failing.
  StatusOr<std::string> FindNodeRecordFile(const AttachSpec& spec, const std::string& portal_text) {
    BLOCKCSI_ASSIGN_OR_RETURN(Portal portal, ParsePortal(portal_text));
    std::string dir = options_.nodes_dir + "/" + spec.target_iqn;
    auto entries = options_.host_fs->ListDir(dir);
    if (!entries.ok()) {
      return Internal("volume \"" + spec.volume_id + "\": no node record directory for " + spec.target_iqn + " in " +
                      options_.nodes_dir + ": " + entries.status().message());
    }
    std::string flat = portal.host + "," + std::to_string(portal.port);
    const std::string iface = IfaceFor(spec);
    std::vector<std::string> found;
    for (const std::string& name : *entries) {
      if (name == flat && !options_.host_fs->ListDir(dir + "/" + name).ok()) {
        found.push_back(dir + "/" + name);
      } else if (name.starts_with(flat + ",") && options_.host_fs->Exists(dir + "/" + name + "/" + iface)) {
        found.push_back(dir + "/" + name + "/" + iface);
      }
    }
    if (found.size() != 1) {
      return Internal("volume \"" + spec.volume_id + "\": " + std::to_string(found.size()) + " node records of " +
                      spec.target_iqn + " at " + portal_text + " through iface " + iface + " in " + options_.nodes_dir +
                      (found.empty() ? "" : " (ambiguous: " + found.front() + ", " + found.back() + ")") +
                      "; expected exactly one");
    }
    return found.front();
  }

  // Writes node.session.auth.* into the record file: replaces those keys'
  // lines, inserts missing ones after the authmethod line (where iscsiadm
  // itself puts them) and leaves every other line as it was. Crash-safe and
  // mode 0600 through the host seam. Neither error nor log carries a value.
  Status WriteNodeAuth(const AttachSpec& spec, const std::string& portal,
                       const std::vector<std::pair<std::string, std::string>>& auth) {
    for (const auto& [key, value] : auth) {
      // The record is line-oriented: a control byte in a value would forge
      // another setting. Validation upstream refuses these already.
      for (unsigned char c : value) {
        if (c < 0x20 || c == 0x7f) {
          return InvalidArgument("volume \"" + spec.volume_id + "\": CHAP " + key + " contains a control byte");
        }
      }
    }
    BLOCKCSI_ASSIGN_OR_RETURN(std::string path, FindNodeRecordFile(spec, portal));
    BLOCKCSI_ASSIGN_OR_RETURN(std::string text, options_.host_fs->ReadFile(path));
    std::vector<std::string> lines;
    for (size_t pos = 0; pos < text.size();) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) nl = text.size();
      lines.push_back(text.substr(pos, nl - pos));
      pos = nl + 1;
    }
    auto key_of = [](const std::string& line) {
      size_t eq = line.find(" = ");
      return eq == std::string::npos ? std::string() : line.substr(0, eq);
    };
    std::vector<bool> written(auth.size(), false);
    for (std::string& line : lines) {
      for (size_t i = 0; i < auth.size(); ++i) {
        if (key_of(line) == "node.session.auth." + auth[i].first) {
          line = "node.session.auth." + auth[i].first + " = " + auth[i].second;
          written[i] = true;
        }
      }
    }
    auto at = std::find_if(lines.begin(), lines.end(),
                           [&](const std::string& l) { return key_of(l) == "node.session.auth.authmethod"; });
    if (at == lines.end()) {
      at = std::find(lines.begin(), lines.end(), "# END RECORD");
      if (at == lines.end()) {
        return Internal("volume \"" + spec.volume_id + "\": node record " + path + " has no \"# END RECORD\" line");
      }
    } else {
      ++at;
    }
    for (size_t i = 0; i < auth.size(); ++i) {
      if (written[i]) continue;
      at = lines.insert(at, "node.session.auth." + auth[i].first + " = " + auth[i].second) + 1;
    }
    std::string out;
    for (const std::string& line : lines) out += line + "\n";
    return options_.host_fs->ReplaceFile(path, out).WithContext("write CHAP settings into node record " + path);
  }

  // The dedicated iface carries the initiator name (IfaceFor), so that the
  // host's own /etc/iscsi/initiatorname.iscsi (and other users of
  // open-iscsi) are left alone.
  Status EnsureIface(const std::string& iface, const std::string& initiator) {
    MutexLock lock(iface_mu_);
    auto show =
        options_.executor->Run(Command("iscsiadm").Arg("-m").Arg("iface").Arg("-I").Arg(iface).Arg("-o").Arg("show"));
    if (!show.ok()) return show.status();
    if (!show->ok()) {
      BLOCKCSI_RETURN_IF_ERROR(
          RunChecked(*options_.executor,
                     Command("iscsiadm").Arg("-m").Arg("iface").Arg("-I").Arg(iface).Arg("-o").Arg("new"))
              .status());
    } else if (show->stdout_text.find("iface.initiatorname = " + initiator + "\n") != std::string::npos) {
      return OkStatus();
    }
    return RunChecked(*options_.executor, Command("iscsiadm")
                                              .Arg("-m")
                                              .Arg("iface")
                                              .Arg("-I")
                                              .Arg(iface)
                                              .Arg("-o")
                                              .Arg("update")
                                              .Arg("-n")
                                              .Arg("iface.initiatorname")
                                              .Arg("-v")
                                              .Arg(initiator))
        .status();
  }

  StatusOr<PathDevice> ConnectPath(const AttachSpec& spec, const std::string& portal_text) {
    BLOCKCSI_ASSIGN_OR_RETURN(Portal portal, ParsePortal(portal_text));
    // Held until our LUN's device exists: a detach of another LUN of this
    // target must not log the session out from under a scan in progress.
    auto path_lock = path_locks_.Lock(spec.target_iqn + " " + portal_text);
    const std::string iface = IfaceFor(spec);
    {
      auto session = FindIscsiSession(*options_.host_fs, spec.target_iqn, portal, iface);
      if (session && session->state == "LOGGED_IN") {
        LogInfo("iSCSI session already logged in; reusing",
                {{"volume_id", spec.volume_id}, {"portal", portal_text}, {"session", session->sid}});
      } else {
        BLOCKCSI_RETURN_IF_ERROR(CreateNodeRecord(spec, portal_text));
        BLOCKCSI_RETURN_IF_ERROR(Login(spec, portal_text));
      }
    }
    // The session shows up in sysfs once iscsid has set it up.
    std::optional<IscsiSessionInfo> session;
    auto deadline = options_.clock->Now() + options_.device_wait;
    while (!(session = FindIscsiSession(*options_.host_fs, spec.target_iqn, portal, iface))) {
      if (options_.clock->Now() >= deadline) {
        return DeadlineExceeded("logged in to " + spec.target_iqn + " at " + portal_text +
                                " but no session appeared in sysfs");
      }
      options_.clock->Sleep(options_.poll_interval);
    }
    // The target's ACL admitted the name the session carries: it must be
    // the one asked for (an iface edited by hand would log in as another).
    auto logged_in_as =
        ReadTrimmed(*options_.host_fs, "/sys/class/iscsi_session/session" + session->sid + "/initiatorname");
    if (logged_in_as.ok() && !spec.initiator_iqn.empty() && *logged_in_as != spec.initiator_iqn) {
      return FailedPrecondition("volume \"" + spec.volume_id + "\": the session to " + spec.target_iqn + " at " +
                                portal_text + " is logged in as " + *logged_in_as + ", not " + spec.initiator_iqn);
    }
    BLOCKCSI_RETURN_IF_ERROR(ScanLun(*options_.host_fs, *session, spec.lun).WithContext("scan LUN"));
    std::string block;
    while (true) {
      for (const auto& dev : ScsiDevicesOfLun(*options_.host_fs, *session, spec.lun)) {
        auto name = BlockNameOfScsiDevice(*options_.host_fs, dev);
        // The disk shows under its SCSI device a moment before the kernel
        // links it into /sys/block, where its size and identity are read.
        if (name.ok() && options_.host_fs->Exists("/sys/block/" + *name)) block = *name;
      }
      if (!block.empty()) break;
      if (options_.clock->Now() >= deadline) {
        return DeadlineExceeded("volume \"" + spec.volume_id + "\": LUN " + std::to_string(spec.lun) + " of " +
                                spec.target_iqn + " did not appear as a block device through " + portal_text +
                                " within " + std::to_string(options_.device_wait.count()) + "ms");
      }
      options_.clock->Sleep(options_.poll_interval);
      ScanLun(*options_.host_fs, *session, spec.lun).ok();  // rescan: the first one may race the session
    }
    PathDevice path;
    path.portal = portal_text;
    path.session = *session;
    path.block = block;
    BLOCKCSI_ASSIGN_OR_RETURN(path.size, BlockDeviceSize(*options_.host_fs, block));
    BLOCKCSI_ASSIGN_OR_RETURN(path.identity, ReadSysfsIdentity(*options_.host_fs, block));
    LogInfo("iSCSI path ready", {{"volume_id", spec.volume_id},
                                 {"portal", portal_text},
                                 {"session", session->sid},
                                 {"device", "/dev/" + block}});
    return path;
  }

  Status CreateNodeRecord(const AttachSpec& spec, const std::string& portal) {
    auto created = options_.executor->Run(Node(spec.target_iqn, portal, IfaceFor(spec)).Arg("-o").Arg("new"));
    if (!created.ok()) return created.status();
    if (!created->ok()) {
      return Internal("creating the node record for " + spec.target_iqn + " at " + portal +
                      " failed: " + Trim(created->stderr_text));
    }
    // Manual startup: iscsid must not log in at boot behind our back.
    // Manual scan: only the LUN we ask for becomes a device.
    BLOCKCSI_RETURN_IF_ERROR(UpdateNode(spec, portal, "node.startup", "manual"));
    BLOCKCSI_RETURN_IF_ERROR(UpdateNode(spec, portal, "node.session.scan", "manual"));
    int login_s = static_cast<int>(std::max<int64_t>(1, options_.login_timeout.count() / 1000));
    BLOCKCSI_RETURN_IF_ERROR(UpdateNode(spec, portal, "node.conn[0].timeo.login_timeout", std::to_string(login_s)));
    BLOCKCSI_RETURN_IF_ERROR(UpdateNode(spec, portal, "node.session.initial_login_retry_max", "1"));
    if (spec.chap.enabled()) {
      std::vector<std::pair<std::string, std::string>> auth = {
          {"authmethod", "CHAP"}, {"username", spec.chap.username}, {"password", spec.chap.password}};
      if (spec.chap.mutual()) {
        auth.emplace_back("username_in", spec.chap.mutual_username);
        auth.emplace_back("password_in", spec.chap.mutual_password);
      }
      BLOCKCSI_RETURN_IF_ERROR(WriteNodeAuth(spec, portal, auth));
    } else {
      BLOCKCSI_RETURN_IF_ERROR(UpdateNode(spec, portal, "node.session.auth.authmethod", "None"));
    }
    return OkStatus();
  }

  Status Login(const AttachSpec& spec, const std::string& portal) {
    // iscsiadm's own wait covers one login attempt; bound the whole command
    // a little above it.
    auto timeout = options_.login_timeout + std::chrono::seconds(10);
    std::string last;
    for (int attempt = 0; attempt <= options_.login_retries; ++attempt) {
      auto r = options_.executor->Run(Node(spec.target_iqn, portal, IfaceFor(spec)).Arg("--login").Timeout(timeout));
      if (!r.ok()) {
        last = r.status().message();
      } else if (r->ok() || r->exit_code == kErrSessionExists) {
        return OkStatus();
      } else if (r->exit_code == kErrLoginAuthFailed) {
        return PermissionDenied("iSCSI login to " + spec.target_iqn + " at " + portal +
                                " was refused: CHAP credentials rejected or initiator " + spec.initiator_iqn +
                                " not allowed by the target's ACL");
      } else if (r->exit_code == kErrFatalLogin) {
        // iscsid gave up on this login for good: the same attempt again
        // fails the same way. Seen on a real kernel when the target's answer
        // to mutual CHAP does not match the mutual secret; also what a
        // target that has no such name or rejects the negotiation gets.
        return FailedPrecondition("iSCSI login to " + spec.target_iqn + " at " + portal +
                                  " failed for good (iscsiadm: non-retryable login failure): " +
                                  (spec.chap.mutual() ? "the target did not prove the mutual CHAP secret, or " : "") +
                                  "the target refused the login outright: " + Trim(r->stderr_text));
      } else {
        last = Trim(r->stderr_text);
      }
      LogWarn("iSCSI login attempt failed", {{"volume_id", spec.volume_id},
                                             {"portal", portal},
                                             {"attempt", std::to_string(attempt + 1)},
                                             {"error", last}});
    }
    return Unavailable("iSCSI login to " + spec.target_iqn + " at " + portal + " failed after " +
                       std::to_string(options_.login_retries + 1) + " attempts: " + last);
  }

  StatusOr<std::string> WaitForMultipath(const AttachSpec& spec, const std::vector<PathDevice>& paths) {
    auto deadline = options_.clock->Now() + options_.multipath_wait;
    while (true) {
      std::optional<std::string> dm = MultipathHolder(*options_.host_fs, paths.front().block);
      bool all = dm.has_value();
      for (const auto& p : paths) {
        if (!all) break;
        auto holder = MultipathHolder(*options_.host_fs, p.block);
        if (!holder || *holder != *dm) all = false;
      }
      if (all) {
        LogInfo("multipath device ready",
                {{"volume_id", spec.volume_id}, {"device", "/dev/" + *dm}, {"paths", std::to_string(paths.size())}});
        return *dm;
      }
      if (options_.clock->Now() >= deadline) {
        return DeadlineExceeded("volume \"" + spec.volume_id + "\": no dm-multipath device holds all " +
                                std::to_string(paths.size()) + " paths within " +
                                std::to_string(options_.multipath_wait.count()) + "ms (is multipathd running?)");
      }
      options_.clock->Sleep(options_.poll_interval);
    }
  }

  StatusOr<std::string> AnyDisk(const AttachRecord& record) {
    for (const auto& [key, value] : record.connector_state) {
      if (key.starts_with("path.") && options_.host_fs->Exists("/sys/block/" + value)) return value;
    }
    return NotFound("volume \"" + record.volume_id + "\": no path device of the attachment is present");
  }

  IscsiConnectorOptions options_;
  Mutex iface_mu_;        // one iface read-modify-write through iscsiadm at a time
  KeyedLock path_locks_;  // one iSCSI path ("<target> <portal>") at a time
};

}  // namespace

std::unique_ptr<Connector> MakeIscsiConnector(IscsiConnectorOptions options) {
  return std::make_unique<IscsiConnector>(std::move(options));
}

}  // namespace blockcsi
