// CSI Node service: stage/unstage (attach, verify, format only a blank
// device, mount), publish/unpublish (bind mounts), expand, stats and volume
// condition. All durable state lives in the attach record (through
// VolumeAttacher::Annotate) and in the kernel's mount table, so a restarted
// plugin keeps serving what it staged and a retried RPC converges.
// Thread-safe: RPCs on different volumes run in parallel; a second RPC on a
// volume that has one in flight gets ABORTED. That in-flight guard is the
// volume's one lock on this node: the attacher takes none of its own and
// relies on it (volume_attacher.h). NodeGetVolumeStats only reads and takes
// no lease.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "attach/attach_spec.h"
#include "attach/volume_attacher.h"
#include "common/block_probe.h"
#include "common/executor.h"
#include "common/fault_points.h"
#include "common/host.h"
#include "common/inflight.h"
#include "common/mounter.h"
#include "common/mutex.h"
#include "csi.grpc.pb.h"
#include "node/staged_facts.h"

namespace blockcsi {

// NodeGetInfo's accessible_topology segment: volumes of a node-local pool
// (or a cluster that pins volumes to nodes) are accessible from this node.
inline constexpr char kTopologyNodeKey[] = "topology.blockcsi.io/node";

struct NodeServiceOptions {
  std::string node_id;
  // The zone this node is in (--zone; common/topology.h): NodeGetInfo adds
  // it to the node's segment so that volumes of that zone's storage hosts
  // are placed where this node can reach them. Empty: no zone.
  std::string zone;
  int64_t max_volumes_per_node = 0;
  std::shared_ptr<VolumeAttacher> attacher;
  std::shared_ptr<Mounter> mounter;
  std::shared_ptr<BlockProbe> probe;
  std::shared_ptr<Executor> executor;
  std::shared_ptr<Host> host;
  // Parses publish_context + secrets; ParseAttachSpec unless a test swaps it.
  std::function<StatusOr<AttachSpec>(const std::string& volume_id, const std::map<std::string, std::string>& context,
                                     const std::map<std::string, std::string>& secrets,
                                     const std::string& initiator_iqn)>
      parse_spec;
  // The smallest device `fs_type`'s mkfs formats (0: no minimum); empty:
  // not checked. A blank device below it is refused before mkfs runs.
  std::function<uint64_t(const std::string& fs_type)> fs_minimum_bytes;
  // Test-only: sees the node's fault points (common/fault_points.h:
  // node.stage.after-attach, ...); an error fails the call at that step.
  FaultHook fault_hook;
};

class NodeService final : public csi::v1::Node::Service {
 public:
  explicit NodeService(NodeServiceOptions options);
  NodeService(const NodeService&) = delete;
  NodeService& operator=(const NodeService&) = delete;

  grpc::Status NodeStageVolume(grpc::ServerContext* context, const csi::v1::NodeStageVolumeRequest* request,
                               csi::v1::NodeStageVolumeResponse* response) override;
  grpc::Status NodeUnstageVolume(grpc::ServerContext* context, const csi::v1::NodeUnstageVolumeRequest* request,
                                 csi::v1::NodeUnstageVolumeResponse* response) override;
  grpc::Status NodePublishVolume(grpc::ServerContext* context, const csi::v1::NodePublishVolumeRequest* request,
                                 csi::v1::NodePublishVolumeResponse* response) override;
  grpc::Status NodeUnpublishVolume(grpc::ServerContext* context, const csi::v1::NodeUnpublishVolumeRequest* request,
                                   csi::v1::NodeUnpublishVolumeResponse* response) override;
  grpc::Status NodeGetVolumeStats(grpc::ServerContext* context, const csi::v1::NodeGetVolumeStatsRequest* request,
                                  csi::v1::NodeGetVolumeStatsResponse* response) override;
  grpc::Status NodeExpandVolume(grpc::ServerContext* context, const csi::v1::NodeExpandVolumeRequest* request,
                                csi::v1::NodeExpandVolumeResponse* response) override;
  grpc::Status NodeGetCapabilities(grpc::ServerContext* context, const csi::v1::NodeGetCapabilitiesRequest* request,
                                   csi::v1::NodeGetCapabilitiesResponse* response) override;
  grpc::Status NodeGetInfo(grpc::ServerContext* context, const csi::v1::NodeGetInfoRequest* request,
                           csi::v1::NodeGetInfoResponse* response) override;

  // The same operations with our Status, for tests and in-process callers.
  Status Stage(const csi::v1::NodeStageVolumeRequest& request);
  Status Unstage(const csi::v1::NodeUnstageVolumeRequest& request);
  Status Publish(const csi::v1::NodePublishVolumeRequest& request);
  Status Unpublish(const csi::v1::NodeUnpublishVolumeRequest& request);
  Status Stats(const csi::v1::NodeGetVolumeStatsRequest& request, csi::v1::NodeGetVolumeStatsResponse* response);
  StatusOr<bool> PublishFilesystem(const std::string& volume_id, const AttachRecord& record, const std::string& target,
                                   bool read_only, const std::vector<MountEntry>& table, const MountEntry* existing);
  StatusOr<bool> PublishBlock(const std::string& volume_id, const AttachRecord& record, const std::string& target,
                              bool read_only, const MountEntry* existing);
  Status FilesystemStats(const AttachRecord& record, const std::string& path,
                         csi::v1::NodeGetVolumeStatsResponse* response, std::vector<std::string>& problems);
  Status Expand(const csi::v1::NodeExpandVolumeRequest& request, csi::v1::NodeExpandVolumeResponse* response);

  // Logs what earlier runs left staged (kept serving as is). Called once at start.
  void LogAdoptedVolumes();

  // ---- fencing (node_fence.cc) ----
  // While a fence id is set, NodeStage is FAILED_PRECONDITION naming the
  // fence (the node must not attach anything until it is unfenced). "":
  // not fenced.
  void SetFenced(const std::string& fence_id);
  std::string Fenced() const;
  // Lets go of everything this node holds, without kubelet: for each volume
  // with an attach record, every mount of it is unmounted (lazily when a
  // clean unmount fails: those targets go to *lazily_unmounted), then it is
  // detached (session or bridge, and the record). OK once nothing is left;
  // a volume with an RPC in flight is ABORTED (retry).
  Status ReleaseAll(std::vector<std::string>* lazily_unmounted);

  // ---- trimming (node_trim.cc; the mechanism is node/volume_trim.h) ----
  // FITRIM of one staged filesystem volume under the volume's in-flight
  // lease, taken without waiting: ABORTED at once when a stage, unstage or
  // other call on it is in flight (and a stage or unstage arriving during
  // the trim is ABORTED in turn, which kubelet retries).
  StatusOr<uint64_t> Trim(const std::string& volume_id);
  struct TrimRound {
    size_t trimmed = 0;  // volumes trimmed
    size_t busy = 0;     // left for the next round: a call on them was in flight
    size_t skipped = 0;  // never trimmed (TrimVerdict::kSkipped: encrypted)
    size_t failed = 0;
    uint64_t bytes = 0;  // trimmed, as the kernel reported
  };
  // One round of the periodic trim: every trimmable volume of this node,
  // one at a time; a busy volume is skipped until the next round. Each
  // outcome is logged and counted (blockcsi_node_fstrim_total by result,
  // blockcsi_node_fstrim_bytes_total).
  TrimRound TrimStagedVolumes();

 private:
  struct StagePlan;
  // Every attach record in one read, with this volume's own (none when the
  // node has no record of it). A record List could not read is read again
  // alone, to say what is wrong with it.
  struct NodeRecords {
    std::vector<AttachRecord> all;
    std::optional<AttachRecord> own;
  };
  StatusOr<NodeRecords> ReadRecords(const std::string& volume_id);
  Status PlanStage(const csi::v1::NodeStageVolumeRequest& request, StagePlan* plan);
  // Everything of NodeStageVolume after the attach: record our facts, then
  // (filesystem) probe, format a blank device, check, mount.
  Status FinishStage(const StagePlan& plan, const AttachRecord& record);
  void RollBackAttach(const AttachRecord& record, const Status& why);
  Status PlanEncryption(const csi::v1::NodeStageVolumeRequest& request, StagePlan& plan);
  // `device`: what to format and mount (the attached device, or the
  // volume's dm-crypt mapping); `size`: its size when known, else 0.
  Status StageMount(const StagePlan& plan, const std::string& device, uint64_t size);
  // ---- the dm-crypt layer of encrypted volumes (node_crypt.cc)
  // Opens the volume's mapping over the attached device, after a
  // luksFormat when the device is blank (node_crypt.cc says which devices
  // are refused).
  Status OpenMapping(const StagePlan& plan, const AttachRecord& record);
  // Closes the mapping the record names, if it is open; OK for a plain
  // volume. `deferred`: see CloseLuks.
  Status CloseMapping(const AttachRecord& record, bool deferred = false);
  Status CheckExistingStaging(const StagePlan& plan, const MountEntry& entry, const AttachRecord* record,
                              bool* already_staged);
  Status RequireNoUsers(const std::string& volume_id, const AttachRecord& record, const std::string& staging_path,
                        const std::vector<MountEntry>& table);
  // Read-only raw block publishes of a writable attachment go through a
  // read-only loop device on top of the volume's device.
  StatusOr<std::string> MakeReadOnlyLayer(const std::string& volume_id, const std::string& device);
  Status RemoveReadOnlyLayer(const std::string& volume_id, const std::string& loop);
  Status Fault(std::string_view point) const;
  // Holds `key` (a path or a LUN) in the volumes' in-flight guard, so that
  // two calls on one path or one LUN never interleave, whatever volume ids
  // they name; ABORTED naming `what` and `volume_id` when one is in flight.
  // Keys start with a NUL, which no volume id contains (ValidateVolumeId).
  StatusOr<InFlightLease> HoldKey(const std::string& volume_id, const std::string& kind, const std::string& what,
                                  std::string_view operation);
  // Adds `target` to the volume's publish targets in its attach record (one
  // durable write) unless the record has it already.
  Status RecordPublish(const AttachRecord& record, const std::string& target, bool read_only);
  bool OnlyMountsOfVolume(const AttachRecord& record, const std::string& target,
                          const std::vector<MountEntry>& table) const;

  Status ReleaseOne(const AttachRecord& record, std::vector<std::string>* lazily_unmounted);

  const NodeServiceOptions options_;
  const std::string initiator_iqn_;
  InFlightGuard in_flight_;
  mutable Mutex fence_mu_;
  std::string fence_id_ GUARDED_BY(fence_mu_);
};

}  // namespace blockcsi
