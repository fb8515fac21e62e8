#include "cli/node_state.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "attach/attach_record_store.h"
#include "attach/userspace_connector.h"
#include "bridge/bridge_cgroup.h"
#include "bridge/bridge_protocol.h"
#include "common/lun_identity.h"
#include "common/strings.h"
#include "node/volume_crypt.h"

namespace blockcsi::cli {
namespace {

std::string Basename(const std::string& path) { return path.substr(path.rfind('/') + 1); }  // npos + 1 == 0

bool Under(const std::string& path, const std::string& dir) { return path.rfind(dir + "/", 0) == 0; }

std::string NumbersOf(const NodeSnapshot& s, const std::string& device) {
  auto it = s.device_numbers.find(device);
  return it == s.device_numbers.end() ? "" : it->second;
}

std::vector<const MountEntry*> MountsOf(const NodeSnapshot& s, const std::string& device) {
  std::vector<const MountEntry*> out;
  if (device.empty()) return out;
  std::string numbers = NumbersOf(s, device);
  for (const auto& m : s.mounts) {
    if (MountUsesDevice(m, device, numbers)) out.push_back(&m);
  }
  return out;
}

// A mount a pod (kubelet's publish) made: under a pods directory, or a bind
// (of a device node or of a subdirectory). Orphan cleanup never touches a
// device with such a mount.
bool LooksLikePodMount(const MountEntry& m) {
  return m.target.find("/pods/") != std::string::npos || m.fs_type == "devtmpfs" || m.root != "/";
}

const BridgeObservation* BridgeOf(const NodeSnapshot& s, const AttachRecord& r) {
  if (r.connector != "userspace") return nullptr;
  auto it = r.connector_state.find("bridge_dir");
  std::string dir =
      it != r.connector_state.end() && !it->second.empty() ? it->second : BridgePathsFor(s.state_dir, r.volume_id).dir;
  for (const auto& b : s.bridges) {
    if (b.dir == dir) return &b;
  }
  return nullptr;
}

const KernelSession* SessionOf(const NodeSnapshot& s, const AttachRecord& r) {
  if (r.connector != "iscsi") return nullptr;
  for (const auto& k : s.sessions) {
    if (k.target_iqn == r.target_iqn) return &k;
  }
  return nullptr;
}

bool RecordNamesDevice(const NodeSnapshot& s, const std::string& device) {
  for (const auto& r : s.records) {
    if (!r.device_path.empty() && r.device_path == device) return true;
  }
  return false;
}

std::string DescribeBridge(const BridgeObservation& b) {
  std::string pids;
  for (int pid : b.pids) pids += (pids.empty() ? "" : ",") + std::to_string(pid);
  std::string via = b.fuse_path.empty() ? "" : ", FUSE via " + b.fuse_path;  // io_uring or dev_fuse
  if (b.answered) return "bridge pid " + (pids.empty() ? std::string("?") : pids) + " running" + via;
  if (!b.pids.empty()) return "bridge pid " + pids + " not answering";
  return "bridge not running";
}

std::string StopBridgeText(const BridgeObservation& b) {
  std::string pids;
  for (int pid : b.pids) pids += (pids.empty() ? "" : ",") + std::to_string(pid);
  return "stop bridge pid " + (pids.empty() ? std::string("?") : pids) + " (shutdown over " + b.control_socket +
         ", else SIGKILL)";
}

}  // namespace

bool MountUsesDevice(const MountEntry& entry, const std::string& device, const std::string& major_minor) {
  if (!major_minor.empty() && entry.major_minor == major_minor) return true;
  // A bind's root is the node's path below /dev ("/sdb", "/mapper/blockcsi-pv1").
  std::string below_dev = device.rfind("/dev/", 0) == 0 ? device.substr(4) : "/" + Basename(device);
  if (entry.fs_type == "devtmpfs" && !device.empty() && entry.root == below_dev) return true;
  return !device.empty() && entry.source == device && entry.fs_type != "devtmpfs";
}

std::vector<VolumeView> DescribeVolumes(const NodeSnapshot& s) {
  std::vector<VolumeView> out;
  for (const auto& r : s.records) {
    VolumeView v;
    v.volume_id = r.volume_id;
    v.state = r.state;
    v.connector = r.connector;
    v.device = r.device_path;
    v.serial = r.expected_serial;
    v.wwn = r.expected_wwn;
    v.size_bytes = r.size_bytes;
    v.origin = r.static_volume ? kOriginStatic : kOriginProvisioned;
    v.source = r.transport == "rbd" ? r.rbd_pool + "/" + r.rbd_image : r.target_iqn + " lun " + std::to_string(r.lun);
    StagedAnnotation staged = ParseStagedAnnotation(r);
    v.access_type = staged.access_type;
    v.staging_path = staged.staging_path;
    v.fs_type = staged.fs_type;
    v.device_present = !r.device_path.empty() && !NumbersOf(s, r.device_path).empty();
    // An encrypted volume's filesystem and binds are on its mapping.
    v.crypt_mapping = staged.crypt_mapping;
    v.crypt_open = !v.crypt_mapping.empty() && !NumbersOf(s, CryptMappingPath(v.crypt_mapping)).empty();
    for (const MountEntry* m : MountsOf(s, v.crypt_open ? CryptMappingPath(v.crypt_mapping) : r.device_path)) {
      if (!v.staging_path.empty() && m->target == v.staging_path) {
        v.staging_mounted = true;
        v.staging_read_only = m->read_only();
        if (v.fs_type.empty()) v.fs_type = m->fs_type;
      } else if (std::find(v.publish_paths.begin(), v.publish_paths.end(), m->target) == v.publish_paths.end()) {
        v.publish_paths.push_back(m->target);
      }
    }
    if (v.staging_mounted) {
      auto it = s.usage.find(v.staging_path);
      if (it != s.usage.end()) v.usage = it->second;
    }
    if (const BridgeObservation* b = BridgeOf(s, r)) {
      v.bridge = b;
      v.attachment = DescribeBridge(*b);
      v.attachment_alive = b->answered;
      auto owner = s.owner_alive.find(r.volume_id);
      auto pid = r.connector_state.find(kPluginPidKey);
      if (b->answered && owner != s.owner_alive.end() && pid != r.connector_state.end()) {
        auto adopted = r.connector_state.find(kAdoptedKey);
        v.owner_pid = pid->second;
        if (!owner->second) {
          v.bridge_owner = kBridgePluginGone;
          v.attachment += ", its plugin (pid " + v.owner_pid + ") is gone";
        } else if (adopted != r.connector_state.end() && adopted->second == "true") {
          v.bridge_owner = kBridgeAdopted;
          v.attachment += ", adopted by plugin pid " + v.owner_pid;
        } else {
          v.bridge_owner = kBridgeStarted;
          v.attachment += ", started by plugin pid " + v.owner_pid;
        }
      }
      if (b->answered) {
        if (!b->serial.empty()) v.serial = b->serial;
        LunIdentity id;
        id.naa = b->naa;
        if (!id.wwn().empty()) v.wwn = id.wwn();
      }
    } else if (r.connector == "userspace") {
      v.attachment = "bridge not running";
    } else if (const KernelSession* k = SessionOf(s, r)) {
      v.attachment = "kernel session " + k->sid + " " + k->state;
      v.attachment_alive = k->state == "LOGGED_IN";
    } else {
      v.attachment = "no " + r.connector + " session";
    }
    out.push_back(std::move(v));
  }
  return out;
}

namespace {

// The verdict on one recorded volume.
Finding ClassifyVolume(const VolumeView& v, const AttachRecord& r) {
  Finding f{v.volume_id, kVerdictHealthy, v.attachment + ", " + (v.device.empty() ? "no device" : v.device)};
  bool staged = !v.staging_path.empty() && (v.access_type == "block" || v.staging_mounted);
  if (v.bridge != nullptr && v.bridge->answered) {
    LunIdentity actual;
    actual.serial = v.bridge->serial;
    actual.naa = v.bridge->naa;
    Status id = VerifyLunIdentity(r.volume_id, r.expected_serial, r.expected_wwn, actual);
    if (!id.ok()) return {v.volume_id, kVerdictIdentityMismatch, id.message()};
  }
  if (!v.attachment_alive) {
    f.verdict = kVerdictStaleRecord;
    f.detail = v.attachment + "; " +
               (v.device_present ? v.device + " is left behind"
                                 : (v.device.empty() ? "no device recorded" : v.device + " is gone"));
  } else if (r.state != kAttachStateAttached) {
    f.verdict = kVerdictStaleRecord;
    f.detail = "record still \"" + r.state + "\" while " + v.attachment + ": the attach never finished";
  } else if (!v.device_present) {
    f.verdict = kVerdictDeviceMissing;
    f.detail = (v.device.empty() ? std::string("no device recorded") : v.device + " does not exist") + " (" +
               v.attachment + ")";
  } else if (!staged && v.publish_paths.empty()) {
    f.verdict = kVerdictStaleRecord;
    f.detail = v.staging_path.empty()
                   ? "attached (" + v.attachment + ", " + v.device + ") but never staged: an interrupted NodeStage"
                   : "recorded as staged at " + v.staging_path + " but nothing is mounted there";
  } else if (v.staging_read_only && !r.read_only) {
    f.verdict = kVerdictReadOnly;
    f.detail = v.staging_path + " is mounted read-only but the volume is read-write (errors=remount-ro?)";
  } else if (v.bridge_owner == kBridgePluginGone) {
    // Serving, but no plugin will unstage or check it until one adopts it.
    f.verdict = kVerdictPluginGone;
    f.detail = v.attachment + "; " + v.device + " keeps working; the next plugin to start adopts the bridge";
  }
  f.bridge = v.bridge_owner;
  return f;
}

// What no record accounts for: bridges, kernel sessions, loop devices and
// mounts left behind.
void AddOrphans(const NodeSnapshot& s, std::vector<Finding>& out) {
  std::set<std::string> orphan_bridge_dirs;
  for (const auto& b : s.bridges) {
    bool known = false;
    for (const auto& r : s.records) known = known || BridgeOf(s, r) == &b;
    if (known) continue;
    orphan_bridge_dirs.insert(b.dir);
    std::string detail = DescribeBridge(b);
    if (!b.device.empty()) detail += ", serves " + b.device;
    if (b.fuse_mounted) detail += ", FUSE mounted at " + b.mountpoint;
    out.push_back({b.volume_id, kVerdictOrphanBridge, detail + " (dir " + b.dir + ")", kBridgeOrphan});
  }
  for (const auto& k : s.sessions) {
    if (k.iface != "blockcsi") continue;  // sessions of other iSCSI users on this node are not ours
    bool known = false;
    for (const auto& r : s.records) known = known || (r.connector == "iscsi" && r.target_iqn == k.target_iqn);
    if (!known) {
      out.push_back({"session" + k.sid, kVerdictOrphanSession, k.target_iqn + " at " + k.portal + " " + k.state});
    }
  }
  for (const auto& loop : s.loops) {
    if (RecordNamesDevice(s, loop.device)) continue;
    bool covered = false;
    for (const auto& dir : orphan_bridge_dirs) covered = covered || Under(loop.backing_file, dir);
    for (const MountEntry* m : MountsOf(s, loop.device)) {
      out.push_back({m->target, kVerdictOrphanMount, m->fs_type + " on " + loop.device + " which no record names"});
    }
    if (!covered) out.push_back({loop.device, kVerdictOrphanLoop, "backed by " + loop.backing_file});
  }
  // FUSE mounts of bridges whose directory is gone (the bridge dir listing
  // cannot show them).
  for (const auto& m : s.mounts) {
    if (!Under(m.target, BridgesDir(s.state_dir))) continue;
    bool known = false;
    for (const auto& b : s.bridges) known = known || m.target == b.mountpoint || Under(m.target, b.dir);
    if (!known) out.push_back({m.target, kVerdictOrphanMount, m.fs_type + " left by a bridge that is gone"});
  }
}

}  // namespace

std::vector<Finding> Classify(const NodeSnapshot& s) {
  std::vector<Finding> out;
  std::vector<VolumeView> views = DescribeVolumes(s);
  for (size_t i = 0; i < views.size(); ++i) out.push_back(ClassifyVolume(views[i], s.records[i]));
  // A static PV's LUN belongs to the array's admin, not to a
  // blockcsi backend: say so next to whatever else is found.
  for (size_t i = 0; i < out.size() && i < views.size(); ++i) {
    if (views[i].origin == kOriginStatic) out[i].detail = "static LUN " + views[i].source + "; " + out[i].detail;
  }
  AddOrphans(s, out);
  AddOrphanMappings(s, out);
  return out;
}

namespace {

// Unmount steps for the mounts that hold `device`, or false (and a refusal
// in plan.skipped) when a pod's mount is among them.
bool MountsToUndo(const NodeSnapshot& s, const std::string& device, const Finding& f, CleanupPlan& plan,
                  std::vector<CleanupStep>* steps) {
  using Kind = CleanupStep::Kind;
  std::vector<const MountEntry*> mounts = MountsOf(s, device);
  for (const MountEntry* m : mounts) {
    if (LooksLikePodMount(*m) || mounts.size() > 1) {
      plan.skipped.push_back(
          {f.subject, f.verdict, "a pod's mount still uses " + device + " (" + m->target + "); NodeUnpublish first"});
      return false;
    }
  }
  for (const MountEntry* m : mounts) {
    steps->push_back({Kind::kUnmount, f.subject, m->target, "unmount " + m->target + " (" + m->fs_type + ")"});
  }
  return true;
}

// A stale record: unmount its staging path and detach it through the
// attach layer, unless a NodeStage may be in flight or a pod still uses it.
std::vector<CleanupStep> StaleRecordSteps(const NodeSnapshot& s, const std::vector<VolumeView>& views, const Finding& f,
                                          CleanupPlan& plan) {
  using Kind = CleanupStep::Kind;
  std::vector<CleanupStep> steps;
  const VolumeView* v = nullptr;
  const AttachRecord* r = nullptr;
  for (size_t i = 0; i < views.size(); ++i) {
    if (views[i].volume_id == f.subject) v = &views[i], r = &s.records[i];
  }
  if (v == nullptr) return {};
  auto age = s.record_age_seconds.find(f.subject);
  if (s.plugin_reachable && v->attachment_alive && age != s.record_age_seconds.end() &&
      age->second < kInFlightGraceSeconds) {
    plan.skipped.push_back({f.subject, f.verdict,
                            "the plugin is up and the record is " + std::to_string(age->second) +
                                "s old: a NodeStage may be in flight; look again in a few minutes"});
    return {};
  }
  if (!v->publish_paths.empty()) {
    plan.skipped.push_back({f.subject, f.verdict,
                            "a pod's mount still uses " + v->device + " (" + JoinStrings(v->publish_paths, ", ") +
                                "); NodeUnpublish first"});
    return {};
  }
  if (v->staging_mounted) {
    steps.push_back({Kind::kUnmount, f.subject, v->staging_path, "unmount staging path " + v->staging_path});
  }
  if (v->crypt_open) {
    steps.push_back({Kind::kCloseMapping, f.subject, v->crypt_mapping, "close dm-crypt mapping " + v->crypt_mapping});
  }
  std::string what;
  if (v->bridge != nullptr) {
    const BridgeObservation& b = *v->bridge;
    std::vector<std::string> parts;
    if (!b.pids.empty() || b.answered) parts.push_back(StopBridgeText(b));
    for (const auto& loop : s.loops) {
      if (Under(loop.backing_file, b.dir)) parts.push_back("detach loop device " + loop.device);
    }
    if (b.fuse_mounted) parts.push_back("unmount FUSE " + b.mountpoint);
    parts.push_back("remove " + b.dir);
    what = JoinStrings(parts, ", ") + ", ";
  } else if (r->connector == "iscsi") {
    what = "log out of " + r->target_iqn + ", ";
  }
  steps.push_back({Kind::kDetachRecord, f.subject, f.subject,
                   "detach volume " + f.subject + " through the attach layer: " + what + "remove record " +
                       AttachRecordPath(s.state_dir, f.subject)});
  return steps;
}

// An orphan bridge: stop it with its loop devices and mounts.
std::vector<CleanupStep> OrphanBridgeSteps(const NodeSnapshot& s, const Finding& f, CleanupPlan& plan) {
  using Kind = CleanupStep::Kind;
  std::vector<CleanupStep> steps;
  const BridgeObservation* b = nullptr;
  for (const auto& obs : s.bridges) {
    if (obs.volume_id == f.subject) b = &obs;
  }
  if (b == nullptr) return {};
  bool ok = true;
  std::vector<std::string> loops;
  for (const auto& loop : s.loops) {
    if (!Under(loop.backing_file, b->dir)) continue;
    loops.push_back(loop.device);
    ok = ok && MountsToUndo(s, loop.device, f, plan, &steps);
  }
  if (!ok) return {};
  std::string what = b->pids.empty() && !b->answered ? "" : StopBridgeText(*b) + ", ";
  for (const auto& loop : loops) what += "detach loop device " + loop + ", ";
  if (b->fuse_mounted) what += "unmount FUSE " + b->mountpoint + ", ";
  steps.push_back({Kind::kStopBridge, f.subject, f.subject,
                   "stop orphan bridge of " + f.subject + ": " + what + "remove " + b->dir});
  return steps;
}

// The steps that fix one finding; none when it is left alone (the reason
// then in plan.skipped) or needs nothing.
std::vector<CleanupStep> StepsFor(const NodeSnapshot& s, const std::vector<VolumeView>& views, const Finding& f,
                                  CleanupPlan& plan) {
  using Kind = CleanupStep::Kind;
  std::vector<CleanupStep> steps;
  if (f.verdict == kVerdictStaleRecord) return StaleRecordSteps(s, views, f, plan);
  if (f.verdict == kVerdictOrphanBridge) return OrphanBridgeSteps(s, f, plan);
  if (f.verdict == kVerdictOrphanMapping) {
    if (!MountsToUndo(s, CryptMappingPath(f.subject), f, plan, &steps)) return {};
    steps.push_back({Kind::kCloseMapping, f.subject, f.subject, "close dm-crypt mapping " + f.subject});
  } else if (f.verdict == kVerdictOrphanLoop) {
    if (!MountsToUndo(s, f.subject, f, plan, &steps)) return {};
    steps.push_back({Kind::kDetachLoop, f.subject, f.subject, "losetup -d " + f.subject});
  } else if (f.verdict == kVerdictOrphanMount) {
    // A mount of an orphan loop is undone with that loop (above); the rest
    // (FUSE mounts of vanished bridges) here.
    bool of_loop = false;
    for (const auto& loop : s.loops) {
      for (const MountEntry* m : MountsOf(s, loop.device)) of_loop = of_loop || m->target == f.subject;
    }
    if (of_loop) {
      return {};
    }
    steps.push_back({Kind::kUnmount, f.subject, f.subject, "unmount " + f.subject});
  } else if (f.verdict == kVerdictPluginGone) {
    // Stopping it would fail the filesystem under the pods; adopting it
    // is the plugin's job (it reconciles at start).
    plan.skipped.push_back({f.subject, f.verdict,
                            "the bridge serves a staged volume: start (or restart) the node plugin, which adopts "
                            "running bridges at start; blockctl does not stop a bridge in use",
                            f.bridge});
  } else if (f.verdict == kVerdictOrphanSession) {
    steps.push_back(
        {Kind::kManual, f.subject, f.subject,
         "log out by hand: iscsiadm -m session -r " + f.subject.substr(7) + " --logout (" + f.detail + ")"});
  }
  return steps;
}

}  // namespace

CleanupPlan PlanCleanup(const NodeSnapshot& s) {
  CleanupPlan plan;
  std::vector<VolumeView> views = DescribeVolumes(s);
  std::set<std::string> unmount_planned;
  for (const Finding& f : Classify(s)) {
    for (auto& step : StepsFor(s, views, f, plan)) {
      if (step.kind == CleanupStep::Kind::kUnmount && !unmount_planned.insert(step.target).second) continue;
      plan.steps.push_back(std::move(step));
    }
  }
  return plan;
}

namespace {

// How long ago each record was last written.
void GatherRecordAges(const Host& host, const AttachRecordStore& store, NodeSnapshot& s) {
  for (const auto& r : s.records) {
    auto written = host.ModificationTime(store.PathFor(r.volume_id));
    if (!written.ok()) continue;
    auto age = std::chrono::system_clock::now() - *written;
    s.record_age_seconds[r.volume_id] = std::chrono::duration_cast<std::chrono::seconds>(age).count();
  }
}

// Whether the plugin that wrote each userspace record still runs.
void GatherRecordOwners(const Host& host_fs, NodeSnapshot& s) {
  for (const auto& r : s.records) {
    if (r.connector != "userspace") continue;
    auto pid = r.connector_state.find(kPluginPidKey);
    auto start = r.connector_state.find(kPluginStartTimeKey);
    if (pid == r.connector_state.end() || start == r.connector_state.end()) continue;
    try {
      s.owner_alive[r.volume_id] = ProcessIsAlive(host_fs, std::stoi(pid->second), std::stoull(start->second));
    } catch (const std::exception&) {
      s.errors.push_back("record of volume \"" + r.volume_id + "\" names a malformed plugin pid or start time");
    }
  }
}

// Every bridge directory: on disk under the state dir, or named by a record.
std::set<std::string> BridgeDirs(const Host& host, const std::string& state_dir, const NodeSnapshot& s) {
  std::set<std::string> dirs;
  std::string bridges = BridgesDir(state_dir);
  auto entries = host.ListDir(bridges);  // none when the directory does not exist
  for (const std::string& name : entries.ok() ? *entries : std::vector<std::string>{}) {
    dirs.insert(bridges + "/" + name);
  }
  for (const auto& r : s.records) {
    if (r.connector != "userspace") continue;
    auto it = r.connector_state.find("bridge_dir");
    dirs.insert(it != r.connector_state.end() && !it->second.empty() ? it->second
                                                                     : BridgePathsFor(state_dir, r.volume_id).dir);
  }
  return dirs;
}

// One bridge: its processes, what it answers on its control socket, and
// whether its FUSE file is mounted.
BridgeObservation ObserveBridge(const std::string& dir, const Host& host_fs, int bridge_timeout_ms,
                                const NodeSnapshot& s) {
  BridgeObservation b;
  b.dir = dir;
  auto id = UnescapeVolumeIdFromFile(Basename(dir));
  b.volume_id = id.ok() ? *id : Basename(dir);
  b.control_socket = dir + "/ctl.sock";
  b.mountpoint = dir + "/fuse";
  for (const auto& r : s.records) {
    auto it = r.connector_state.find("bridge_dir");
    if (it == r.connector_state.end() || it->second != dir) continue;
    if (auto c = r.connector_state.find("control_socket"); c != r.connector_state.end()) b.control_socket = c->second;
    if (auto m = r.connector_state.find("mountpoint"); m != r.connector_state.end()) b.mountpoint = m->second;
  }
  b.pids = FindBridgePids(host_fs, b.control_socket);
  if (host_fs.Exists(b.control_socket)) {
    auto reply = CallBridge(b.control_socket, {{"op", "status"}}, std::chrono::milliseconds(bridge_timeout_ms));
    Status st = reply.ok() ? StatusFromReply(*reply) : reply.status();
    if (st.ok()) {
      b.answered = true;
      b.device = reply->value("device", "");
      b.serial = reply->value("serial", "");
      b.naa = reply->value("naa", std::vector<std::string>{});
      b.portal = reply->value("portal", "");
      b.io_errors = reply->value("io_errors", uint64_t{0});
      b.fuse_path = reply->value("fuse_path", "");
      int pid = reply->value("pid", 0);
      if (pid > 0 && std::find(b.pids.begin(), b.pids.end(), pid) == b.pids.end()) b.pids.push_back(pid);
    } else {
      b.error = st.message();
    }
  } else {
    b.error = "no control socket";
  }
  for (const auto& m : s.mounts) b.fuse_mounted = b.fuse_mounted || m.target == b.mountpoint;
  return b;
}

// The kernel initiator's iSCSI sessions, from sysfs.
void GatherKernelSessions(const Host& host_fs, NodeSnapshot& s) {
  if (auto names = host_fs.ListDir("/sys/class/iscsi_session"); names.ok()) {
    for (const auto& name : *names) {
      if (!name.starts_with("session")) continue;
      std::string base = "/sys/class/iscsi_session/" + name;
      auto read = [&](const std::string& path) {
        auto v = ReadTrimmed(host_fs, path);
        return v.ok() ? *v : std::string();
      };
      KernelSession k;
      k.sid = name.substr(7);
      k.target_iqn = read(base + "/targetname");
      k.iface = read(base + "/ifacename");
      k.state = read(base + "/state");
      std::string conn = "/sys/class/iscsi_connection/connection" + k.sid + ":0";
      k.portal = read(conn + "/persistent_address") + ":" + read(conn + "/persistent_port");
      s.sessions.push_back(std::move(k));
    }
  }
}

// Loop devices whose backing file is under the bridges' directory.
void GatherBridgeLoops(const Host& host_fs, const std::string& state_dir, NodeSnapshot& s) {
  if (auto names = host_fs.ListDir("/sys/block"); names.ok()) {
    for (const auto& name : *names) {
      if (!name.starts_with("loop")) continue;
      auto backing = ReadTrimmed(host_fs, "/sys/block/" + name + "/loop/backing_file");
      if (!backing.ok() || !Under(*backing, BridgesDir(state_dir))) continue;
      auto dev = ReadTrimmed(host_fs, "/sys/block/" + name + "/dev");
      s.loops.push_back({"/dev/" + name, dev.ok() ? *dev : "", *backing});
    }
  }
}

// MAJOR:MINOR of every device the records, bridges and loops name.
void GatherDeviceNumbers(const Host& host, NodeSnapshot& s) {
  std::set<std::string> devices;
  for (const auto& r : s.records) devices.insert(r.device_path);
  for (const auto& name : s.crypt_mappings) devices.insert(CryptMappingPath(name));
  for (const auto& b : s.bridges) devices.insert(b.device);
  for (const auto& device : devices) {
    if (device.empty()) continue;
    if (auto number = host.DeviceNumber(device); number.ok()) s.device_numbers[device] = *number;
  }
  for (const auto& loop : s.loops) {
    if (!loop.major_minor.empty()) s.device_numbers[loop.device] = loop.major_minor;
  }
}

// Filesystem usage of every staged volume that is mounted.
void GatherStagedUsage(const Host& host, NodeSnapshot& s) {
  for (const auto& r : s.records) {
    std::string path = ParseStagedAnnotation(r).staging_path;
    if (path.empty() || FindMountAt(s.mounts, path) == nullptr) continue;
    if (auto usage = host.StatFs(path); usage.ok()) s.usage[path] = *usage;
  }
}

}  // namespace

NodeSnapshot GatherNodeSnapshot(const std::string& state_dir, std::shared_ptr<const Host> host,
                                const std::string& mountinfo_text, int bridge_timeout_ms) {
  NodeSnapshot s;
  s.state_dir = state_dir;
  const Host& host_fs = *host;
  AttachRecordStore store(state_dir, std::move(host));
  if (auto records = store.List(); records.ok()) {
    s.records = std::move(*records);
  } else {
    s.errors.push_back("cannot read the attach records: " + records.status().ToString());
  }
  s.mounts = ParseMountInfo(mountinfo_text);
  GatherRecordAges(host_fs, store, s);
  GatherRecordOwners(host_fs, s);
  for (const auto& dir : BridgeDirs(host_fs, state_dir, s)) {
    s.bridges.push_back(ObserveBridge(dir, host_fs, bridge_timeout_ms, s));
  }
  GatherKernelSessions(host_fs, s);
  GatherBridgeLoops(host_fs, state_dir, s);
  GatherCryptMappings(host_fs, s);
  GatherDeviceNumbers(host_fs, s);
  GatherStagedUsage(host_fs, s);
  return s;
}

NodeSnapshot GatherHostSnapshot(const std::shared_ptr<const Host>& host, const std::string& state_dir) {
  auto mountinfo = host->ReadFile("/proc/self/mountinfo");
  NodeSnapshot s = GatherNodeSnapshot(state_dir, host, mountinfo.ok() ? *mountinfo : "", 2000);
  if (!mountinfo.ok()) s.errors.push_back("cannot read the mount table: " + mountinfo.status().ToString());
  return s;
}

}  // namespace blockcsi::cli
