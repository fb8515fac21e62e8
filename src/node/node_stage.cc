#include "node/node_service.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "common/fault_points.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/mkfs_mount_options.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "node/fs_maintenance.h"
#include "node/node_claims.h"
#include "node/node_internal.h"
#include "node/volume_crypt.h"

// NodeStageVolume and NodeUnstageVolume.
namespace blockcsi {

using namespace node_internal;  // NOLINT(google-build-using-namespace): the node_*.cc files share these helpers

namespace {

// What the attach record says about this staging, for blockctl and restarts.
StagedFacts FactsOf(bool block, const std::string& fs_type, const std::string& staging_path) {
  return {.access_type = block ? "block" : "mount", .fs_type = fs_type, .staging_path = staging_path};
}

}  // namespace

// The request checked and turned into what the stage does, before any
// lock: the fields the spec requires, the fence, the filesystem and its
// options, and the attach spec from the publish context.
Status NodeService::PlanStage(const csi::v1::NodeStageVolumeRequest& req, StagePlan* out) {
  StagePlan& plan = *out;
  plan.volume_id = req.volume_id();
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(plan.volume_id));
  if (const std::string fence = Fenced(); !fence.empty()) {
    return FailedPrecondition("volume " + plan.volume_id + ": node " + options_.node_id + " is fenced (fence " + fence +
                              "); NodeStage is refused until the controller unfences it");
  }
  BLOCKCSI_RETURN_IF_ERROR(ValidatePath(plan.volume_id, "staging_target_path", req.staging_target_path()));
  plan.staging_path = TrimTrailingSlash(req.staging_target_path());
  if (!req.has_volume_capability()) {
    return InvalidArgument("volume " + plan.volume_id + ": volume_capability is required");
  }
  const VolumeCapability& cap = req.volume_capability();
  BLOCKCSI_RETURN_IF_ERROR(ValidateAccessTypeAndMode(cap, plan.volume_id));
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
  // Our facts ride in the attacher's own "attached" write (see FinishStage).
  plan.spec.annotations[kStagedAnnotation] = FactsOf(plan.block, plan.fs_type, plan.staging_path).Encode();
  return PlanEncryption(req, plan);
}

// An encrypted volume is never staged as plain: the key Secret and the
// wrapped data key must both be there, and the data key is unwrapped here,
// before anything attaches, so that a wrong Secret leaves nothing behind.
// The mapping's name joins the record in the attach's own write, before the
// mapping exists (unstage, restart and blockctl cleanup find it by it).
Status NodeService::PlanEncryption(const csi::v1::NodeStageVolumeRequest& req, StagePlan& plan) {
  BLOCKCSI_ASSIGN_OR_RETURN(bool encrypted, WantsEncryption(plan.volume_id, ToMap(req.volume_context())));
  if (!encrypted) {
    if (req.publish_context().contains(volume_key::kWrappedDataKeyContext)) {
      return InvalidArgument("volume " + plan.volume_id +
                             ": publish_context carries a wrapped data key but "
                             "volume_context does not mark the volume encrypted; refusing to stage it as plain");
    }
    return OkStatus();
  }
  BLOCKCSI_ASSIGN_OR_RETURN(plan.data_key,
                            DataKeyForStage(plan.volume_id, ToMap(req.publish_context()), ToMap(req.secrets())));
  plan.crypt_mapping = CryptMappingName(plan.volume_id);
  plan.spec.annotations[kCryptAnnotation] = plan.crypt_mapping;
  return OkStatus();
}

// ---- NodeStageVolume. Idempotent: the same volume already mounted at the
// staging path with the same filesystem → OK without touching it; any step
// left half-done by a crash is redone (attach reuses the attachment; a
// filesystem made by an earlier attempt is found by the probe and mounted,
// never made again).
Status NodeService::Stage(const csi::v1::NodeStageVolumeRequest& req) {
  StagePlan plan;
  BLOCKCSI_RETURN_IF_ERROR(PlanStage(req, &plan));

  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, in_flight_.Acquire(plan.volume_id, "NodeStageVolume"));
  // The path and the LUN are held too: two volume ids naming one of them
  // never pass the checks below side by side before either has a record.
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease path_lease,
                            HoldKey(plan.volume_id, "path", plan.staging_path, "NodeStageVolume"));
  std::vector<InFlightLease> lun_leases;
  for (const std::string& key : LunKeys(plan.spec)) {
    BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease held, HoldKey(plan.volume_id, "LUN", key, "NodeStageVolume"));
    lun_leases.push_back(std::move(held));
  }
  // The one read of the attach records in this call: the other volumes'
  // claims and this volume's own record, which the lease keeps from being
  // rewritten before the attach below decides on this same copy (the
  // attacher takes no lock of its own, volume_attacher.h).
  BLOCKCSI_ASSIGN_OR_RETURN(NodeRecords records, ReadRecords(plan.volume_id));
  const std::optional<AttachRecord>& earlier = records.own;
  BLOCKCSI_RETURN_IF_ERROR(
      RefuseOtherVolumesPath(records.all, plan.volume_id, "staging_target_path", plan.staging_path));
  BLOCKCSI_RETURN_IF_ERROR(RefuseLunOfOtherVolume(records.all, plan.spec));
  BLOCKCSI_RETURN_IF_ERROR(
      RefuseSymlinkedPath(*options_.host, plan.volume_id, "staging_target_path", plan.staging_path));
  const AttachRecord* recorded = earlier ? &*earlier : nullptr;
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<MountEntry> table, options_.mounter->List());
  BLOCKCSI_RETURN_IF_ERROR(CheckRecordedStaging(recorded, *options_.host, plan.volume_id, plan.staging_path, plan.block,
                                                plan.fs_type, table));
  if (const MountEntry* entry = FindMountAt(table, plan.staging_path)) {
    bool already_staged = false;
    BLOCKCSI_RETURN_IF_ERROR(CheckExistingStaging(plan, *entry, recorded, &already_staged));
    if (already_staged) return OkStatus();
  }

  auto attached = options_.attacher->Attach(plan.spec, earlier);
  if (!attached.ok()) {
    Status failed = attached.status();
    // A static PV's target is not ours: "target not found" there means a
    // mistyped IQN or an ACL the array's admin has yet to write, which the
    // CO should keep retrying rather than take as final.
    if (plan.spec.static_volume && failed.code() == StatusCode::kNotFound) {
      failed = Unavailable(failed.message());
    }
    return failed.WithContext("volume \"" + plan.volume_id + "\"");
  }
  AttachRecord record = std::move(*attached);
  Status staged = Fault("node.stage.after-attach");
  if (staged.ok()) staged = FinishStage(plan, record);
  // kubelet never calls NodeUnstageVolume after a final failure: whatever
  // this call attached (and the dm-crypt mapping it opened) must go now, or
  // it stays forever. (An uncertain failure keeps it: kubelet retries, or
  // unstages, later.)
  if (IsFinalFailure(staged)) RollBackAttach(record, staged);
  return staged;
}

// After a final failure of NodeStageVolume: detaches what the attach made
// (bridge, loop device, session, record) unless something still uses the
// device — an attachment that was already serving before this call.
// `record`: what the attach returned, still current under the lease.
void NodeService::RollBackAttach(const AttachRecord& record, const Status& why) {
  const std::string& volume_id = record.volume_id;
  auto table = options_.mounter->List();
  Status unused = table.ok() ? RequireNoUsers(volume_id, record, /*staging_path=*/"", *table) : table.status();
  if (!unused.ok()) {
    LogWarn("stage failed; keeping the attachment, it is in use",
            {{"volume_id", volume_id}, {"error", why.ToString()}, {"kept_because", unused.ToString()}});
    return;
  }
  if (Status closed = CloseMapping(record); !closed.ok()) {
    LogError(
        "stage failed and closing its dm-crypt mapping failed too; NodeUnstageVolume or blockctl cleanup "
        "must finish it",
        {{"volume_id", volume_id}, {"error", why.ToString()}, {"close_error", closed.ToString()}});
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
  // Our facts went into the attach record (plan.spec.annotations, written
  // by the attach itself, for a new attachment and a reused one alike)
  // before anything is formatted or mounted, so that a restarted plugin (or
  // blockctl) knows what this device is for even if we die in the middle.
  std::string device = record.device_path;
  uint64_t size = record.size_bytes;
  if (!plan.crypt_mapping.empty()) {
    BLOCKCSI_RETURN_IF_ERROR(OpenMapping(plan, record));
    device = VolumeDevice(*options_.host, record);
    size = 0;  // the LUKS2 header takes its share: measured when needed
  }
  if (plan.block) {
    LogInfo("staged raw block volume", {{"volume_id", plan.volume_id}, {"device", device}});
    return OkStatus();
  }
  return StageMount(plan, device, size);
}

Status NodeService::CheckExistingStaging(const StagePlan& plan, const MountEntry& entry, const AttachRecord* record,
                                         bool* already_staged) {
  auto something_else = [&] {
    return FailedPrecondition("volume " + plan.volume_id + ": staging path " + plan.staging_path +
                              " already has a mount of " + entry.source + " (" + entry.fs_type +
                              ") that is not this volume");
  };
  if (record == nullptr || record->device_path.empty()) return something_else();
  auto devnum = options_.host->DeviceNumber(VolumeDevice(*options_.host, *record));
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

Status NodeService::StageMount(const StagePlan& plan, const std::string& device, uint64_t size) {
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
    BLOCKCSI_RETURN_IF_ERROR(Fault("node.stage.after-mkfs").WithContext("volume " + plan.volume_id));
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
  BLOCKCSI_RETURN_IF_ERROR(options_.host->MakeDirectory(plan.staging_path, 0750));
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
  BLOCKCSI_RETURN_IF_ERROR(Fault("node.stage.after-mount").WithContext("volume " + plan.volume_id));
  LogInfo("staged volume", {{"volume_id", plan.volume_id},
                            {"device", device},
                            {"fs_type", plan.fs_type},
                            {"staging_path", plan.staging_path}});
  return OkStatus();
}

// ---- NodeUnstageVolume. Idempotent: a volume this node has no record of
// → OK, touching nothing (its unstage finished, or it was never staged
// here); a path its record does not name as its staging path → OK,
// touching nothing; a path another volume's record claims →
// FAILED_PRECONDITION. Refuses while any publish still uses the device;
// detaches only after the staging mount is gone, so a failed unmount never
// loses buffered writes.
Status NodeService::Unstage(const csi::v1::NodeUnstageVolumeRequest& req) {
  const std::string& volume_id = req.volume_id();
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(volume_id));
  BLOCKCSI_RETURN_IF_ERROR(ValidatePath(volume_id, "staging_target_path", req.staging_target_path()));
  std::string staging = TrimTrailingSlash(req.staging_target_path());
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, in_flight_.Acquire(volume_id, "NodeUnstageVolume"));
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease path_lease, HoldKey(volume_id, "path", staging, "NodeUnstageVolume"));

  BLOCKCSI_ASSIGN_OR_RETURN(NodeRecords records, ReadRecords(volume_id));
  if (!records.own) {
    LogInfo("unstage of a volume this node has no record of; nothing to do",
            {{"volume_id", volume_id}, {"staging_path", staging}});
    return OkStatus();
  }
  const AttachRecord* record = &*records.own;
  BLOCKCSI_RETURN_IF_ERROR(RefuseOtherVolumesPath(records.all, volume_id, "staging_target_path", staging));
  std::string recorded = StagedFacts::Of(*record).staging_path;
  if (!recorded.empty() && recorded != staging) {
    // Staged somewhere else: this path holds nothing of ours to undo.
    LogWarn("unstage at a path the volume is not staged at",
            {{"volume_id", volume_id}, {"requested", staging}, {"staged_at", recorded}});
    return OkStatus();
  }
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<MountEntry> table, options_.mounter->List());
  BLOCKCSI_RETURN_IF_ERROR(RequireNoUsers(volume_id, *record, staging, table));
  // No staging path recorded: the stage died before its attach finished,
  // so it mounted nothing, and whatever is mounted at `staging` is not ours.
  if (!recorded.empty()) {
    BLOCKCSI_RETURN_IF_ERROR(RefuseSymlinkedPath(*options_.host, volume_id, "staging_target_path", staging));
  }
  for (int layer = 0; !recorded.empty() && FindMountAt(table, staging) != nullptr; ++layer) {
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
  BLOCKCSI_RETURN_IF_ERROR(Fault("node.unstage.after-unmount").WithContext("volume " + volume_id));
  // The mapping goes after the filesystem on it and before the device
  // under it: closing flushes it, and a detach under an open mapping
  // would leave a dm device with nothing below.
  BLOCKCSI_RETURN_IF_ERROR(CloseMapping(*record));
  Status detached = options_.attacher->Detach(volume_id);
  if (!detached.ok()) return detached.WithContext("volume " + volume_id + ": detach");
  LogInfo("unstaged volume", {{"volume_id", volume_id}, {"staging_path", staging}});
  return OkStatus();
}

Status NodeService::RequireNoUsers(const std::string& volume_id, const AttachRecord& record,
                                   const std::string& staging_path, const std::vector<MountEntry>& table) {
  if (record.device_path.empty()) return OkStatus();
  // The attached device and, for an encrypted volume, the mapping on it.
  std::vector<std::string> users;
  for (const std::string& device : {record.device_path, VolumeDevice(*options_.host, record)}) {
    auto devnum = options_.host->DeviceNumber(device);
    for (const auto& e : table) {
      if (e.target == staging_path || std::find(users.begin(), users.end(), e.target) != users.end()) continue;
      if ((devnum.ok() && e.major_minor == *devnum) || IsBindOfDeviceNode(e, device) ||
          IsReadOnlyLayerOf(*options_.host, e, device)) {
        users.push_back(e.target);
      }
    }
  }
  if (users.empty()) return OkStatus();
  std::string list;
  for (const auto& u : users) list += (list.empty() ? "" : ", ") + u;
  return FailedPrecondition("volume " + volume_id + " is still in use (mounted at " + list +
                            "); unpublish it before unstaging");
}

}  // namespace blockcsi
