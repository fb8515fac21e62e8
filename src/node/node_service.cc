#include "node/node_service.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "common/fault_points.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/mkfs_mount_options.h"
#include "common/topology.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "node/fs_maintenance.h"
#include "node/node_claims.h"
#include "node/node_internal.h"
#include "node/volume_crypt.h"

namespace blockcsi {

using namespace node_internal;  // NOLINT(google-build-using-namespace): the node_*.cc files share these helpers

NodeService::NodeService(NodeServiceOptions options)
    : options_([&] {
        if (!options.parse_spec) options.parse_spec = ParseAttachSpec;
        return std::move(options);
      }()),
      initiator_iqn_(InitiatorIqnForNode(options_.node_id)) {}

Status NodeService::Fault(std::string_view point) const { return FaultPoint(point, options_.fault_hook); }

StatusOr<NodeService::NodeRecords> NodeService::ReadRecords(const std::string& volume_id) {
  NodeRecords out;
  BLOCKCSI_ASSIGN_OR_RETURN(out.all, options_.attacher->List());
  for (const AttachRecord& r : out.all) {
    if (r.volume_id == volume_id) out.own = r;
  }
  if (!out.own) {
    auto read = options_.attacher->Get(volume_id);
    if (read.ok()) {
      out.own = std::move(*read);
    } else if (read.status().code() != StatusCode::kNotFound) {
      return read.status();
    }
  }
  return out;
}

StatusOr<InFlightLease> NodeService::HoldKey(const std::string& volume_id, const std::string& kind,
                                             const std::string& what, std::string_view operation) {
  auto lease = in_flight_.Acquire(std::string(1, '\0') + kind + ":" + what, operation);
  if (lease.ok()) return lease;
  return Aborted("volume " + volume_id + ": a call on " + kind + " " + what + " is already in progress; " +
                 std::string(operation) + " refused, retry later");
}

Status NodeService::RecordPublish(const AttachRecord& record, const std::string& target, bool read_only) {
  if (IsPublishedAt(record, target)) return OkStatus();
  Status st = options_.attacher->Annotate(record.volume_id, PublishedAnnotation(target), read_only ? "ro" : "rw");
  return st.WithContext("volume " + record.volume_id + ": record the publish target " + target);
}

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
                                                 {"crypt_mapping", StagedFacts::Of(r).crypt_mapping},
                                                 {"staging_path", StagedFacts::Of(r).staging_path}});
  }
}

// ---- NodeGetVolumeStats. Reads only; no in-flight lease, so stats keep
// answering while a long stage or expand runs.
// The usage of the filesystem mounted at `path`, and what is wrong with it:
// gone, mounted from another device, or gone read-only after I/O errors.
Status NodeService::FilesystemStats(const AttachRecord& record, const std::string& path,
                                    csi::v1::NodeGetVolumeStatsResponse* response, std::vector<std::string>& problems) {
  const std::string device = VolumeDevice(*options_.host, record);
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
    const StagedFacts facts = StagedFacts::Of(record);
    const MountEntry* staging_mount = facts.staging_path.empty() ? nullptr : FindMountAt(table, facts.staging_path);
    if (!record.read_only && staging_mount != nullptr && !staging_mount->read_only()) {
      if (auto staged = options_.host->StatFs(facts.staging_path); staged.ok() && staged->read_only) {
        problems.push_back("the filesystem at " + facts.staging_path +
                           " went read-only after I/O errors: stop the pods using it, then NodeUnstage and "
                           "NodeStage again (the filesystem is checked and its journal replayed at stage)");
      }
    }
  }
  return OkStatus();
}

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
  const std::string device = VolumeDevice(*options_.host, *record);
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
    BLOCKCSI_RETURN_IF_ERROR(FilesystemStats(*record, path, response, problems));
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
  BLOCKCSI_RETURN_IF_ERROR(Fault("node.expand.after-rescan").WithContext("volume " + volume_id));
  int64_t required = req.capacity_range().required_bytes();
  if (required > 0 && size < static_cast<uint64_t>(required) && record->static_volume) {
    // A static LUN is grown by its array's admin, not by us: until then the
    // PVC asks for more than there is, and a retry cannot change that.
    return OutOfRange("volume " + volume_id + ": the static LUN is " + std::to_string(size) + " bytes, " +
                      std::to_string(required) + " were asked for; grow the LUN on the storage first");
  }
  if (required > 0 && size < static_cast<uint64_t>(required)) {
    // The controller grows the LUN first; seeing the old size means its
    // refresh has not reached us yet. Transient: the resizer retries.
    return Unavailable("volume " + volume_id + ": the device is " + std::to_string(size) + " bytes after rescan, " +
                       std::to_string(required) + " were asked for");
  }
  // An encrypted volume's mapping is grown first: the filesystem (or the
  // pod's raw device) sees the mapping's size, not the device's.
  // What the pod then has is the mapping, the device less its LUKS2 header
  // (the controller grew the device by the header too): that size is judged
  // and reported.
  if (const std::string mapping = StagedFacts::Of(*record).crypt_mapping; !mapping.empty()) {
    BLOCKCSI_RETURN_IF_ERROR(ResizeLuks(*options_.executor, volume_id, mapping));
    BLOCKCSI_ASSIGN_OR_RETURN(size, options_.host->BlockDeviceSize(CryptMappingPath(mapping)));
    if (required > 0 && size < static_cast<uint64_t>(required)) {
      return Unavailable("volume " + volume_id + ": the dm-crypt mapping is " + std::to_string(size) +
                         " bytes after resize, " + std::to_string(required) + " were asked for");
    }
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
        GrowFilesystem(*options_.executor, *options_.host, volume_id, fs, VolumeDevice(*options_.host, *record), path));
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
