#include <string>

#include "common/logging.h"
#include "common/metrics.h"
#include "node/node_service.h"
#include "node/volume_trim.h"

// Giving a staged volume's free space back to the storage: the node
// plugin's periodic trim and its one-volume call.
namespace blockcsi {

StatusOr<uint64_t> NodeService::Trim(const std::string& volume_id) {
  auto lease = in_flight_.Acquire(volume_id, "trim");
  if (!lease.ok()) return lease.status();
  // Read under the lease: a stage or unstage that finished just before it
  // was taken has already changed the record and the mounts.
  BLOCKCSI_ASSIGN_OR_RETURN(AttachRecord record, options_.attacher->Get(volume_id));
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<MountEntry> table, options_.mounter->List());
  return TrimVolume(*options_.host, record, table);
}

NodeService::TrimRound NodeService::TrimStagedVolumes() {
  static MetricFamily& runs = Metrics().Counter(
      "blockcsi_node_fstrim_total",
      "Volumes the periodic trim looked at, by result: trimmed, busy (left for the next round), skipped "
      "(encrypted: its trim cannot reach the storage), failed",
      {"result"});
  static MetricFamily& trimmed_bytes = Metrics().Counter(
      "blockcsi_node_fstrim_bytes_total", "Bytes the periodic trim gave back, as the kernel reported them (FITRIM)");
  TrimRound round;
  auto records = options_.attacher->List();
  if (!records.ok()) {
    LogWarn("periodic trim: cannot list the attach records", {{"error", records.status().ToString()}});
    ++round.failed;
    runs.Add({"failed"});
    return round;
  }
  for (const AttachRecord& record : *records) {
    TrimVerdict verdict = TrimVerdictFor(record);
    if (verdict.kind == TrimVerdict::kNotOurs) continue;  // raw block, read-only, not staged: never ours to trim
    if (verdict.kind == TrimVerdict::kSkipped) {
      ++round.skipped;
      runs.Add({"skipped"});
      LogInfo("periodic trim: volume skipped", {{"volume_id", record.volume_id}, {"reason", verdict.why}});
      continue;
    }
    auto trimmed = Trim(record.volume_id);
    if (trimmed.ok()) {
      ++round.trimmed;
      round.bytes += *trimmed;
      runs.Add({"trimmed"});
      trimmed_bytes.Add({}, static_cast<double>(*trimmed));
      LogInfo("periodic trim: volume trimmed", {{"volume_id", record.volume_id}, {"bytes", std::to_string(*trimmed)}});
    } else if (trimmed.status().code() == StatusCode::kAborted) {
      ++round.busy;
      runs.Add({"busy"});
      LogInfo("periodic trim: volume busy, left for the next round", {{"volume_id", record.volume_id}});
    } else {
      ++round.failed;
      runs.Add({"failed"});
      LogWarn("periodic trim: volume not trimmed",
              {{"volume_id", record.volume_id}, {"error", trimmed.status().ToString()}});
    }
  }
  return round;
}

}  // namespace blockcsi
