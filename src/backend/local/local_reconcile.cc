#include "backend/local/local_backend.h"

#include <algorithm>
#include <chrono>

#include "backend/volume_id.h"
#include "common/fault_points.h"
#include "common/keyed_lock.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "contract/chap_rules.h"
#include "contract/iscsi_names.h"

// The local backend's reconcile loop and pool metrics: re-creating the
// exports a restarted target daemon lost.
namespace blockcsi {

namespace {

// A daemon that lost every target while the pool has volumes was restarted
// (tgtd keeps no state of its own): a pass that had to create the target
// of every exported volume is how the agent sees a restart.
void RecordReconcile(const Status& status, const std::vector<std::string>& repairs, size_t desired_count) {
  static MetricFamily& runs =
      Metrics().Counter("blockcsi_target_reconcile_runs_total",
                        "Passes comparing the target daemon with the pool, by outcome", {"result"});
  static MetricFamily& repaired = Metrics().Counter(
      "blockcsi_target_reconcile_repairs_total", "Changes a reconcile pass made to bring the daemon back to the pool");
  static MetricFamily& restarts = Metrics().Counter(
      "blockcsi_target_daemon_restarts_seen_total",
      "Reconcile passes that found none of the pool's targets in the daemon (it restarted) and re-created them");
  runs.Add({std::string(StatusCodeName(status.code()))});
  repaired.Add({}, static_cast<double>(repairs.size()));
  size_t created = 0;
  for (const auto& line : repairs) {
    if (line.rfind("created target ", 0) == 0) ++created;
  }
  // Added even when 0, so that the series exists (a dashboard shows 0, not "no data").
  restarts.Add({}, desired_count > 0 && created == desired_count ? 1 : 0);
}

}  // namespace

void LocalBackend::CollectPoolMetrics(MetricsRegistry& registry) {
  auto& capacity = registry.Gauge("blockcsi_target_pool_capacity_bytes", "Size of the pool's file system", {"pool"});
  auto& free_bytes =
      registry.Gauge("blockcsi_target_pool_free_bytes", "Free space of the pool's file system", {"pool"});
  auto& provisioned =
      registry.Gauge("blockcsi_target_pool_provisioned_bytes",
                     "Sum of the sizes of the pool's volumes (thin: may exceed what they use)", {"pool"});
  auto& allocated = registry.Gauge(
      "blockcsi_target_pool_allocated_bytes",
      "What the pool's volume and snapshot images really take on disk (st_blocks of the sparse files); a trim "
      "from the nodes lowers it",
      {"pool"});
  auto& available =
      registry.Gauge("blockcsi_target_pool_available_bytes",
                     "The largest new volume the overcommit policy allows now (what GetCapacity reports)", {"pool"});
  auto& volume_size = registry.Gauge("blockcsi_target_volume_provisioned_bytes", "A volume's size", {"pool", "volume"});
  auto& volume_allocated = registry.Gauge("blockcsi_target_volume_allocated_bytes",
                                          "What a volume's image really takes on disk", {"pool", "volume"});
  auto& volumes = registry.Gauge("blockcsi_target_pool_volumes", "Volumes in the pool", {"pool"});
  const std::string& dir = pool_->dir();
  if (auto fs = pool_->FileSystemSpace(); fs.ok()) {
    capacity.Set({dir}, static_cast<double>(fs->total_bytes));
    free_bytes.Set({dir}, static_cast<double>(fs->available_bytes));
  }
  if (auto room = pool_->AvailableBytes(); room.ok()) available.Set({dir}, static_cast<double>(*room));
  // Per volume: the series of deleted volumes go (this pool's only).
  volume_size.ClearWhereFirstLabelIs(dir);
  volume_allocated.ClearWhereFirstLabelIs(dir);
  double sum = 0;
  auto list = pool_->ListVolumes();
  for (const auto& record : list) {
    sum += static_cast<double>(record.size_bytes);
    volume_size.Set({dir, record.id}, static_cast<double>(record.size_bytes));
    if (auto bytes = pool_->ImageAllocatedBytes(record.id); bytes.ok()) {
      volume_allocated.Set({dir, record.id}, static_cast<double>(*bytes));
    }
  }
  provisioned.Set({dir}, sum);
  allocated.Set({dir}, static_cast<double>(pool_->AllocatedBytes()));
  volumes.Set({dir}, static_cast<double>(list.size()));
}

StatusOr<std::vector<std::string>> LocalBackend::ReconcileNow() {
  std::vector<std::string> repairs;
  size_t desired_count = 0;
  Status status;
  {
    WriterMutexLock exclusive(reconcile_mu_);
    std::vector<DesiredExport> desired;
    for (const auto& record : pool_->ListVolumes()) desired.push_back(DesiredFor(record));
    desired_count = desired.size();
    auto result = exporter_->Reconcile(desired, options_.iqn_prefix);
    if (result.ok()) {
      repairs = std::move(result).value();
    } else {
      status = result.status();
    }
  }
  for (const auto& line : repairs) LogInfo("reconcile: repaired", {{"repair", line}});
  RecordReconcile(status, repairs, desired_count);
  {
    MutexLock lock(loop_mu_);
    ++passes_;
  }
  loop_cv_.SignalAll();
  if (!status.ok()) return status;
  return repairs;
}

uint64_t LocalBackend::reconcile_passes() const {
  MutexLock lock(loop_mu_);
  return passes_;
}

void LocalBackend::LoopMain() {
  while (true) {
    {
      MutexLock lock(loop_mu_);
      // A pass's own SignalAll wakes this wait too: keep the deadline.
      const auto deadline = std::chrono::steady_clock::now() + options_.reconcile_interval;
      while (!stopping_ && loop_cv_.WaitUntil(loop_mu_, deadline)) {
      }
      if (stopping_) return;
    }
    auto result = ReconcileNow();
    if (!result.ok()) LogWarn("reconcile failed", {{"error", result.status().ToString()}});
  }
}

StatusOr<VolumeHealth> LocalBackend::CheckVolume(const std::string& volume_id) {
  return CheckVolumes({volume_id}).front();
}

std::vector<StatusOr<VolumeHealth>> LocalBackend::CheckVolumes(const std::vector<std::string>& volume_ids) {
  std::vector<StatusOr<VolumeHealth>> out(volume_ids.size(), VolumeHealth{});
  // Every volume of the batch stays locked until its export is checked, so
  // no delete or grant slips in between reading the record and applying it.
  // Taken in id order; the only other path holding two volume locks (a
  // clone: its source, then its new id) takes the second on an id that no
  // list can hold yet, so this cannot deadlock with it.
  std::vector<std::string> ids;
  for (const auto& id : volume_ids) {
    if (IsVolumeId(id)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());  // a key's lock is not re-entrant
  ReaderMutexLock op(reconcile_mu_);
  std::vector<KeyedLock::Guard> held;
  for (const auto& id : ids) held.push_back(locks_->Lock(id));

  std::vector<DesiredExport> desired;
  std::vector<size_t> slot;  // desired[k] is the export of volume_ids[slot[k]]
  for (size_t i = 0; i < volume_ids.size(); ++i) {
    const std::string& id = volume_ids[i];
    if (!IsVolumeId(id)) {
      out[i] = NotOurVolume(id);
      continue;
    }
    auto record = pool_->GetVolume(id);
    if (!record) {
      out[i] = NotFound("volume " + id + " not found");
      continue;
    }
    auto image_size = pool_->ImageSize(id);
    if (!image_size.ok() || *image_size < record->size_bytes) {
      out[i] = VolumeHealth{true, "image of volume " + id + " is missing or short"};
      continue;
    }
    desired.push_back(DesiredFor(*record));
    slot.push_back(i);
  }
  // One read of the daemon's state for the whole batch (see Exporter::ApplyEach).
  auto applied = exporter_->ApplyEach(desired);
  for (size_t k = 0; k < slot.size(); ++k) {
    const std::string& id = volume_ids[slot[k]];
    const auto& repairs = applied[k];
    if (!repairs.ok()) {
      out[slot[k]] = VolumeHealth{true, "export of volume " + id + ": " + repairs.status().message()};
      continue;
    }
    for (const auto& line : *repairs) LogInfo("check: repaired", {{"volume", id}, {"repair", line}});
    VolumeHealth health{false, repairs->empty() ? "" : "export repaired: " + repairs->front()};
    for (const auto& line : *repairs) {
      if (line.rfind("withheld", 0) == 0) {
        health = VolumeHealth{true, line};
        break;
      }
    }
    out[slot[k]] = health;
  }
  return out;
}

}  // namespace blockcsi
