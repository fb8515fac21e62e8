#include "attach/userspace_connector.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <set>

#include "attach/attach_record_store.h"
#include "attach/process_exit.h"
#include "bridge/bridge_cgroup.h"
#include "bridge/bridge_protocol.h"
#include "common/atomic_file.h"
#include "common/executor.h"
#include "common/logging.h"
#include "common/loop_devices.h"
#include "common/span.h"
#include "contract/initiator.h"

namespace blockcsi {

std::vector<int> FindBridgePids(const Host& fs, const std::string& control_socket) {
  Span span("proc_scan");
  std::vector<int> out;
  auto entries = fs.ListDir("/proc");
  if (!entries.ok()) return out;
  for (const auto& e : *entries) {
    if (e.empty() || e.find_first_not_of("0123456789") != std::string::npos) continue;
    auto cmdline = fs.ReadFile("/proc/" + e + "/cmdline");
    if (!cmdline.ok()) continue;
    std::vector<std::string> argv;
    size_t start = 0;
    while (start < cmdline->size()) {
      size_t nul = cmdline->find('\0', start);
      if (nul == std::string::npos) nul = cmdline->size();
      argv.push_back(cmdline->substr(start, nul - start));
      start = nul + 1;
    }
    bool names_socket = false;
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "--control-socket" && argv[i + 1] == control_socket) names_socket = true;
    }
    if (names_socket && IsBridgeArgv(argv)) out.push_back(std::stoi(e));
  }
  return out;
}

bool IsBridgeArgv(const std::vector<std::string>& argv) {
  if (argv.empty()) return false;
  std::string_view program = argv[0];
  program = program.substr(program.find_last_of('/') + 1);
  if (program == "blockcsi-bridge") return true;
  return argv.size() > 1 && argv[1] == "bridge";  // the plugin's own binary (see the header)
}

std::string BridgeProgramFor(const Host& host, const std::string& bridge_dir) {
  std::string dir = bridge_dir;
  if (dir.empty()) {
    auto exe = host.ReadLink("/proc/self/exe");
    if (exe.ok()) dir = exe->substr(0, exe->rfind('/'));
  }
  return dir + "/blockcsi-bridge";
}

namespace {

constexpr std::chrono::milliseconds kControlTimeout{std::chrono::seconds(10)};
// Teardown flushes and detaches; give it longer than a status call.
constexpr std::chrono::milliseconds kShutdownTimeout{std::chrono::seconds(120)};
// A bridge exits right after it answered a shutdown.
constexpr std::chrono::milliseconds kExitWait{std::chrono::seconds(2)};

class UserspaceConnector final : public Connector {
 public:
  explicit UserspaceConnector(UserspaceConnectorOptions o) : options_(std::move(o)) {
    if (!options_.clock) options_.clock = RealClock();
    if (!options_.mounter) options_.mounter = MakeLibmountMounter();
    self_pid_ = ::getpid();
    auto start = ProcessStartTime(*options_.host_fs, self_pid_);
    if (start.ok()) self_start_ = std::to_string(*start);
  }

  std::string family() const override { return "userspace"; }

  void Prepare(const AttachSpec& spec, AttachRecord* record) override {
    BridgePaths p = BridgePathsFor(options_.state_dir, spec.volume_id);
    record->connector_state["bridge_dir"] = p.dir;
    record->connector_state["control_socket"] = p.control_socket;
    record->connector_state["mountpoint"] = p.mountpoint;
  }

  StatusOr<ConnectResult> Connect(const AttachSpec& spec, AttachRecord* record) override {
    BridgePaths p = PathsOf(*record);
    // A bridge from an earlier attempt (or an earlier plugin) that is alive
    // and serves this volume is reused as it is — unless its transport is
    // unhealthy for good (a fenced rbd client can never write again).
    auto status = CallBridge(p.control_socket, {{"op", "status"}, {"refresh_identity", true}}, kControlTimeout);
    if (status.ok() && status->value("ok", false) && status->value("volume_id", "") == spec.volume_id &&
        !status->value("device", "").empty() && status->value("healthy", true)) {
      LogInfo("reusing running bridge", {{"volume_id", spec.volume_id}, {"device", status->value("device", "")}});
      bool mine = record->connector_state[kPluginPidKey] == std::to_string(self_pid_) &&
                  record->connector_state[kPluginStartTimeKey] == self_start_ &&
                  record->connector_state[kAdoptedKey] != "true";
      return FromReply(*status, record, /*adopted=*/!mine);
    }
    // Anything else left under that name is debris: clear it first. No bridge
    // dir, no debris: a bridge starts only in the dir made below, which goes
    // only after its bridge (no /proc scan on a first attach).
    if (options_.state_files->Exists(p.dir)) BLOCKCSI_RETURN_IF_ERROR(CleanupBridge(p, spec.volume_id));
    BLOCKCSI_RETURN_IF_ERROR(MakeDirectories(p.dir, 0700));
    BLOCKCSI_ASSIGN_OR_RETURN(nlohmann::json ready, SpawnBridge(spec, p));
    Status started = StatusFromReply(ready);
    if (started.code() == StatusCode::kFailedPrecondition && spec.transport != "rbd") {
      // The bridge refused the LUN before exposing it; say so loudly here too,
      // where the operator reads the plugin's log.
      LogError("WRONG LUN: the target's LUN is not the published volume; nothing was exposed",
               {{"volume_id", spec.volume_id}, {"target", spec.target_iqn}, {"error", started.message()}});
    }
    BLOCKCSI_RETURN_IF_ERROR(started);
    return FromReply(ready, record, /*adopted=*/false);
  }

  Status Disconnect(const AttachRecord& record) override {
    BridgePaths p = PathsOf(record);
    // The bridge the record names, held so that its exit is an event to wait
    // for; else the bridges are looked for (and waited for) in /proc.
    ProcessExitWatch bridge = HoldRecordedBridge(record);
    std::vector<int> pids =
        bridge.held() ? std::vector<int>{bridge.pid()} : FindBridgePids(*options_.host_fs, p.control_socket);
    auto reply = CallBridge(p.control_socket, {{"op", "shutdown"}}, kShutdownTimeout);
    bool exited = false;
    if (reply.ok()) {
      // The bridge refused (e.g. still mounted): nothing was torn down.
      BLOCKCSI_RETURN_IF_ERROR(StatusFromReply(*reply));
      exited = WaitForRecordedExit(bridge);
      if (!exited) WaitForExit(p);
      Reap(pids);
    } else {
      LogInfo("bridge not answering; cleaning up after it",
              {{"volume_id", record.volume_id}, {"why", reply.status().message()}});
    }
    // One bridge serves a control socket (Connect clears any other before it
    // starts one): once it is seen gone, /proc holds no other to kill.
    // A bridge that answered the shutdown and exited detached the one loop
    // device it made, the record's: that device is checked, not every loop
    // device of the node.
    std::string loop;
    if (exited) {
      auto it = record.connector_state.find("loop_device");
      if (it != record.connector_state.end()) loop = it->second;
    }
    return CleanupBridge(p, record.volume_id, /*look_for_bridges=*/!exited, loop);
  }

  StatusOr<LunIdentity> ReadIdentity(const AttachRecord& record) override {
    BLOCKCSI_ASSIGN_OR_RETURN(
        nlohmann::json r,
        CallBridge(PathsOf(record).control_socket, {{"op", "status"}, {"refresh_identity", true}}, kControlTimeout));
    BLOCKCSI_RETURN_IF_ERROR(StatusFromReply(r));
    LunIdentity id;
    id.serial = r.value("serial", "");
    id.naa = r.value("naa", std::vector<std::string>{});
    return id;
  }

  StatusOr<uint64_t> Rescan(AttachRecord* record) override {
    BLOCKCSI_ASSIGN_OR_RETURN(nlohmann::json r,
                              CallBridge(PathsOf(*record).control_socket, {{"op", "rescan"}}, kControlTimeout));
    BLOCKCSI_RETURN_IF_ERROR(StatusFromReply(r));
    return r.value("size_bytes", uint64_t{0});
  }

  AttachHealth Check(const AttachRecord& record) override {
    auto r = CallBridge(PathsOf(record).control_socket, {{"op", "status"}}, kControlTimeout);
    if (!r.ok()) {
      if (r.status().code() == StatusCode::kDeadlineExceeded) {
        // Running but not answering: its I/O to the storage is stuck.
        return {true,
                "the userspace bridge of this volume is not answering (I/O to the storage may be stuck; it "
                "gives up after --bridge-io-timeout, or stop the bridge with `blockctl cleanup`): " +
                    r.status().message()};
      }
      return {true, "the userspace bridge of this volume is not running: " + r.status().message()};
    }
    Status st = StatusFromReply(*r);
    if (!st.ok()) return {true, st.message()};
    if (r->value("device", "") != record.device_path) {
      return {true, "the bridge serves " + r->value("device", "") + ", not " + record.device_path};
    }
    if (!options_.host_fs->Exists(record.device_path)) return {true, record.device_path + " is gone"};
    // A lasting condition of the transport (a fenced rbd client) whatever
    // the I/O did since.
    if (!r->value("healthy", true)) return {true, r->value("health_message", std::string("transport unhealthy"))};
    // A failed write may have lost data the filesystem counted on (ext4
    // aborts its journal, xfs shuts down): abnormal until restaged.
    if (uint64_t failed = r->value("write_errors", uint64_t{0}); failed > 0) {
      return {true, std::to_string(failed) + " write(s) to the volume failed since it was attached (last error: " +
                        r->value("last_error", std::string()) +
                        "); once the storage answers again, stop the pods using it, then NodeUnstage and NodeStage "
                        "(the filesystem is checked at stage)"};
    }
    // Recent read errors only: a target restart the session survived is
    // not a lasting condition.
    if (r->value("io_errors", uint64_t{0}) > 0 && r->value("last_error_age_ms", int64_t{0}) < 60000) {
      const char* what =
          r->value("transport", "") == "rbd" ? "I/O errors on the rbd image: " : "I/O errors on the iSCSI session: ";
      return {true, what + r->value("last_error", std::string())};
    }
    return {};
  }

  Status Reconcile(std::vector<AttachRecord>* records) override {
    std::set<std::string> known;
    for (auto& record : *records) {
      BridgePaths p = PathsOf(record);
      known.insert(p.dir);
      auto r = CallBridge(p.control_socket, {{"op", "status"}}, kControlTimeout);
      // The bridge the record names: pid + start time, one process for good.
      int recorded_pid = 0;
      uint64_t recorded_start = 0;
      bool recorded = ParseInt(record.connector_state[kBridgePidKey], &recorded_pid) &&
                      ParseU64(record.connector_state[kBridgeStartTimeKey], &recorded_start);
      std::string from = record.connector_state[kPluginPidKey];
      if (r.ok() && r->value("ok", false)) {
        int pid = r->value("pid", 0);
        if (recorded && (pid != recorded_pid || !ProcessIsAlive(*options_.host_fs, pid, recorded_start))) {
          LogWarn("the bridge answering for this volume is not the one its record names; adopting it",
                  {{"volume_id", record.volume_id},
                   {"recorded_pid", std::to_string(recorded_pid)},
                   {"pid", std::to_string(pid)}});
        }
        NoteOwners(&record, pid, /*adopted=*/true);
        LogInfo("adopted running bridge", {{"volume_id", record.volume_id},
                                           {"pid", std::to_string(pid)},
                                           {"from_plugin_pid", from.empty() ? "unknown" : from}});
        KeepOutOfContainer(record, pid);
      } else if (recorded && ProcessIsAlive(*options_.host_fs, recorded_pid, recorded_start)) {
        // Running but not answering (its I/O to the storage may be stuck):
        // still ours to watch and to stop at NodeUnstage.
        NoteOwners(&record, recorded_pid, /*adopted=*/true);
        LogWarn("adopted a running bridge that does not answer its control socket",
                {{"volume_id", record.volume_id},
                 {"pid", std::to_string(recorded_pid)},
                 {"why", r.ok() ? StatusFromReply(*r).message() : r.status().message()}});
        KeepOutOfContainer(record, recorded_pid);
      } else if (record.state == kAttachStateAttached) {
        LogWarn("bridge of an attached volume is not running; NodeUnstage will clean up",
                {{"volume_id", record.volume_id}});
      }
    }
    // Bridges no record names: reported and removed.
    std::string dir = BridgesDir(options_.state_dir);
    auto entries = options_.state_files->ListDir(dir);  // none when it does not exist
    for (const std::string& name : entries.ok() ? *entries : std::vector<std::string>{}) {
      std::string path = dir + "/" + name;
      if (known.count(path) > 0) continue;
      auto volume_id = UnescapeVolumeIdFromFile(name);
      std::string id = volume_id.ok() ? *volume_id : name;
      LogWarn("found a bridge with no attach record; stopping it", {{"volume_id", id}, {"dir", path}});
      BridgePaths p = BridgePathsFor(options_.state_dir, id);
      auto reply = CallBridge(p.control_socket, {{"op", "shutdown"}}, kShutdownTimeout);
      if (reply.ok() && !StatusFromReply(*reply).ok()) {
        LogError("orphan bridge refused to stop", {{"volume_id", id}, {"error", StatusFromReply(*reply).message()}});
        continue;
      }
      Status st = CleanupBridge(p, id);
      if (!st.ok()) LogError("cannot clean up orphan bridge", {{"volume_id", id}, {"error", st.ToString()}});
    }
    return OkStatus();
  }

 private:
  BridgePaths PathsOf(const AttachRecord& record) const {
    BridgePaths p = BridgePathsFor(options_.state_dir, record.volume_id);
    auto get = [&](const char* key, std::string* field) {
      auto it = record.connector_state.find(key);
      if (it != record.connector_state.end() && !it->second.empty()) *field = it->second;
    };
    get("bridge_dir", &p.dir);
    get("control_socket", &p.control_socket);
    get("mountpoint", &p.mountpoint);
    p.lun_file = p.mountpoint + "/lun";
    return p;
  }

  // A bridge an older plugin started without --bridge-cgroup still sits in
  // that plugin's container cgroup: move it out now.
  void KeepOutOfContainer(const AttachRecord& record, int pid) const {
    if (options_.bridge_cgroup.empty() || pid <= 0 || InCgroup(*options_.host_fs, options_.bridge_cgroup, pid)) return;
    Status moved = MoveIntoCgroup(*options_.host_fs, options_.bridge_cgroup, pid);
    if (moved.ok()) {
      LogInfo("moved adopted bridge into the bridge cgroup",
              {{"volume_id", record.volume_id}, {"cgroup", options_.bridge_cgroup}});
    } else {
      LogWarn("adopted bridge stays in its cgroup; it dies when that cgroup is killed",
              {{"volume_id", record.volume_id}, {"error", moved.message()}});
    }
  }

  static bool ParseInt(const std::string& text, int* out) {
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
    return !text.empty() && ec == std::errc() && p == text.data() + text.size();
  }
  static bool ParseU64(const std::string& text, uint64_t* out) {
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
    return !text.empty() && ec == std::errc() && p == text.data() + text.size();
  }

  // Records which bridge process serves the volume and that this plugin
  // owns it now, so blockctl can tell an adopted bridge from one whose
  // plugin is gone.
  void NoteOwners(AttachRecord* record, int bridge_pid, bool adopted) const {
    auto& cs = record->connector_state;
    cs[kBridgePidKey] = std::to_string(bridge_pid);
    auto bridge_start = ProcessStartTime(*options_.host_fs, bridge_pid);
    if (bridge_start.ok()) {
      cs[kBridgeStartTimeKey] = std::to_string(*bridge_start);
    } else {
      cs.erase(kBridgeStartTimeKey);
    }
    cs[kPluginPidKey] = std::to_string(self_pid_);
    if (!self_start_.empty()) {
      cs[kPluginStartTimeKey] = self_start_;
    } else {
      cs.erase(kPluginStartTimeKey);
    }
    if (adopted) {
      cs[kAdoptedKey] = "true";
    } else {
      cs.erase(kAdoptedKey);
    }
  }

  StatusOr<ConnectResult> FromReply(const nlohmann::json& r, AttachRecord* record, bool adopted) const {
    ConnectResult out;
    out.device_path = r.value("device", "");
    out.size_bytes = r.value("size_bytes", uint64_t{0});
    out.identity.serial = r.value("serial", "");
    out.identity.naa = r.value("naa", std::vector<std::string>{});
    NoteOwners(record, r.value("pid", 0), adopted);
    record->connector_state["loop_device"] = out.device_path;
    record->connector_state["portal"] = r.value("portal", "");
    if (out.device_path.empty()) return Internal("bridge reported no device");
    return out;
  }

  // In a container the plugin is often PID 1, so orphaned bridges become
  // its children: reap the ones that exited (a no-op for non-children).
  void Reap(const std::vector<int>& pids) const {
    for (int pid : pids) options_.host_fs->Reap(pid);
  }

  // The bridge process `record` names (pid and start time), if that is still
  // the process running under its pid.
  ProcessExitWatch HoldRecordedBridge(const AttachRecord& record) const {
    auto value = [&](const char* key) {
      auto it = record.connector_state.find(key);
      return it == record.connector_state.end() ? std::string() : it->second;
    };
    int pid = 0;
    uint64_t start = 0;
    if (!ParseInt(value(kBridgePidKey), &pid) || !ParseU64(value(kBridgeStartTimeKey), &start)) return {};
    // Held first, checked second: a pid reused in between fails the check.
    ProcessExitWatch watch = ProcessExitWatch::Open(*options_.host_fs, pid);
    if (!watch.held() || !ProcessIsAlive(*options_.host_fs, pid, start)) return {};
    return watch;
  }

  static bool WaitForRecordedExit(const ProcessExitWatch& bridge) {
    Span span("wait_bridge_exit");
    return bridge.WaitForExit(kExitWait);
  }
  void WaitForExit(const BridgePaths& p) {
    for (int i = 0; i < 100; ++i) {
      if (FindBridgePids(*options_.host_fs, p.control_socket).empty()) return;
      options_.clock->Sleep(std::chrono::milliseconds(20));
    }
  }

  // Removes whatever a bridge left under `p`, whether it exited, crashed or
  // never finished starting; each step tolerates "already gone".
  // Loop devices on the bridge's FUSE file: `known` alone when the caller
  // knows the only one there can be, else every loop device of the node.
  std::vector<std::string> LoopsOnLun(const BridgePaths& p, const std::string& known) const {
    if (known.empty() || !known.starts_with("/dev/loop")) return FindLoopDevicesBackedBy(*options_.host_fs, p.lun_file);
    auto backing = options_.host_fs->LoopBackingFile(known.substr(5));
    if (backing.ok() && (*backing == p.lun_file || *backing == p.lun_file + " (deleted)")) return {known};
    return {};
  }

  Status CleanupBridge(const BridgePaths& p, const std::string& volume_id, bool look_for_bridges = true,
                       const std::string& known_loop = "") {
    std::vector<int> pids = look_for_bridges ? FindBridgePids(*options_.host_fs, p.control_socket) : std::vector<int>{};
    for (int pid : pids) {
      LogWarn("killing unresponsive bridge", {{"volume_id", volume_id}, {"pid", std::to_string(pid)}});
      options_.host_fs->Kill(pid);
    }
    // A bridge killed mid-start may still finish the syscall it is in (a
    // mount, a losetup): look for its leftovers only once it is gone.
    if (!pids.empty()) {
      WaitForExit(p);
      Reap(pids);
    }
    auto executor = MakeProcessExecutor();
    for (const std::string& loop : LoopsOnLun(p, known_loop)) {
      auto mountinfo = options_.host_fs->ReadFile("/proc/self/mountinfo");
      if (mountinfo.ok()) {
        auto where = MountPointsOfDevice(*options_.host_fs, loop, *mountinfo);
        if (!where.empty()) {
          return FailedPrecondition("volume \"" + volume_id + "\": " + loop + " is still mounted at " + where.front() +
                                    "; unmount it first");
        }
      }
      auto r = executor->Run(Command("losetup").Arg("-d").Arg(loop).Timeout(std::chrono::seconds(60)));
      if ((!r.ok() || !r->ok()) && !FindLoopDevicesBackedBy(*options_.host_fs, p.lun_file).empty()) {
        return Internal("cannot detach " + loop + " of volume \"" + volume_id +
                        "\": " + (r.ok() ? r->stderr_text : r.status().message()));
      }
      LogInfo("detached loop device left by a bridge", {{"volume_id", volume_id}, {"device", loop}});
    }
    // The FUSE mount of a dead bridge still unmounts; retry briefly because
    // the kernel may hold the file a moment after the loop detach.
    for (int i = 0; i < 50; ++i) {
      auto table = options_.mounter->List();
      if (!table.ok()) return table.status();
      if (FindMountAt(*table, p.mountpoint) == nullptr) break;
      Status st = options_.mounter->Unmount(p.mountpoint);
      if (st.ok()) {
        LogInfo("unmounted FUSE left by a bridge", {{"volume_id", volume_id}, {"mountpoint", p.mountpoint}});
        continue;  // stacked mounts: keep going until none is left
      }
      if (st.code() != StatusCode::kFailedPrecondition) return st;  // EBUSY maps to FAILED_PRECONDITION
      if (i == 49) return Unavailable("FUSE mount " + p.mountpoint + " stays busy");
      options_.clock->Sleep(std::chrono::milliseconds(100));
    }
    return options_.state_files->RemoveTree(p.dir);
  }

  // The bridge's argv and the secrets it reads from stdin (JSON; empty:
  // none). Secrets go through a pipe, never argv: /proc/<pid>/cmdline is
  // readable by everyone on the node.
  StatusOr<std::vector<std::string>> BridgeArgv(const AttachSpec& spec, const BridgePaths& p,
                                                std::string* secrets) const {
    std::vector<std::string> argv = {BridgeProgramFor(*options_.state_files, options_.bridge_dir),
                                     "--volume-id",
                                     spec.volume_id,
                                     "--control-socket",
                                     p.control_socket,
                                     "--mountpoint",
                                     p.mountpoint};
    nlohmann::json j = nlohmann::json::object();
    if (spec.transport == "rbd") {
      std::string node_id = options_.node_id;
      if (node_id.empty()) node_id = NodeIdFromInitiatorIqn(spec.initiator_iqn).value_or("");
      if (node_id.empty() && !spec.read_only) {
        return InvalidArgument("volume \"" + spec.volume_id +
                               "\": no node id to register the rbd client under (needed for fencing)");
      }
      argv.insert(argv.end(), {"--transport", "rbd", "--rbd-pool", spec.rbd.pool, "--rbd-image", spec.rbd.image,
                               "--expected-serial", spec.rbd.image_id, "--ceph-user", spec.rbd.user});
      if (!spec.rbd.monitors.empty()) argv.insert(argv.end(), {"--ceph-monitors", spec.rbd.monitors});
      if (!options_.ceph_conf.empty()) argv.insert(argv.end(), {"--ceph-conf", options_.ceph_conf});
      if (!node_id.empty()) argv.insert(argv.end(), {"--node-id", node_id});
      if (!spec.rbd.key.empty()) j["ceph_key"] = spec.rbd.key;
    } else {
      argv.insert(argv.end(),
                  {"--target", spec.target_iqn, "--lun", std::to_string(spec.lun), "--initiator", spec.initiator_iqn});
      for (const auto& portal : spec.portals) {
        argv.push_back("--portal");
        argv.push_back(portal);
      }
      if (!spec.expected_serial.empty()) argv.insert(argv.end(), {"--expected-serial", spec.expected_serial});
      if (!spec.expected_wwn.empty()) argv.insert(argv.end(), {"--expected-wwn", spec.expected_wwn});
      if (spec.chap.enabled()) {
        j["username"] = spec.chap.username;
        j["password"] = spec.chap.password;
        j["mutual_username"] = spec.chap.mutual_username;
        j["mutual_password"] = spec.chap.mutual_password;
      }
    }
    if (spec.read_only) argv.push_back("--read-only");
    // The bridge logs what the plugin would: at debug when the plugin does.
    if (LogEnabled(LogLevel::kDebug)) argv.insert(argv.end(), {"--log-level", "debug"});
    if (!options_.bridge_cgroup.empty()) argv.insert(argv.end(), {"--cgroup", options_.bridge_cgroup});
    int io_s = static_cast<int>(std::max<int64_t>(1, options_.io_timeout.count() / 1000));
    argv.insert(argv.end(), {"--io-timeout-seconds", std::to_string(io_s), "--reconnect-retries",
                             std::to_string(options_.reconnect_retries), "--sessions",
                             std::to_string(options_.sessions_per_volume)});
    if (!j.empty()) {
      argv.push_back("--secrets-on-stdin");
      *secrets = j.dump();
    }
    return argv;
  }

  // Writes what it can; a bridge that died first shows as not ready.
  static void SendBestEffort(int fd, const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
  }

  // What the bridge printed up to its first newline, by `deadline`; *eof
  // when it closed its end before that.
  static std::string ReadReadyLine(int fd, std::chrono::steady_clock::time_point deadline, bool* eof) {
    std::string line;
    while (line.find('\n') == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd pfd{fd, POLLIN, 0};
      int rc = ::poll(&pfd, 1, static_cast<int>(left.count()));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) break;
      char buf[4096];
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        *eof = true;
        break;
      }
      line.append(buf, static_cast<size_t>(n));
    }
    return line;
  }

  StatusOr<nlohmann::json> SpawnBridge(const AttachSpec& spec, const BridgePaths& p) {
    Span span("bridge_start", spec.volume_id);
    std::string secrets;
    BLOCKCSI_ASSIGN_OR_RETURN(std::vector<std::string> argv, BridgeArgv(spec, p, &secrets));

    LogInfo("starting bridge", {{"volume_id", spec.volume_id}, {"binary", argv[0]}});
    // Detached (double fork, own session): nothing that happens to the
    // plugin reaches the bridge. Its stdin is a socket, so writing the
    // secrets to a bridge that already died is EPIPE (MSG_NOSIGNAL), never SIGPIPE.
    BLOCKCSI_ASSIGN_OR_RETURN(DetachedProcess bridge, options_.host_fs->SpawnDetached(argv));
    SendBestEffort(bridge.stdin_fd, secrets);
    ::close(bridge.stdin_fd);
    bool eof = false;
    std::string line = ReadReadyLine(bridge.stdout_fd, std::chrono::steady_clock::now() + options_.start_timeout, &eof);
    ::close(bridge.stdout_fd);
    if (line.find('\n') == std::string::npos && eof) {
      return Internal("bridge for volume \"" + spec.volume_id + "\" exited before it was ready (exec " + argv[0] +
                      "; its log is on the plugin's stderr)");
    }
    if (line.find('\n') == std::string::npos) {
      return DeadlineExceeded("bridge for volume \"" + spec.volume_id + "\" did not report ready within " +
                              std::to_string(options_.start_timeout.count()) + "ms (exec " + argv[0] + ")");
    }
    try {
      return nlohmann::json::parse(line.substr(0, line.find('\n')));
    } catch (const nlohmann::json::exception& e) {
      return Internal("bridge for volume \"" + spec.volume_id + "\" printed a malformed ready line");
    }
  }

  UserspaceConnectorOptions options_;
  pid_t self_pid_ = 0;
  std::string self_start_;  // empty when /proc does not tell
};

}  // namespace

std::unique_ptr<Connector> MakeUserspaceConnector(UserspaceConnectorOptions options) {
  return std::make_unique<UserspaceConnector>(std::move(options));
}

}  // namespace blockcsi
