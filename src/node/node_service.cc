#include "node/node_service.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "attach/initiator.h"
#include "attach/publish_context.h"
#include "common/fault_points.h"
#include "common/fs_options.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/topology.h"
#include "node/filesystem_ops.h"

namespace blockcsi {

using csi::v1::VolumeCapability;
using AccessMode = csi::v1::VolumeCapability::AccessMode;

namespace {

// A stacked mount (the same target mounted twice by a crashed retry) is
// peeled one layer per Unmount; more layers than this is someone else's doing.
constexpr int kMaxMountLayers = 8;

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

Status ValidateVolumeId(const std::string& volume_id) {
  if (volume_id.empty()) return InvalidArgument("volume_id is required");
  if (volume_id.size() > 256 || volume_id.find('\0') != std::string::npos) {
    return InvalidArgument("volume_id " + Quote(volume_id.substr(0, 64)) + " is malformed");
  }
  return OkStatus();
}

// Absolute, clean paths only: a ".." component could walk the bind mount
// out of the kubelet's directory.
Status ValidatePath(const std::string& volume_id, std::string_view field, const std::string& path) {
  if (path.empty()) return InvalidArgument("volume " + volume_id + ": " + std::string(field) + " is required");
  if (path.front() != '/') {
    return InvalidArgument("volume " + volume_id + ": " + std::string(field) + " " + Quote(path) +
                           " is not an absolute path");
  }
  if (path.size() > 4096 || path.find('\0') != std::string::npos) {
    return InvalidArgument("volume " + volume_id + ": " + std::string(field) + " is malformed");
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string_view part(path.data() + start, end - start);
    if (part == ".." || part == ".") {
      return InvalidArgument("volume " + volume_id + ": " + std::string(field) + " " + Quote(path) + " contains " +
                             Quote(part));
    }
    start = end + 1;
  }
  return OkStatus();
}

// NodeGetVolumeStats / NodeExpandVolume name where a known volume is; a
// path that cannot be a staging or publish path ("some/path", "..") holds
// no volume: NOT_FOUND, the spec's code for "the volume is not there".
Status RequireVolumePath(const std::string& volume_id, const std::string& path) {
  Status st = ValidatePath(volume_id, "volume_path", path);
  if (st.ok()) return st;
  return NotFound(st.message() + ", so the volume is not there");
}

std::string TrimTrailingSlash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

bool IsReaderOnly(AccessMode::Mode mode) {
  return mode == AccessMode::SINGLE_NODE_READER_ONLY || mode == AccessMode::MULTI_NODE_READER_ONLY;
}

// Which access modes the node can serve: a non-cluster filesystem mounted
// writable on several nodes would be corrupted, so multi-node writers are
// for raw block only.
Status ValidateCapability(const std::string& volume_id, const VolumeCapability& cap) {
  if (!cap.has_block() && !cap.has_mount()) {
    return InvalidArgument("volume " + volume_id + ": volume_capability needs an access type (block or mount)");
  }
  AccessMode::Mode mode = cap.access_mode().mode();
  switch (mode) {
    case AccessMode::SINGLE_NODE_WRITER:
    case AccessMode::SINGLE_NODE_READER_ONLY:
    case AccessMode::MULTI_NODE_READER_ONLY:
    case AccessMode::SINGLE_NODE_SINGLE_WRITER:
    case AccessMode::SINGLE_NODE_MULTI_WRITER:
      return OkStatus();
    case AccessMode::MULTI_NODE_SINGLE_WRITER:
    case AccessMode::MULTI_NODE_MULTI_WRITER:
      if (cap.has_block()) return OkStatus();
      return InvalidArgument("volume " + volume_id + ": access mode " + AccessMode::Mode_Name(mode) +
                             " is only supported for raw block volumes");
    default:
      return InvalidArgument("volume " + volume_id + ": access mode " + AccessMode::Mode_Name(mode) +
                             " is not supported");
  }
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A bind mount of a device node shows the devtmpfs as its filesystem and
// "/<node name>" as its root in mountinfo.
bool IsBindOfDeviceNode(const MountEntry& e, const std::string& device) {
  return !device.empty() && e.root == "/" + Basename(device) && (e.fs_type == "devtmpfs" || e.fs_type == "tmpfs");
}

// A read-only raw block publish of a writable attachment: a bind mount of
// the device node, even a read-only one, does not stop writes to the
// device, so the node binds a read-only loop device layered on the volume's
// device instead. Such a layer shows in mountinfo as a bind of "/loopN"
// whose loop reads from the volume's device.
bool IsReadOnlyLayerOf(NodeHost& host, const MountEntry& e, const std::string& device) {
  if (device.empty() || e.root.rfind("/loop", 0) != 0 || (e.fs_type != "devtmpfs" && e.fs_type != "tmpfs")) {
    return false;
  }
  auto backing = host.LoopBackingFile(e.root.substr(1));
  return backing.ok() && *backing == device;
}

std::map<std::string, std::string> ToMap(const google::protobuf::Map<std::string, std::string>& m) {
  return {m.begin(), m.end()};
}

// One staging per volume, as the attach record names it. A stage at a
// second path would mount the filesystem a second time (the kernel shares
// one superblock, so both paths serve and an unstage of one leaves the
// other), and restaging a raw block volume as a filesystem would format
// what the pod wrote to the device. A record whose staging is gone (a
// crash mid-unstage) is no staging: the retry may go anywhere.
Status CheckRecordedStaging(VolumeAttacher& attacher, NodeHost& host, const std::string& volume_id,
                            const std::string& staging_path, bool block, const std::string& fs_type,
                            const std::vector<MountEntry>& table) {
  auto record = attacher.Get(volume_id);
  if (!record.ok()) return record.status().code() == StatusCode::kNotFound ? OkStatus() : record.status();
  StagedFacts staged = StagedFacts::Of(*record);
  if (staged.staging_path.empty()) return OkStatus();  // a stage died before recording; redoing it is safe
  bool still_staged = staged.block() || FindMountAt(table, staged.staging_path) != nullptr;
  if (!still_staged && !record->device_path.empty()) {
    // The staging mount is gone but the device may still be mounted
    // elsewhere (a publish bind): that is still this staging.
    if (auto devnum = host.DeviceNumber(record->device_path); devnum.ok()) {
      still_staged = std::any_of(table.begin(), table.end(), [&](const MountEntry& e) {
        return e.major_minor == *devnum || IsBindOfDeviceNode(e, record->device_path);
      });
    }
  }
  if (!still_staged) return OkStatus();
  if (staged.staging_path != staging_path) {
    return FailedPrecondition("volume " + volume_id + " is already staged at " + staged.staging_path +
                              "; NodeUnstageVolume it there before staging it at " + staging_path);
  }
  if (staged.block() && !block) {
    return AlreadyExists("volume " + volume_id + " is staged at " + staging_path +
                         " as raw block; the request asks for a " + fs_type + " filesystem");
  }
  return OkStatus();
}

}  // namespace

struct NodeService::StagePlan {
  std::string volume_id;
  std::string staging_path;
  bool block = false;
  std::string fs_type;  // empty for block
  std::vector<std::string> mount_flags;
  std::vector<std::string> mkfs_extra;
  bool read_only = false;
  AttachSpec spec;
};

NodeService::NodeService(NodeServiceOptions options)
    : options_([&] {
        if (!options.parse_spec) options.parse_spec = ParseAttachSpec;
        if (!options.fault_hook) options.fault_hook = FaultPoint;
        return std::move(options);
      }()),
      initiator_iqn_(InitiatorIqnForNode(options_.node_id)) {}

void NodeService::Fault(std::string_view step) const { options_.fault_hook(step); }

void NodeService::LogAdoptedVolumes() {
  auto records = options_.attacher->List();
  if (!records.ok()) {
    LogWarn("cannot list attach records", {{"error", records.status().ToString()}});
    return;
  }
  for (const auto& r : *records) {
    LogInfo("found volume from an earlier run", {{"volume_id", r.volume_id},
                                                 {"state", r.state},
                                                 {"device", r.device_path},
                                                 {"staging_path", StagedFacts::Of(r).staging_path}});
  }
}

// ---- NodeStageVolume. Idempotent: the same volume already mounted at the
// staging path with the same filesystem → OK without touching it; any step
// left half-done by a crash is redone (attach reuses the attachment; a
// filesystem made by an earlier attempt is found by the probe and mounted,
// never made again).
Status NodeService::Stage(const csi::v1::NodeStageVolumeRequest& req) {
  StagePlan plan;
  plan.volume_id = req.volume_id();
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(plan.volume_id));
  BLOCKCSI_RETURN_IF_ERROR(ValidatePath(plan.volume_id, "staging_target_path", req.staging_target_path()));
  plan.staging_path = TrimTrailingSlash(req.staging_target_path());
  if (!req.has_volume_capability()) {
    return InvalidArgument("volume " + plan.volume_id + ": volume_capability is required");
  }
  const VolumeCapability& cap = req.volume_capability();
  BLOCKCSI_RETURN_IF_ERROR(ValidateCapability(plan.volume_id, cap));
  plan.block = cap.has_block();
  auto ctx = req.volume_context();
  if (!plan.block) {
    plan.fs_type = cap.mount().fs_type();
    if (plan.fs_type.empty() && ctx.contains(volume_context::kFsType)) plan.fs_type = ctx.at(volume_context::kFsType);
    if (plan.fs_type.empty()) plan.fs_type = kDefaultFsType;
    if (!IsStageableFsType(plan.fs_type)) {
      return InvalidArgument("volume " + plan.volume_id + ": fsType " + Quote(plan.fs_type) +
                             " is not supported (ext4, xfs, btrfs)");
    }
    plan.mount_flags.assign(cap.mount().mount_flags().begin(), cap.mount().mount_flags().end());
    BLOCKCSI_RETURN_IF_ERROR(ValidateMountFlags(plan.volume_id, plan.fs_type, plan.mount_flags));
    if (ctx.contains(volume_context::kMkfsOptions)) {
      BLOCKCSI_ASSIGN_OR_RETURN(plan.mkfs_extra,
                                ParseMkfsOptions(plan.volume_id, plan.fs_type, ctx.at(volume_context::kMkfsOptions)));
    }
  }
  BLOCKCSI_ASSIGN_OR_RETURN(plan.spec, options_.parse_spec(plan.volume_id, ToMap(req.publish_context()),
                                                           ToMap(req.secrets()), initiator_iqn_));
  plan.read_only = plan.spec.read_only;

  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, in_flight_.Acquire(plan.volume_id, "NodeStageVolume"));
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<MountEntry> table, options_.mounter->List());
  BLOCKCSI_RETURN_IF_ERROR(CheckRecordedStaging(*options_.attacher, *options_.host, plan.volume_id, plan.staging_path,
                                                plan.block, plan.fs_type, table));
  if (const MountEntry* entry = FindMountAt(table, plan.staging_path)) {
    bool already_staged = false;
    BLOCKCSI_RETURN_IF_ERROR(CheckExistingStaging(plan, *entry, &already_staged));
    if (already_staged) return OkStatus();
  }

  auto attached = options_.attacher->Attach(plan.spec);
  if (!attached.ok()) {
    Status failed = attached.status();
    // A static PV's target (issue #24) is not ours: "target not found" there
    // means a mistyped IQN or an ACL the array's admin has yet to write,
    // which the CO should keep retrying rather than take as final.
    if (plan.spec.static_volume && failed.code() == StatusCode::kNotFound) {
      failed = Unavailable(failed.message());
    }
    if (failed.message().find(plan.volume_id) == std::string::npos) {
      failed = failed.WithContext("volume \"" + plan.volume_id + "\"");
    }
    return failed;
  }
  AttachRecord record = std::move(*attached);
  Fault("after-attach");
  Status staged = FinishStage(plan, record);
  // kubelet never calls NodeUnstageVolume after a final failure: whatever
  // this call attached must go now, or it stays forever. (An uncertain
  // failure keeps it: kubelet retries, or unstages, later.)
  if (IsFinalFailure(staged)) RollBackAttach(plan.volume_id, staged);
  return staged;
}

// After a final failure of NodeStageVolume: detaches what the attach made
// (bridge, loop device, session, record) unless something still uses the
// device — an attachment that was already serving before this call.
void NodeService::RollBackAttach(const std::string& volume_id, const Status& why) {
  auto record = options_.attacher->Get(volume_id);
  if (!record.ok()) return;  // nothing attached (or the attacher undid it already)
  auto table = options_.mounter->List();
  Status unused = table.ok() ? RequireNoUsers(volume_id, *record, /*staging_path=*/"", *table) : table.status();
  if (!unused.ok()) {
    LogWarn("stage failed; keeping the attachment, it is in use",
            {{"volume_id", volume_id}, {"error", why.ToString()}, {"kept_because", unused.ToString()}});
    return;
  }
  Status detached = options_.attacher->Detach(volume_id);
  if (!detached.ok()) {
    LogError("stage failed and undoing its attach failed too; NodeUnstageVolume or blockctl cleanup must finish it",
             {{"volume_id", volume_id}, {"error", why.ToString()}, {"detach_error", detached.ToString()}});
    return;
  }
  LogInfo("stage failed; attachment undone", {{"volume_id", volume_id}, {"error", why.ToString()}});
}

Status NodeService::FinishStage(const StagePlan& plan, const AttachRecord& record) {
  if (record.device_path.empty()) {
    return Internal("volume " + plan.volume_id + ": the attacher reported no device path");
  }
  // Our facts go into the attach record before anything is formatted or
  // mounted, so that a restarted plugin (or blockctl) knows what this
  // device is for even if we die in the middle.
  StagedFacts facts{
      .access_type = plan.block ? "block" : "mount", .fs_type = plan.fs_type, .staging_path = plan.staging_path};
  if (StagedFacts::Of(record).Encode() != facts.Encode()) {
    BLOCKCSI_RETURN_IF_ERROR(options_.attacher->Annotate(plan.volume_id, kStagedAnnotation, facts.Encode()));
  }
  if (plan.block) {
    LogInfo("staged raw block volume", {{"volume_id", plan.volume_id}, {"device", record.device_path}});
    return OkStatus();
  }
  return StageMount(plan, record);
}

Status NodeService::CheckExistingStaging(const StagePlan& plan, const MountEntry& entry, bool* already_staged) {
  auto something_else = [&] {
    return FailedPrecondition("volume " + plan.volume_id + ": staging path " + plan.staging_path +
                              " already has a mount of " + entry.source + " (" + entry.fs_type +
                              ") that is not this volume");
  };
  auto record = options_.attacher->Get(plan.volume_id);
  if (!record.ok()) {
    if (record.status().code() == StatusCode::kNotFound) return something_else();
    return record.status();
  }
  if (record->device_path.empty()) return something_else();
  auto devnum = options_.host->DeviceNumber(record->device_path);
  if (!devnum.ok() || *devnum != entry.major_minor) return something_else();
  if (plan.block) {
    return AlreadyExists("volume " + plan.volume_id + " is staged at " + plan.staging_path +
                         " as a filesystem; the request asks for raw block");
  }
  if (entry.fs_type != plan.fs_type) {
    return AlreadyExists("volume " + plan.volume_id + " is staged at " + plan.staging_path + " with " + entry.fs_type +
                         "; the request asks for " + plan.fs_type);
  }
  *already_staged = true;
  return OkStatus();
}

Status NodeService::StageMount(const StagePlan& plan, const AttachRecord& record) {
  const std::string& device = record.device_path;
  auto probed = options_.probe->Probe(device);
  if (!probed.ok()) return probed.status().WithContext("volume " + plan.volume_id + ": probe " + device);
  bool formatted_now = false;
  if (probed->blank()) {
    if (plan.read_only) {
      return FailedPrecondition("volume " + plan.volume_id + " is blank but attached read-only: cannot create a " +
                                plan.fs_type + " filesystem on it");
    }
    // CreateVolume sizes new volumes for their filesystem; a device that
    // is still too small (a static PV, a volume made before) would only
    // fail in mkfs, with its usage text. Say it in one line instead.
    if (uint64_t minimum = options_.fs_minimum_bytes ? options_.fs_minimum_bytes(plan.fs_type) : 0; minimum > 0) {
      uint64_t size = record.size_bytes;
      if (size == 0) {
        if (auto measured = options_.host->BlockDeviceSize(device); measured.ok()) size = *measured;
      }
      if (size > 0 && size < minimum) {
        return FailedPrecondition("volume " + plan.volume_id + ": the device is " + std::to_string(size) +
                                  " bytes, too small for " + plan.fs_type + " (at least " + std::to_string(minimum) +
                                  " bytes); expand the volume or stage it with another fsType");
      }
    }
    BLOCKCSI_RETURN_IF_ERROR(FormatDevice(*options_.executor, plan.volume_id, plan.fs_type, device, plan.mkfs_extra));
    formatted_now = true;
    Fault("after-mkfs");
  } else if (probed->signatures.size() != 1 || probed->signatures.front().type != plan.fs_type) {
    // Someone's data: another filesystem, a partition table, LVM, RAID.
    // Never format it, never mount it as something it is not.
    return FailedPrecondition("volume " + plan.volume_id + ": device " + device + " carries " + probed->Describe() +
                              ", not " + plan.fs_type + " or a blank device; refusing to format or mount it");
  }
  // A filesystem mkfs just made is clean; one found on the device may not be.
  if (plan.fs_type == "ext4" && !plan.read_only && !formatted_now) {
    BLOCKCSI_RETURN_IF_ERROR(RepairExt4IfNeeded(*options_.executor, plan.volume_id, device));
  }
  BLOCKCSI_RETURN_IF_ERROR(options_.host->MakeDirectory(plan.staging_path));
  std::string mount_options;
  for (const auto& f : plan.mount_flags) mount_options += (mount_options.empty() ? "" : ",") + f;
  if (plan.read_only) mount_options += mount_options.empty() ? "ro" : ",ro";
  // A volume restored from a snapshot or cloned carries its source's XFS
  // UUID, and XFS refuses to mount a second filesystem with a UUID already
  // mounted: without nouuid a clone could not be staged next to its source.
  if (plan.fs_type == "xfs" &&
      std::find(plan.mount_flags.begin(), plan.mount_flags.end(), "nouuid") == plan.mount_flags.end()) {
    mount_options += mount_options.empty() ? "nouuid" : ",nouuid";
  }
  Status mounted = options_.mounter->Mount(device, plan.staging_path, plan.fs_type, mount_options);
  if (!mounted.ok()) return mounted.WithContext("volume " + plan.volume_id);
  Fault("after-mount");
  LogInfo("staged volume", {{"volume_id", plan.volume_id},
                            {"device", device},
                            {"fs_type", plan.fs_type},
                            {"staging_path", plan.staging_path}});
  return OkStatus();
}

// ---- NodeUnstageVolume. Idempotent: nothing mounted and no record → OK.
// Refuses while any publish still uses the device; detaches only after the
// staging mount is gone, so a failed unmount never loses buffered writes.
Status NodeService::Unstage(const csi::v1::NodeUnstageVolumeRequest& req) {
  const std::string& volume_id = req.volume_id();
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(volume_id));
  BLOCKCSI_RETURN_IF_ERROR(ValidatePath(volume_id, "staging_target_path", req.staging_target_path()));
  std::string staging = TrimTrailingSlash(req.staging_target_path());
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, in_flight_.Acquire(volume_id, "NodeUnstageVolume"));

  auto record = options_.attacher->Get(volume_id);
  if (!record.ok() && record.status().code() != StatusCode::kNotFound) return record.status();
  if (record.ok()) {
    std::string recorded = StagedFacts::Of(*record).staging_path;
    if (!recorded.empty() && recorded != staging) {
      // Staged somewhere else: this path holds nothing of ours to undo.
      LogWarn("unstage at a path the volume is not staged at",
              {{"volume_id", volume_id}, {"requested", staging}, {"staged_at", recorded}});
      return OkStatus();
    }
  }
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<MountEntry> table, options_.mounter->List());
  if (record.ok()) BLOCKCSI_RETURN_IF_ERROR(RequireNoUsers(volume_id, *record, staging, table));
  for (int layer = 0; FindMountAt(table, staging) != nullptr; ++layer) {
    if (layer == kMaxMountLayers) {
      return FailedPrecondition("volume " + volume_id + ": " + staging + " is still mounted after " +
                                std::to_string(kMaxMountLayers) + " unmounts");
    }
    Status st = options_.mounter->Unmount(staging);
    if (!st.ok() && st.code() != StatusCode::kNotFound) {
      return st.WithContext("volume " + volume_id + ": cannot unmount the staging path; not detaching");
    }
    BLOCKCSI_ASSIGN_OR_RETURN(table, options_.mounter->List());
  }
  Fault("after-unmount");
  Status detached = options_.attacher->Detach(volume_id);
  if (!detached.ok()) return detached.WithContext("volume " + volume_id + ": detach");
  LogInfo("unstaged volume", {{"volume_id", volume_id}, {"staging_path", staging}});
  return OkStatus();
}

Status NodeService::RequireNoUsers(const std::string& volume_id, const AttachRecord& record,
                                   const std::string& staging_path, const std::vector<MountEntry>& table) {
  if (record.device_path.empty()) return OkStatus();
  auto devnum = options_.host->DeviceNumber(record.device_path);
  std::vector<std::string> users;
  for (const auto& e : table) {
    if (e.target == staging_path) continue;
    if ((devnum.ok() && e.major_minor == *devnum) || IsBindOfDeviceNode(e, record.device_path) ||
        IsReadOnlyLayerOf(*options_.host, e, record.device_path)) {
      users.push_back(e.target);
    }
  }
  if (users.empty()) return OkStatus();
  std::string list;
  for (const auto& u : users) list += (list.empty() ? "" : ", ") + u;
  return FailedPrecondition("volume " + volume_id + " is still in use (mounted at " + list +
                            "); unpublish it before unstaging");
}

// ---- NodePublishVolume. Idempotent: the same bind with the same
// read-only setting → OK; with the other setting → ALREADY_EXISTS.
Status NodeService::Publish(const csi::v1::NodePublishVolumeRequest& req) {
  const std::string& volume_id = req.volume_id();
  // The fields the spec requires come first (INVALID_ARGUMENT), whatever
  // else the request lacks.
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(volume_id));
  BLOCKCSI_RETURN_IF_ERROR(ValidatePath(volume_id, "target_path", req.target_path()));
  if (!req.has_volume_capability()) {
    return InvalidArgument("volume " + volume_id + ": volume_capability is required");
  }
  const VolumeCapability& cap = req.volume_capability();
  BLOCKCSI_RETURN_IF_ERROR(ValidateCapability(volume_id, cap));
  // The spec's own code for this one: STAGE_UNSTAGE_VOLUME is advertised,
  // so a publish without a staging path is out of order, not malformed.
  if (req.staging_target_path().empty()) {
    return FailedPrecondition("volume " + volume_id + ": staging_target_path is not set; NodeStageVolume first");
  }
  BLOCKCSI_RETURN_IF_ERROR(ValidatePath(volume_id, "staging_target_path", req.staging_target_path()));
  if (cap.has_mount()) {
    std::vector<std::string> flags(cap.mount().mount_flags().begin(), cap.mount().mount_flags().end());
    std::string fs = cap.mount().fs_type().empty() ? kDefaultFsType : cap.mount().fs_type();
    if (!IsStageableFsType(fs)) {
      return InvalidArgument("volume " + volume_id + ": fsType " + Quote(fs) + " is not supported (ext4, xfs, btrfs)");
    }
    BLOCKCSI_RETURN_IF_ERROR(ValidateMountFlags(volume_id, fs, flags));
  }
  std::string staging = TrimTrailingSlash(req.staging_target_path());
  std::string target = TrimTrailingSlash(req.target_path());
  bool read_only = req.readonly() || IsReaderOnly(cap.access_mode().mode());

  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, in_flight_.Acquire(volume_id, "NodePublishVolume"));
  auto record = options_.attacher->Get(volume_id);
  if (!record.ok()) {
    if (record.status().code() == StatusCode::kNotFound) {
      return FailedPrecondition("volume " + volume_id + " is not staged on this node; NodeStageVolume first");
    }
    return record.status();
  }
  StagedFacts staged = StagedFacts::Of(*record);
  const std::string& recorded = staged.staging_path;
  if (recorded != staging) {
    return FailedPrecondition("volume " + volume_id + " is not staged at " + staging +
                              (recorded.empty() ? "" : " (it is staged at " + recorded + ")"));
  }
  bool staged_block = staged.block();
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<MountEntry> table, options_.mounter->List());
  const MountEntry* existing = FindMountAt(table, target);
  // A capability the staging cannot serve. Already published at this target
  // with what was staged, the spec's answer is ALREADY_EXISTS (published but
  // incompatible); otherwise the request does not fit the volume's state.
  std::string mismatch;
  if (staged_block != cap.has_block()) {
    mismatch = std::string("is staged as ") + (staged_block ? "raw block" : "a filesystem") +
               "; the request asks for " + (cap.has_block() ? "raw block" : "a filesystem");
  } else if (!staged_block && !cap.mount().fs_type().empty() && !staged.fs_type.empty() &&
             cap.mount().fs_type() != staged.fs_type) {
    mismatch = "is staged with " + staged.fs_type + "; the request asks for " + cap.mount().fs_type();
  }
  if (!mismatch.empty()) {
    const MountEntry* staged_mount = FindMountAt(table, staging);
    bool ours = existing != nullptr &&
                (staged_block ? IsBindOfDeviceNode(*existing, record->device_path) ||
                                    IsReadOnlyLayerOf(*options_.host, *existing, record->device_path)
                              : staged_mount != nullptr && existing->major_minor == staged_mount->major_minor);
    if (ours) return AlreadyExists("volume " + volume_id + " is already published at " + target + " and " + mismatch);
    // A filesystem type that differs but fits what is staged was accepted
    // before; keep serving it (the bind mount does not care).
    if (staged_block != cap.has_block()) return FailedPrecondition("volume " + volume_id + " " + mismatch);
  }

  if (!staged_block) {
    const MountEntry* staged = FindMountAt(table, staging);
    if (staged == nullptr) {
      return FailedPrecondition("volume " + volume_id + ": nothing is mounted at the staging path " + staging +
                                "; NodeStageVolume first");
    }
    if (existing != nullptr) {
      if (existing->major_minor != staged->major_minor || existing->root != staged->root) {
        return FailedPrecondition("volume " + volume_id + ": target path " + target + " already has another mount (" +
                                  existing->source + ")");
      }
      if (existing->read_only() != read_only) {
        return AlreadyExists("volume " + volume_id + " is already published at " + target + " " +
                             (existing->read_only() ? "read-only" : "read-write"));
      }
      return OkStatus();
    }
    BLOCKCSI_RETURN_IF_ERROR(options_.host->MakeDirectory(target));
    Status st = options_.mounter->BindMount(staging, target, read_only);
    if (!st.ok()) return st.WithContext("volume " + volume_id);
  } else {
    const std::string& device = record->device_path;
    if (options_.host->Kind(device) != PathKind::kBlockDevice) {
      return FailedPrecondition("volume " + volume_id + ": device " + device + " is gone; restage the volume");
    }
    if (existing != nullptr) {
      if (!IsBindOfDeviceNode(*existing, device) && !IsReadOnlyLayerOf(*options_.host, *existing, device)) {
        return FailedPrecondition("volume " + volume_id + ": target path " + target + " already has another mount (" +
                                  existing->source + ")");
      }
      if (existing->read_only() != read_only) {
        return AlreadyExists("volume " + volume_id + " is already published at " + target + " " +
                             (existing->read_only() ? "read-only" : "read-write"));
      }
      return OkStatus();
    }
    BLOCKCSI_RETURN_IF_ERROR(options_.host->MakeFile(target));
    std::string source = device;
    if (read_only && !record->read_only) {
      BLOCKCSI_ASSIGN_OR_RETURN(source, MakeReadOnlyLayer(volume_id, device));
    }
    Status st = options_.mounter->BindMount(source, target, read_only);
    if (!st.ok()) {
      if (source != device) (void)RemoveReadOnlyLayer(volume_id, source);
      return st.WithContext("volume " + volume_id);
    }
  }
  LogInfo("published volume", {{"volume_id", volume_id}, {"target_path", target}, {"readonly", read_only ? "1" : "0"}});
  return OkStatus();
}

// ---- NodeUnpublishVolume. Idempotent: a missing or unmounted target → OK.
Status NodeService::Unpublish(const csi::v1::NodeUnpublishVolumeRequest& req) {
  const std::string& volume_id = req.volume_id();
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(volume_id));
  BLOCKCSI_RETURN_IF_ERROR(ValidatePath(volume_id, "target_path", req.target_path()));
  std::string target = TrimTrailingSlash(req.target_path());
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, in_flight_.Acquire(volume_id, "NodeUnpublishVolume"));
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<MountEntry> table, options_.mounter->List());
  std::vector<std::string> layers;  // read-only loop layers to free once unmounted
  for (int layer = 0; const MountEntry* entry = FindMountAt(table, target); ++layer) {
    if (layer == kMaxMountLayers) {
      return FailedPrecondition("volume " + volume_id + ": " + target + " is still mounted after " +
                                std::to_string(kMaxMountLayers) + " unmounts");
    }
    if (entry->root.rfind("/loop", 0) == 0) {
      auto backing = options_.host->LoopBackingFile(entry->root.substr(1));
      if (backing.ok() && backing->rfind("/dev/", 0) == 0) layers.push_back("/dev" + entry->root);
    }
    Status st = options_.mounter->Unmount(target);
    if (!st.ok() && st.code() != StatusCode::kNotFound) return st.WithContext("volume " + volume_id);
    BLOCKCSI_ASSIGN_OR_RETURN(table, options_.mounter->List());
  }
  for (const auto& layer : layers) BLOCKCSI_RETURN_IF_ERROR(RemoveReadOnlyLayer(volume_id, layer));
  Status removed = options_.host->RemovePath(target);
  if (!removed.ok()) return removed.WithContext("volume " + volume_id);
  LogInfo("unpublished volume", {{"volume_id", volume_id}, {"target_path", target}});
  return OkStatus();
}

StatusOr<std::string> NodeService::MakeReadOnlyLayer(const std::string& volume_id, const std::string& device) {
  Command cmd("losetup");
  cmd.Arg("--read-only").Arg("--find").Arg("--show").Arg(device).Timeout(std::chrono::seconds(30));
  BLOCKCSI_ASSIGN_OR_RETURN(CommandResult r, options_.executor->Run(cmd));
  std::string loop = r.stdout_text.substr(0, r.stdout_text.find('\n'));
  if (!r.ok() || loop.rfind("/dev/loop", 0) != 0) {
    return Internal("volume " + volume_id + ": cannot make a read-only view of " + device + ": " +
                    DescribeFailure(cmd, r));
  }
  return loop;
}

Status NodeService::RemoveReadOnlyLayer(const std::string& volume_id, const std::string& loop) {
  Command cmd("losetup");
  cmd.Arg("--detach").Arg(loop).Timeout(std::chrono::seconds(30));
  BLOCKCSI_ASSIGN_OR_RETURN(CommandResult r, options_.executor->Run(cmd));
  if (!r.ok()) {
    return Internal("volume " + volume_id + ": cannot free the read-only view " + loop + ": " +
                    DescribeFailure(cmd, r));
  }
  return OkStatus();
}

// ---- NodeGetVolumeStats. Reads only; no in-flight lease, so stats keep
// answering while a long stage or expand runs.
Status NodeService::Stats(const csi::v1::NodeGetVolumeStatsRequest& req,
                          csi::v1::NodeGetVolumeStatsResponse* response) {
  const std::string& volume_id = req.volume_id();
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(volume_id));
  if (req.volume_path().empty()) return InvalidArgument("volume " + volume_id + ": volume_path is required");
  // A volume this node does not hold is NOT_FOUND whatever the path looks
  // like; the path is checked against the volume only once it is known.
  auto record = options_.attacher->Get(volume_id);
  if (!record.ok()) {
    if (record.status().code() == StatusCode::kNotFound) {
      return NotFound("volume " + volume_id + " is not staged on this node");
    }
    return record.status();
  }
  BLOCKCSI_RETURN_IF_ERROR(RequireVolumePath(volume_id, req.volume_path()));
  std::string path = TrimTrailingSlash(req.volume_path());
  PathKind kind = options_.host->Kind(path);
  if (kind == PathKind::kMissing) return NotFound("volume " + volume_id + ": volume path " + path + " does not exist");
  std::vector<std::string> problems;
  const std::string& device = record->device_path;
  if (device.empty() || options_.host->Kind(device) != PathKind::kBlockDevice) {
    problems.push_back("device " + (device.empty() ? std::string("(unknown)") : device) + " is gone");
  }
  AttachHealth health = options_.attacher->Check(volume_id);
  if (health.abnormal) problems.push_back(health.message);

  bool block = StagedFacts::Of(*record).block();
  if (block) {
    if (kind != PathKind::kBlockDevice) {
      problems.push_back("the raw block bind at " + path + " is gone");
    } else if (auto size = options_.host->BlockDeviceSize(path); size.ok()) {
      auto* usage = response->add_usage();
      usage->set_unit(csi::v1::VolumeUsage::BYTES);
      usage->set_total(static_cast<int64_t>(*size));
    } else {
      problems.push_back(size.status().message());
    }
  } else {
    BLOCKCSI_ASSIGN_OR_RETURN(std::vector<MountEntry> table, options_.mounter->List());
    const MountEntry* entry = FindMountAt(table, path);
    if (entry == nullptr) {
      problems.push_back("nothing is mounted at " + path + " (the mount is gone)");
    } else {
      auto devnum = device.empty() ? StatusOr<std::string>(NotFound("no device")) : options_.host->DeviceNumber(device);
      if (devnum.ok() && *devnum != entry->major_minor) {
        problems.push_back(path + " is mounted from " + entry->source + ", not from the volume's device " + device);
      }
      if (auto fs = options_.host->StatFs(path); fs.ok()) {
        auto* bytes = response->add_usage();
        bytes->set_unit(csi::v1::VolumeUsage::BYTES);
        bytes->set_total(static_cast<int64_t>(fs->total_bytes));
        bytes->set_available(static_cast<int64_t>(fs->available_bytes));
        bytes->set_used(static_cast<int64_t>(fs->used_bytes));
        auto* inodes = response->add_usage();
        inodes->set_unit(csi::v1::VolumeUsage::INODES);
        inodes->set_total(static_cast<int64_t>(fs->total_inodes));
        inodes->set_available(static_cast<int64_t>(fs->free_inodes));
        inodes->set_used(static_cast<int64_t>(fs->used_inodes));
      } else {
        problems.push_back(fs.status().message());
      }
      // Staged writable, now read-only: ext4/xfs shut themselves down or
      // remount read-only after write errors (a storage outage longer than
      // the I/O timeout). The pods' writes fail until the volume is
      // restaged, which runs the filesystem's own recovery.
      // (Only when the staging mount itself is read-write: a read-only
      // mount option asked for in the StorageClass is not a failure.)
      const StagedFacts facts = StagedFacts::Of(*record);
      const MountEntry* staging_mount = facts.staging_path.empty() ? nullptr : FindMountAt(table, facts.staging_path);
      if (!record->read_only && staging_mount != nullptr && !staging_mount->read_only()) {
        if (auto staged = options_.host->StatFs(facts.staging_path); staged.ok() && staged->read_only) {
          problems.push_back("the filesystem at " + facts.staging_path +
                             " went read-only after I/O errors: stop the pods using it, then NodeUnstage and "
                             "NodeStage again (the filesystem is checked and its journal replayed at stage)");
        }
      }
    }
  }
  auto* condition = response->mutable_volume_condition();
  condition->set_abnormal(!problems.empty());
  std::string message;
  for (const auto& p : problems) message += (message.empty() ? "" : "; ") + p;
  condition->set_message(problems.empty() ? "volume " + volume_id + " is healthy"
                                          : "volume " + volume_id + ": " + message);
  return OkStatus();
}

// ---- NodeExpandVolume. Idempotent: growing to the current device size
// again is a no-op for every filesystem tool we run.
Status NodeService::Expand(const csi::v1::NodeExpandVolumeRequest& req, csi::v1::NodeExpandVolumeResponse* response) {
  const std::string& volume_id = req.volume_id();
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(volume_id));
  if (req.volume_path().empty()) return InvalidArgument("volume " + volume_id + ": volume_path is required");
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, in_flight_.Acquire(volume_id, "NodeExpandVolume"));
  // As in Stats: an unknown volume is NOT_FOUND before its path is judged.
  auto record = options_.attacher->Get(volume_id);
  if (!record.ok()) {
    if (record.status().code() == StatusCode::kNotFound) {
      return NotFound("volume " + volume_id + " is not staged on this node");
    }
    return record.status();
  }
  BLOCKCSI_RETURN_IF_ERROR(RequireVolumePath(volume_id, req.volume_path()));
  if (!req.staging_target_path().empty()) {
    BLOCKCSI_RETURN_IF_ERROR(ValidatePath(volume_id, "staging_target_path", req.staging_target_path()));
  }
  std::string path = TrimTrailingSlash(req.volume_path());
  if (options_.host->Kind(path) == PathKind::kMissing) {
    return NotFound("volume " + volume_id + ": volume path " + path + " does not exist");
  }
  bool block = StagedFacts::Of(*record).block() || (req.has_volume_capability() && req.volume_capability().has_block());
  auto rescanned = options_.attacher->Rescan(volume_id);
  if (!rescanned.ok()) return rescanned.status().WithContext("volume " + volume_id + ": rescan");
  uint64_t size = *rescanned;
  Fault("after-rescan");
  int64_t required = req.capacity_range().required_bytes();
  if (required > 0 && size < static_cast<uint64_t>(required)) {
    // The controller grows the LUN first; seeing the old size means its
    // refresh has not reached us yet. Transient: the resizer retries.
    return Unavailable("volume " + volume_id + ": the device is " + std::to_string(size) + " bytes after rescan, " +
                       std::to_string(required) + " were asked for");
  }
  if (!block) {
    BLOCKCSI_ASSIGN_OR_RETURN(std::vector<MountEntry> table, options_.mounter->List());
    const MountEntry* entry = FindMountAt(table, path);
    if (entry == nullptr) {
      return FailedPrecondition("volume " + volume_id + ": nothing is mounted at " + path + "; cannot grow it online");
    }
    std::string fs = StagedFacts::Of(*record).fs_type;
    if (fs.empty()) fs = entry->fs_type;
    BLOCKCSI_RETURN_IF_ERROR(
        GrowFilesystem(*options_.executor, *options_.host, volume_id, fs, record->device_path, path));
  }
  response->set_capacity_bytes(static_cast<int64_t>(size));
  LogInfo("expanded volume", {{"volume_id", volume_id}, {"capacity_bytes", std::to_string(size)}});
  return OkStatus();
}

// ---- gRPC surface: each RPC is its Status twin plus the one conversion.
grpc::Status NodeService::NodeStageVolume(grpc::ServerContext*, const csi::v1::NodeStageVolumeRequest* request,
                                          csi::v1::NodeStageVolumeResponse*) {
  return ToGrpcStatus(Stage(*request));
}
grpc::Status NodeService::NodeUnstageVolume(grpc::ServerContext*, const csi::v1::NodeUnstageVolumeRequest* request,
                                            csi::v1::NodeUnstageVolumeResponse*) {
  return ToGrpcStatus(Unstage(*request));
}
grpc::Status NodeService::NodePublishVolume(grpc::ServerContext*, const csi::v1::NodePublishVolumeRequest* request,
                                            csi::v1::NodePublishVolumeResponse*) {
  return ToGrpcStatus(Publish(*request));
}
grpc::Status NodeService::NodeUnpublishVolume(grpc::ServerContext*, const csi::v1::NodeUnpublishVolumeRequest* request,
                                              csi::v1::NodeUnpublishVolumeResponse*) {
  return ToGrpcStatus(Unpublish(*request));
}
grpc::Status NodeService::NodeGetVolumeStats(grpc::ServerContext*, const csi::v1::NodeGetVolumeStatsRequest* request,
                                             csi::v1::NodeGetVolumeStatsResponse* response) {
  return ToGrpcStatus(Stats(*request, response));
}
grpc::Status NodeService::NodeExpandVolume(grpc::ServerContext*, const csi::v1::NodeExpandVolumeRequest* request,
                                           csi::v1::NodeExpandVolumeResponse* response) {
  return ToGrpcStatus(Expand(*request, response));
}

grpc::Status NodeService::NodeGetCapabilities(grpc::ServerContext*, const csi::v1::NodeGetCapabilitiesRequest*,
                                              csi::v1::NodeGetCapabilitiesResponse* response) {
  using Rpc = csi::v1::NodeServiceCapability::RPC;
  for (auto type : {Rpc::STAGE_UNSTAGE_VOLUME, Rpc::GET_VOLUME_STATS, Rpc::EXPAND_VOLUME, Rpc::VOLUME_CONDITION,
                    Rpc::SINGLE_NODE_MULTI_WRITER}) {
    response->add_capabilities()->mutable_rpc()->set_type(type);
  }
  return grpc::Status::OK;
}

grpc::Status NodeService::NodeGetInfo(grpc::ServerContext*, const csi::v1::NodeGetInfoRequest*,
                                      csi::v1::NodeGetInfoResponse* response) {
  response->set_node_id(options_.node_id);
  response->set_max_volumes_per_node(options_.max_volumes_per_node);
  auto& segments = *response->mutable_accessible_topology()->mutable_segments();
  segments[kTopologyNodeKey] = options_.node_id;
  if (!options_.zone.empty()) segments[kTopologyZoneKey] = options_.zone;
  return grpc::Status::OK;
}

}  // namespace blockcsi
