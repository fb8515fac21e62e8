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

// NodePublishVolume and NodeUnpublishVolume, with the read-only loop layer
// of a read-only raw block publish.
namespace blockcsi {

using namespace node_internal;  // NOLINT(google-build-using-namespace): the node_*.cc files share these helpers

// ---- NodePublishVolume. Idempotent: the same bind with the same
// read-only setting → OK; with the other setting → ALREADY_EXISTS.
namespace {

// A mount already at the target of a publish: OK when it is this volume
// (`same`) with the same read-only setting, else the error that says why not.
Status CheckExistingPublish(const std::string& volume_id, const std::string& target, const MountEntry& existing,
                            bool same, bool read_only) {
  if (!same) {
    return FailedPrecondition("volume " + volume_id + ": target path " + target + " already has another mount (" +
                              existing.source + ")");
  }
  if (existing.read_only() != read_only) {
    return AlreadyExists("volume " + volume_id + " is already published at " + target + " " +
                         (existing.read_only() ? "read-only" : "read-write"));
  }
  return OkStatus();
}

// The request's own checks, before any lock: the fields the spec requires
// come first (INVALID_ARGUMENT), whatever else the request lacks.
Status ValidatePublishRequest(const csi::v1::NodePublishVolumeRequest& req) {
  const std::string& volume_id = req.volume_id();
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(volume_id));
  BLOCKCSI_RETURN_IF_ERROR(ValidatePath(volume_id, "target_path", req.target_path()));
  if (!req.has_volume_capability()) {
    return InvalidArgument("volume " + volume_id + ": volume_capability is required");
  }
  const VolumeCapability& cap = req.volume_capability();
  BLOCKCSI_RETURN_IF_ERROR(ValidateAccessTypeAndMode(cap, volume_id));
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
  return OkStatus();
}

// The target must be no other volume's path, nor this volume's staging
// path, nor lead through a link: the record says where this volume is
// mounted, and the mount must be exactly there.
Status RefuseForeignTarget(const std::vector<AttachRecord>& records, const Host& host, const std::string& volume_id,
                           const std::string& target, const std::string& staging) {
  BLOCKCSI_RETURN_IF_ERROR(RefuseOtherVolumesPath(records, volume_id, "target_path", target));
  if (PathWithin(target, staging) || PathWithin(staging, target)) {
    return FailedPrecondition("volume " + volume_id + ": target_path " + target + " overlaps its staging path " +
                              staging);
  }
  BLOCKCSI_RETURN_IF_ERROR(RefuseSymlinkedPath(host, volume_id, "target_path", target));
  BLOCKCSI_RETURN_IF_ERROR(RefuseSymlinkedPath(host, volume_id, "staging_target_path", staging));
  return OkStatus();
}

}  // namespace

// A bind mount of the staged filesystem at `target`; false when it is
// already there as asked.
StatusOr<bool> NodeService::PublishFilesystem(const std::string& volume_id, const AttachRecord& record,
                                              const std::string& target, bool read_only,
                                              const std::vector<MountEntry>& table, const MountEntry* existing) {
  const std::string staging = StagedFacts::Of(record).staging_path;
  const MountEntry* staged = FindMountAt(table, staging);
  if (staged == nullptr) {
    return FailedPrecondition("volume " + volume_id + ": nothing is mounted at the staging path " + staging +
                              "; NodeStageVolume first");
  }
  if (existing != nullptr) {
    bool same = existing->major_minor == staged->major_minor && existing->root == staged->root;
    BLOCKCSI_RETURN_IF_ERROR(CheckExistingPublish(volume_id, target, *existing, same, read_only));
    return false;
  }
  // Recorded before the directory or the mount exists, so that whatever
  // this call leaves at the target, the record says it is this volume's.
  BLOCKCSI_RETURN_IF_ERROR(RecordPublish(record, target, read_only));
  BLOCKCSI_RETURN_IF_ERROR(options_.host->MakeDirectory(target, 0750));
  Status st = options_.mounter->BindMount(staging, target, read_only);
  if (!st.ok()) return st.WithContext("volume " + volume_id);
  return true;
}

// A bind of the volume's device node (read-only through a read-only layer
// when the attachment is writable) at `target`; false when it is already
// there as asked.
StatusOr<bool> NodeService::PublishBlock(const std::string& volume_id, const AttachRecord& record,
                                         const std::string& target, bool read_only, const MountEntry* existing) {
  const std::string device = VolumeDevice(*options_.host, record);
  if (options_.host->Kind(device) != PathKind::kBlockDevice) {
    return FailedPrecondition("volume " + volume_id + ": device " + device + " is gone; restage the volume");
  }
  if (existing != nullptr) {
    bool same = IsBindOfDeviceNode(*existing, device) || IsReadOnlyLayerOf(*options_.host, *existing, device);
    BLOCKCSI_RETURN_IF_ERROR(CheckExistingPublish(volume_id, target, *existing, same, read_only));
    return false;
  }
  BLOCKCSI_RETURN_IF_ERROR(RecordPublish(record, target, read_only));  // before anything exists, as above
  BLOCKCSI_RETURN_IF_ERROR(options_.host->MakeFile(target));
  std::string source = device;
  if (read_only && !record.read_only) {
    BLOCKCSI_ASSIGN_OR_RETURN(source, MakeReadOnlyLayer(volume_id, device));
  }
  Status st = options_.mounter->BindMount(source, target, read_only);
  if (!st.ok()) {
    if (source != device) (void)RemoveReadOnlyLayer(volume_id, source);
    return st.WithContext("volume " + volume_id);
  }
  return true;
}

Status NodeService::Publish(const csi::v1::NodePublishVolumeRequest& req) {
  const std::string& volume_id = req.volume_id();
  BLOCKCSI_RETURN_IF_ERROR(ValidatePublishRequest(req));
  const VolumeCapability& cap = req.volume_capability();
  std::string staging = TrimTrailingSlash(req.staging_target_path());
  std::string target = TrimTrailingSlash(req.target_path());
  bool read_only = req.readonly() || IsReaderOnly(cap.access_mode().mode());

  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, in_flight_.Acquire(volume_id, "NodePublishVolume"));
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease path_lease, HoldKey(volume_id, "path", target, "NodePublishVolume"));
  BLOCKCSI_ASSIGN_OR_RETURN(NodeRecords records, ReadRecords(volume_id));
  if (!records.own) {
    return FailedPrecondition("volume " + volume_id + " is not staged on this node; NodeStageVolume first");
  }
  const AttachRecord* record = &*records.own;
  StagedFacts staged = StagedFacts::Of(*record);
  const std::string& recorded = staged.staging_path;
  if (recorded != staging) {
    return FailedPrecondition("volume " + volume_id + " is not staged at " + staging +
                              (recorded.empty() ? "" : " (it is staged at " + recorded + ")"));
  }
  BLOCKCSI_RETURN_IF_ERROR(RefuseForeignTarget(records.all, *options_.host, volume_id, target, staging));
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
                (staged_block ? IsBindOfDeviceNode(*existing, VolumeDevice(*options_.host, *record)) ||
                                    IsReadOnlyLayerOf(*options_.host, *existing, VolumeDevice(*options_.host, *record))
                              : staged_mount != nullptr && existing->major_minor == staged_mount->major_minor);
    if (ours) return AlreadyExists("volume " + volume_id + " is already published at " + target + " and " + mismatch);
    // A filesystem type that differs but fits what is staged was accepted
    // before; keep serving it (the bind mount does not care).
    if (staged_block != cap.has_block()) return FailedPrecondition("volume " + volume_id + " " + mismatch);
  }

  const bool was_recorded = IsPublishedAt(*record, target);
  StatusOr<bool> publish = staged_block ? PublishBlock(volume_id, *record, target, read_only, existing)
                                        : PublishFilesystem(volume_id, *record, target, read_only, table, existing);
  if (!publish.ok()) {
    // Nothing is mounted after a failed bind, and after a final failure
    // kubelet does not unpublish: the claim this call recorded goes now.
    if (!was_recorded && IsFinalFailure(publish.status())) {
      if (Status forgot = options_.attacher->Annotate(volume_id, PublishedAnnotation(target), ""); !forgot.ok()) {
        LogWarn("publish failed and forgetting its target failed too",
                {{"volume_id", volume_id}, {"target_path", target}, {"error", forgot.ToString()}});
      }
    }
    return publish.status();
  }
  const bool published = *publish;
  // Already there, as asked: recorded by this publish's first run, or by a
  // plugin from before publish targets were recorded, which it adopts here.
  if (!published) return RecordPublish(*record, target, read_only);
  LogInfo("published volume", {{"volume_id", volume_id}, {"target_path", target}, {"readonly", read_only ? "1" : "0"}});
  return OkStatus();
}

// ---- NodeUnpublishVolume. Idempotent: a volume this node has no record
// of, or a target its record does not name and that holds no mount of its
// device → OK, touching nothing (unpublished already, or never ours); a
// target another volume's record claims → FAILED_PRECONDITION.
Status NodeService::Unpublish(const csi::v1::NodeUnpublishVolumeRequest& req) {
  const std::string& volume_id = req.volume_id();
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(volume_id));
  BLOCKCSI_RETURN_IF_ERROR(ValidatePath(volume_id, "target_path", req.target_path()));
  std::string target = TrimTrailingSlash(req.target_path());
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, in_flight_.Acquire(volume_id, "NodeUnpublishVolume"));
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease path_lease, HoldKey(volume_id, "path", target, "NodeUnpublishVolume"));
  BLOCKCSI_ASSIGN_OR_RETURN(NodeRecords records, ReadRecords(volume_id));
  if (!records.own) {
    LogInfo("unpublish of a volume this node has no record of; nothing to do",
            {{"volume_id", volume_id}, {"target_path", target}});
    return OkStatus();
  }
  const AttachRecord* record = &*records.own;
  BLOCKCSI_RETURN_IF_ERROR(RefuseOtherVolumesPath(records.all, volume_id, "target_path", target));
  const std::string staging = StagedFacts::Of(*record).staging_path;
  if (PathWithin(target, staging)) {
    return FailedPrecondition("volume " + volume_id + ": target_path " + target + " is inside its staging path " +
                              staging + "; NodeUnstageVolume undoes that");
  }
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<MountEntry> table, options_.mounter->List());
  const bool recorded = IsPublishedAt(*record, target);
  if (!recorded && !OnlyMountsOfVolume(*record, target, table)) {
    LogWarn("unpublish at a path the volume is not published at; left alone",
            {{"volume_id", volume_id}, {"target_path", target}});
    return OkStatus();
  }
  BLOCKCSI_RETURN_IF_ERROR(RefuseSymlinkedPath(*options_.host, volume_id, "target_path", target));
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
  // Erased last: a crash before this leaves a record naming a target with
  // nothing left to undo, which the retry finishes.
  if (recorded) {
    Status erased = options_.attacher->Annotate(volume_id, PublishedAnnotation(target), "");
    if (!erased.ok()) return erased.WithContext("volume " + volume_id + ": forget the publish target " + target);
  }
  LogInfo("unpublished volume", {{"volume_id", volume_id}, {"target_path", target}});
  return OkStatus();
}

// A target the record does not name is this volume's only when there is a
// mount there and every one is of the volume's device (a publish by a
// plugin from before publish targets were recorded, or one whose record
// write a crash lost): the kernel's table says so, not the caller.
bool NodeService::OnlyMountsOfVolume(const AttachRecord& record, const std::string& target,
                                     const std::vector<MountEntry>& table) const {
  const std::string device = VolumeDevice(*options_.host, record);
  if (device.empty()) return false;
  auto devnum = options_.host->DeviceNumber(device);
  bool any = false;
  for (const MountEntry& e : table) {
    if (e.target != target) continue;
    bool ours = (devnum.ok() && e.major_minor == *devnum) || IsBindOfDeviceNode(e, device) ||
                IsReadOnlyLayerOf(*options_.host, e, device);
    if (!ours) return false;
    any = true;
  }
  return any;
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

}  // namespace blockcsi
