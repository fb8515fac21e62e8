// LocalBackend: the target backend's one implementation — a Pool (durable
// metadata and images) plus an Exporter (tgt or LIO), with a reconcile loop
// that keeps the daemon's live configuration equal to the pool. Used
// in-process (--backend local) and served by the blockcsi-target agent.
//
// Order of every change: the pool record first, then the live export, so a
// crash or a daemon restart leaves the record as the truth and the next
// reconcile converges on it — except a revoke, which takes the ACL off
// before the record, so that no ACL ever lets in an initiator the record
// does not list. CHAP secrets live in this object's memory only.
//
// Thread-safe: operations on one volume, snapshot or name are serialised
// by per-key locks (a second caller waits, it is not refused); the
// reconcile pass excludes all operations while it reads and repairs.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/local/exporter.h"
#include "backend/local/pool.h"
#include "common/metrics.h"
#include "common/mutex.h"

namespace blockcsi {

struct LocalBackendOptions {
  std::vector<std::string> portals;
  std::string iqn_prefix = "iqn.2026-11.io.blockcsi";
  // 0: no background loop (ReconcileNow only).
  std::chrono::milliseconds reconcile_interval{std::chrono::seconds(30)};
  // The pool's thin-provisioning policy (PoolOptions::overcommit_ratio).
  double overcommit_ratio = 1.0;
  // The most volumes the pool holds (PoolOptions::max_volumes; 0: no limit).
  size_t max_volumes = 0;
  // Test-only: sees every fault point of the backend and its pool
  // (common/fault_points.h); an error fails the call at that step.
  FaultHook fault_hook;
};

inline constexpr uint64_t kTargetAllocationGranularity = uint64_t{1} << 20;

class KeyedLock;

class LocalBackend final : public VolumeBackend {
 public:
  // Opens the pool, reconciles once (a failure there is logged, not fatal:
  // the daemon may come up later) and starts the loop.
  static StatusOr<std::shared_ptr<LocalBackend>> Open(const std::string& pool_dir, std::shared_ptr<Exporter> exporter,
                                                      LocalBackendOptions options);
  ~LocalBackend() override;
  LocalBackend(const LocalBackend&) = delete;
  LocalBackend& operator=(const LocalBackend&) = delete;

  std::string Name() const override;
  uint64_t AllocationGranularity() const override { return kTargetAllocationGranularity; }
  std::vector<std::string> SupportedParameters() const override { return {}; }

  StatusOr<VolumeRecord> CreateVolume(const CreateVolumeSpec& spec) override;
  Status DeleteVolume(const std::string& volume_id) override;
  StatusOr<VolumeRecord> ExpandVolume(const std::string& volume_id, uint64_t new_size_bytes) override;
  StatusOr<VolumeRecord> GrantAccess(const std::string& volume_id, const AccessGrant& grant) override;
  Status RevokeAccess(const std::string& volume_id, const std::string& initiator_iqn) override;
  StatusOr<VolumeRecord> GetVolume(const std::string& volume_id) override;
  StatusOr<VolumeHealth> CheckVolume(const std::string& volume_id) override;
  std::vector<StatusOr<VolumeHealth>> CheckVolumes(const std::vector<std::string>& volume_ids) override;
  StatusOr<Page<VolumeRecord>> ListVolumes(const std::string& start_token, int max_entries) override;
  StatusOr<uint64_t> AvailableBytes(const CapacityQuery& query) override;
  StatusOr<SnapshotRecord> CreateSnapshot(const std::string& source_volume_id, const std::string& name) override;
  Status DeleteSnapshot(const std::string& snapshot_id) override;
  StatusOr<SnapshotRecord> GetSnapshot(const std::string& snapshot_id) override;
  StatusOr<Page<SnapshotRecord>> ListSnapshots(const std::string& source_volume_id, const std::string& start_token,
                                               int max_entries) override;
  Status SetWrappedDataKey(const std::string& id, const std::string& expected, const std::string& wrapped) override;
  Status Healthy() override;
  std::vector<HostFences> FenceNode(const std::string& node_id, const std::string& initiator_iqn) override;
  std::vector<HostFences> UnfenceNode(const std::string& node_id) override;
  std::vector<HostFences> ListFences() override;
  bool MayHoldVolume(const std::string& volume_id) const override;

  // One reconcile pass now; returns the repairs made (each is also logged).
  StatusOr<std::vector<std::string>> ReconcileNow();
  // Completed reconcile passes (successful or not), for tests and metrics.
  uint64_t reconcile_passes() const;
  // Sets the pool's gauges (capacity, free, provisioned, volumes) at a scrape.
  void CollectPoolMetrics(MetricsRegistry& registry);

 private:
  LocalBackend(std::unique_ptr<Pool> pool, std::shared_ptr<Exporter> exporter, LocalBackendOptions options);
  Status Fault(std::string_view point) const;
  static Status NotOurVolume(const std::string& id);
  // `record` with the portals this backend serves on now: the pool does not
  // store portals (they are options.portals), so a changed portal list
  // reaches every volume's next answer.
  VolumeRecord WithCurrentPortals(VolumeRecord record) const;
  // `record` with what its image takes on disk now (GetVolume and
  // ListVolumes: the figures an operator reads beside the size).
  VolumeRecord WithAllocation(VolumeRecord record) const;
  DesiredExport DesiredFor(const VolumeRecord& record) const;
  // Applies the record's export and logs the repairs.
  Status ApplyExport(const VolumeRecord& record);
  // After a final failure: remove what CreateVolume / GrantAccess made
  // (export and pool files / the grant, its ACL and secrets). Best effort,
  // logged; the reconcile loop repairs what an undo could not.
  void UndoCreate(const VolumeRecord& record, const Status& why);
  void UndoGrant(VolumeRecord record, const std::string& initiator_iqn, const Status& why);
  // Takes `initiator_iqns` out of the volume's ACL, closes their sessions,
  // then drops their grants from the record. The caller holds the volume's lock.
  Status RevokeLocked(const VolumeRecord& record, const std::set<std::string>& initiator_iqns);
  void LoopMain();

  const LocalBackendOptions options_;
  std::unique_ptr<Pool> pool_;
  std::shared_ptr<Exporter> exporter_;
  std::unique_ptr<KeyedLock> locks_;
  // Operations hold it shared; a reconcile pass holds it exclusively.
  SharedMutex reconcile_mu_;

  // Serialises fencing and unfencing (rare; a fence walks every volume).
  Mutex fence_mu_;

  mutable Mutex chap_mu_;
  // volume id → initiator IQN → credentials. Memory only, by design.
  std::map<std::string, std::map<std::string, ChapCredentials>> chap_ GUARDED_BY(chap_mu_);

  mutable Mutex loop_mu_;
  CondVar loop_cv_;
  bool stopping_ GUARDED_BY(loop_mu_) = false;
  uint64_t passes_ GUARDED_BY(loop_mu_) = 0;
  std::thread loop_;
};

}  // namespace blockcsi
