// What blockctl knows about this node's volumes: a snapshot of the attach
// records, the mount table, the userspace bridges, kernel iSCSI sessions and
// loop devices (gathered once, impurely, by GatherNodeSnapshot), and the pure
// functions that turn it into per-volume views, verdicts and a cleanup plan,
// so the verdict logic is tested with fabricated snapshots. Not thread-safe;
// blockctl runs one verb per process.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attach/volume_attacher.h"
#include "common/host.h"
#include "common/mounter.h"
#include "node/staged_facts.h"

namespace blockcsi::cli {

// One directory under <state-dir>/bridges, and what its bridge says.
struct BridgeObservation {
  std::string volume_id;  // unescaped from the directory name
  std::string dir;
  std::string control_socket;
  std::string mountpoint;  // the FUSE mount
  std::vector<int> pids;   // processes running `bridge --control-socket <it>`
  bool answered = false;   // the status call over the control socket succeeded
  std::string error;       // why it did not answer
  std::string device;      // as the bridge reports it
  std::string serial;
  std::vector<std::string> naa;
  std::string portal;
  uint64_t io_errors = 0;
  std::string fuse_path;  // how FUSE reaches it: "io_uring", "dev_fuse" ("" from older bridges)
  bool fuse_mounted = false;
};

struct KernelSession {
  std::string sid;  // "3"
  std::string target_iqn;
  std::string portal;  // "10.0.0.1:3260"
  std::string iface;
  std::string state;  // LOGGED_IN, FAILED, ...
};

struct LoopDevice {
  std::string device;        // /dev/loop3
  std::string major_minor;   // 7:3
  std::string backing_file;  // as sysfs shows it, maybe ending in " (deleted)"
};

struct NodeSnapshot {
  std::string state_dir;
  std::vector<AttachRecord> records;
  std::vector<MountEntry> mounts;
  std::vector<BridgeObservation> bridges;
  std::vector<KernelSession> sessions;
  // Loop devices whose backing file lies under <state-dir>/bridges.
  std::vector<LoopDevice> loops;
  // dm-crypt mappings named as the node names them ("blockcsi-..."), by
  // name, whatever record names them or not.
  std::vector<std::string> crypt_mappings;
  // Block device path → "major:minor"; absent when the node has no such device.
  std::map<std::string, std::string> device_numbers;
  // Staging path → statvfs of it (only for paths that are mounted).
  std::map<std::string, FsUsage> usage;
  // Seconds since each record (by volume id) was last written, and whether
  // the plugin answered: a young record of a running plugin may be a stage
  // in flight, which cleanup must not race.
  std::map<std::string, int64_t> record_age_seconds;
  bool plugin_reachable = false;
  // Per userspace volume id whose record names the plugin owning its bridge
  // (plugin_pid + plugin_start_time): whether that very process still runs.
  // Absent: the record names no owner (written by an older plugin).
  std::map<std::string, bool> owner_alive;
  // What could not be read (records, mount table); verbs report these on stderr.
  std::vector<std::string> errors;
};

// The node service's staging annotation, read with the node's own parser so
// the two can never drift apart.
using StagedAnnotation = StagedFacts;
inline StagedAnnotation ParseStagedAnnotation(const AttachRecord& record) { return StagedFacts::Of(record); }

// True when `entry` mounts `device` (numbers `major_minor`): a filesystem on
// it, or a bind of its device node (a raw block publish: devtmpfs, root
// "/loop3").
bool MountUsesDevice(const MountEntry& entry, const std::string& device, const std::string& major_minor);

inline constexpr char kOriginProvisioned[] = "provisioned";
inline constexpr char kOriginStatic[] = "static";  // a static PV's LUN

struct VolumeView {
  std::string volume_id;
  std::string state;   // the record's: attaching | attached
  std::string origin;  // kOriginProvisioned | kOriginStatic
  std::string source;  // "<target iqn> lun <n>" or "<pool>/<image>"
  std::string connector;
  std::string device;
  std::string serial;  // observed when the bridge answers, else expected
  std::string wwn;
  std::string access_type;
  std::string staging_path;
  bool staging_mounted = false;
  bool staging_read_only = false;
  std::vector<std::string> publish_paths;  // other mounts of the device
  std::string fs_type;
  // An encrypted volume's dm-crypt mapping (its pods' device) and whether
  // it is open; empty for a plain volume.
  std::string crypt_mapping;
  bool crypt_open = false;
  uint64_t size_bytes = 0;
  std::optional<FsUsage> usage;
  std::string attachment;  // "bridge pid 123 running", "kernel session 3 LOGGED_IN", "bridge not running"
  bool attachment_alive = false;
  // Userspace volumes whose bridge answers: kBridgeStarted / kBridgeAdopted
  // (the owning plugin runs; it started the bridge, or took it over from an
  // earlier plugin), kBridgePluginGone (the owning plugin is gone and no
  // plugin has adopted the bridge yet); empty when not known.
  std::string bridge_owner;
  std::string owner_pid;  // the owning plugin's pid, as the record says
  bool device_present = false;
  const BridgeObservation* bridge = nullptr;
};

std::vector<VolumeView> DescribeVolumes(const NodeSnapshot& snapshot);

inline constexpr char kVerdictHealthy[] = "healthy";
inline constexpr char kVerdictStaleRecord[] = "stale record";
inline constexpr char kVerdictOrphanBridge[] = "orphan bridge";
inline constexpr char kVerdictOrphanSession[] = "orphan session";
inline constexpr char kVerdictOrphanMount[] = "orphan mount";
inline constexpr char kVerdictOrphanLoop[] = "orphan loop device";
inline constexpr char kVerdictOrphanMapping[] = "orphan dm-crypt mapping";
inline constexpr char kVerdictDeviceMissing[] = "device missing";
inline constexpr char kVerdictIdentityMismatch[] = "identity mismatch";
inline constexpr char kVerdictReadOnly[] = "read-only remount";
inline constexpr char kVerdictPluginGone[] = "plugin gone";

inline constexpr char kBridgeStarted[] = "started";
inline constexpr char kBridgeAdopted[] = "adopted";
inline constexpr char kBridgePluginGone[] = "plugin gone";
inline constexpr char kBridgeOrphan[] = "orphan";

struct Finding {
  std::string subject;  // volume id, or the orphan's name (bridge dir, session, mount target, loop device)
  std::string verdict;
  std::string detail;
  // For userspace bridges: kBridgeStarted, kBridgeAdopted,
  // kBridgePluginGone or kBridgeOrphan; empty otherwise.
  std::string bridge{};
  bool healthy() const { return verdict == kVerdictHealthy; }
};

// One verdict per record (the worst that applies), then one per orphan.
std::vector<Finding> Classify(const NodeSnapshot& snapshot);

// One step cleanup would take. `kind` says how --apply carries it out.
struct CleanupStep {
  enum class Kind {
    kUnmount,       // umount `target`
    kDetachRecord,  // the attach layer's Detach(volume_id): stop the bridge or log out, remove the record
    kStopBridge,    // the userspace connector's Disconnect for a bridge with no record
    kDetachLoop,    // losetup -d `target`
    kCloseMapping,  // cryptsetup close `target` (a dm-crypt mapping's name)
    kManual,        // not done by blockctl; `description` says what to do
  };
  Kind kind;
  std::string subject;  // the finding it resolves
  std::string target;   // mount target, volume id, bridge volume id, loop device
  std::string description;
};

struct CleanupPlan {
  std::vector<CleanupStep> steps;
  // Findings left alone, with why (e.g. a pod's mount still uses the device).
  std::vector<Finding> skipped;
};

// Records younger than this are left alone while the plugin is up.
inline constexpr int64_t kInFlightGraceSeconds = 120;

CleanupPlan PlanCleanup(const NodeSnapshot& snapshot);

// ---- the dm-crypt layer of encrypted volumes (crypt_state.cc)
// The snapshot's crypt_mappings, from /sys/block/dm-*/dm/name.
void GatherCryptMappings(const Host& host_fs, NodeSnapshot& s);
// A finding for each mapping of ours that no record names.
void AddOrphanMappings(const NodeSnapshot& s, std::vector<Finding>& out);

// Reads the real node: records through AttachRecordStore, `mountinfo_text`,
// bridges (status over their control sockets, bounded by `bridge_timeout_ms`),
// sysfs through `host_fs`.
NodeSnapshot GatherNodeSnapshot(const std::string& state_dir, std::shared_ptr<const Host> host_fs,
                                const std::string& mountinfo_text, int bridge_timeout_ms);

// The same for the real host: /sys and /proc at /, /proc/self/mountinfo,
// 2 s per bridge.
NodeSnapshot GatherHostSnapshot(const std::shared_ptr<const Host>& host, const std::string& state_dir);

}  // namespace blockcsi::cli
