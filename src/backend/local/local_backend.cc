#include "backend/local/local_backend.h"

#include <algorithm>
#include <chrono>

#include "backend/volume_id.h"
#include "common/fault_points.h"
#include "common/keyed_lock.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "contract/chap_rules.h"
#include "contract/initiator.h"
#include "contract/iscsi_names.h"

namespace blockcsi {

namespace {

std::string GrantNodes(const VolumeRecord& r) {
  std::string out;
  for (const auto& g : r.grants) out += (out.empty() ? "" : ", ") + (g.node_id.empty() ? g.initiator_iqn : g.node_id);
  return out;
}

// An initiator name we put in an ACL: an iSCSI name (RFC 3720: iqn./eui./
// naa. form, at most 223 bytes), which also keeps tgtadm's argument and
// output syntax (no spaces, commas, '=' or newlines) out of it.
Status ValidateInitiatorName(const std::string& volume_id, const std::string& iqn) {
  return ValidateIscsiName(iqn).WithContext("initiator of volume " + volume_id);
}

// CSI's general limit for a string field (spec, "Size Limits"); names and
// node ids end up in records and log lines, so bound them.
constexpr size_t kMaxNameBytes = 128;
constexpr size_t kMaxNodeIdBytes = 256;       // CSI's limit for node_id
constexpr size_t kMaxParametersBytes = 4096;  // CSI's limit for a map<string, string>

// Text a record keeps and a log line prints: printable ASCII only, so no
// control byte (NUL, newline, escape) can forge a log line or a record
// field, and bounded. The message never echoes the value.
Status ValidateText(std::string_view value, const std::string& what, size_t max_bytes, bool allow_empty = false) {
  if (value.empty() && !allow_empty) return InvalidArgument(what + " is empty");
  if (value.size() > max_bytes) {
    return InvalidArgument(what + " is " + std::to_string(value.size()) + " bytes, more than the " +
                           std::to_string(max_bytes) + " allowed");
  }
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] < 0x20 || value[i] > 0x7e) {
      return InvalidArgument(what + " has a byte outside printable ASCII at offset " + std::to_string(i));
    }
  }
  return OkStatus();
}

Status ValidateParameters(const std::map<std::string, std::string>& parameters, const std::string& what) {
  size_t total = 0;
  for (const auto& [k, v] : parameters) {
    total += k.size() + v.size();
    if (total > kMaxParametersBytes) {
      return InvalidArgument("parameters of " + what + " are more than " + std::to_string(kMaxParametersBytes) +
                             " bytes");
    }
    BLOCKCSI_RETURN_IF_ERROR(ValidateText(k, "a parameter name of " + what, kMaxParametersBytes));
    BLOCKCSI_RETURN_IF_ERROR(ValidateText(v, "parameter " + k + " of " + what, kMaxParametersBytes, true));
  }
  return OkStatus();
}

template <typename T>
StatusOr<Page<T>> Paginate(const std::vector<T>& sorted, const std::string& start_token, int max_entries,
                           bool (*valid_token)(std::string_view)) {
  if (max_entries < 0) return InvalidArgument("max_entries must not be negative");
  if (!start_token.empty() && !valid_token(start_token)) {
    return Aborted("list token " + QuoteId(start_token) + " is not one this backend gave out");
  }
  // The token is the id to resume at: ids are stable and ordered, so a page
  // boundary survives creates and deletes between calls.
  auto it = std::lower_bound(sorted.begin(), sorted.end(), start_token,
                             [](const T& r, const std::string& token) { return r.id < token; });
  Page<T> page;
  for (; it != sorted.end(); ++it) {
    if (max_entries > 0 && static_cast<int>(page.items.size()) == max_entries) {
      page.next_token = it->id;
      break;
    }
    page.items.push_back(*it);
  }
  return page;
}

int64_t NowUnix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The image a new volume is copied from (empty for a blank one), with the
// source's lock taken into `source_lock` so that the source cannot be
// deleted or resized while it is copied. A snapshot and a volume are checked
// alike: NOT_FOUND when absent, OUT_OF_RANGE when larger than the new volume.
StatusOr<std::string> LockedSourceImage(const Pool& pool, KeyedLock& locks, const CreateVolumeSpec& spec,
                                        KeyedLock::Guard& source_lock) {
  if (spec.source.kind == ContentSource::Kind::kNone) return std::string();
  const bool from_snapshot = spec.source.kind == ContentSource::Kind::kSnapshot;
  const std::string& id = spec.source.id;
  const std::string what = from_snapshot ? "source snapshot " : "source volume ";
  if (!(from_snapshot ? IsSnapshotId(id) : IsVolumeId(id))) return NotFound(what + QuoteId(id) + " not found");
  source_lock = locks.Lock(id);
  std::optional<uint64_t> source_bytes;
  if (from_snapshot) {
    if (auto snapshot = pool.GetSnapshot(id)) source_bytes = snapshot->size_bytes;
  } else if (auto volume = pool.GetVolume(id)) {
    source_bytes = volume->size_bytes;
  }
  if (!source_bytes) return NotFound(what + id + " of volume \"" + spec.name + "\" not found");
  if (*source_bytes > spec.size_bytes) {
    return OutOfRange("volume \"" + spec.name + "\" (" + std::to_string(spec.size_bytes) +
                      " bytes) is smaller than its " + what + id);
  }
  return pool.ImagePath(id);
}

}  // namespace

Status LocalBackend::NotOurVolume(const std::string& id) {
  return NotFound("volume " + QuoteId(id) + " not found (not a target-backend volume id)");
}

LocalBackend::LocalBackend(std::unique_ptr<Pool> pool, std::shared_ptr<Exporter> exporter, LocalBackendOptions options)
    : options_(std::move(options)),
      pool_(std::move(pool)),
      exporter_(std::move(exporter)),
      locks_(std::make_unique<KeyedLock>()) {}

StatusOr<std::shared_ptr<LocalBackend>> LocalBackend::Open(const std::string& pool_dir,
                                                           std::shared_ptr<Exporter> exporter,
                                                           LocalBackendOptions options) {
  if (options.iqn_prefix.rfind("iqn.", 0) != 0 || options.iqn_prefix.find(':') != std::string::npos ||
      !ValidateIscsiName(options.iqn_prefix + ":vol-0000000000000000").ok()) {
    return InvalidArgument("IQN prefix \"" + options.iqn_prefix + "\" must look like iqn.YYYY-MM.reversed.domain");
  }
  PoolOptions pool_options;
  pool_options.fault_hook = options.fault_hook;
  pool_options.overcommit_ratio = options.overcommit_ratio;
  pool_options.max_volumes = options.max_volumes;
  BLOCKCSI_ASSIGN_OR_RETURN(auto pool, Pool::Open(pool_dir, pool_options));
  std::shared_ptr<LocalBackend> backend(new LocalBackend(std::move(pool), std::move(exporter), std::move(options)));
  if (auto r = backend->ReconcileNow(); !r.ok()) {
    LogWarn("initial reconcile failed; the loop will retry", {{"error", r.status().ToString()}});
  }
  Metrics().AddCollector(backend, [weak = std::weak_ptr<LocalBackend>(backend)](MetricsRegistry& registry) {
    if (auto live = weak.lock()) live->CollectPoolMetrics(registry);
  });
  if (backend->options_.reconcile_interval.count() > 0) {
    backend->loop_ = std::thread([raw = backend.get()] { raw->LoopMain(); });
  }
  return backend;
}

LocalBackend::~LocalBackend() {
  {
    MutexLock lock(loop_mu_);
    stopping_ = true;
  }
  loop_cv_.SignalAll();
  if (loop_.joinable()) loop_.join();
}

std::string LocalBackend::Name() const { return exporter_->Kind(); }

Status LocalBackend::Fault(std::string_view point) const { return FaultPoint(point, options_.fault_hook); }

VolumeRecord LocalBackend::WithCurrentPortals(VolumeRecord record) const {
  record.portals = options_.portals;
  return record;
}

VolumeRecord LocalBackend::WithAllocation(VolumeRecord record) const {
  if (auto bytes = pool_->ImageAllocatedBytes(record.id); bytes.ok()) record.allocated_bytes = *bytes;
  return record;
}

DesiredExport LocalBackend::DesiredFor(const VolumeRecord& r) const {
  DesiredExport d;
  d.iqn = r.target_iqn;
  d.volume_id = r.id;
  d.image_path = pool_->ImagePath(r.id);
  d.size_bytes = r.size_bytes;
  d.serial = r.serial;
  d.wwn = r.wwn;
  MutexLock lock(chap_mu_);
  auto secrets = chap_.find(r.id);
  for (const auto& g : r.grants) {
    // A fenced node's grant that a crash left in the record (a fence
    // records itself first, then revokes) never reaches an ACL.
    if (pool_->Fenced(g.node_id, g.initiator_iqn)) continue;
    d.acls.push_back({g.initiator_iqn, g.chap, ""});
    if (!g.chap || secrets == chap_.end()) continue;
    auto c = secrets->second.find(g.initiator_iqn);
    if (c != secrets->second.end()) {
      d.acls.back().chap_username = c->second.username;
      d.chap.push_back(c->second);
    }
  }
  return d;
}

Status LocalBackend::ApplyExport(const VolumeRecord& record) {
  auto applied = exporter_->Apply(DesiredFor(record));
  RecordTargetOperation("export", applied.status());
  BLOCKCSI_ASSIGN_OR_RETURN(auto repairs, std::move(applied));
  for (const auto& line : repairs) LogDebug("export changed", {{"volume", record.id}, {"change", line}});
  return OkStatus();
}

StatusOr<VolumeRecord> LocalBackend::CreateVolume(const CreateVolumeSpec& spec) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateText(spec.name, "volume name", kMaxNameBytes));
  BLOCKCSI_RETURN_IF_ERROR(ValidateParameters(spec.parameters, "volume \"" + spec.name + "\""));
  BLOCKCSI_RETURN_IF_ERROR(CheckContentSource(spec));
  if (spec.size_bytes == 0 || spec.size_bytes % kTargetAllocationGranularity != 0) {
    return InvalidArgument("size " + std::to_string(spec.size_bytes) + " of volume \"" + spec.name +
                           "\" is not a positive multiple of 1 MiB");
  }
  ReaderMutexLock op(reconcile_mu_);
  // DeleteVolume takes the name's lock too, so a volume found here stays
  // until this call has answered with it.
  auto name_lock = locks_->Lock("name:" + spec.name);
  if (auto existing = pool_->FindVolumeByName(spec.name)) {
    if (existing->size_bytes != spec.size_bytes || !(existing->source == spec.source)) {
      return AlreadyExists("volume \"" + spec.name + "\" already exists as " + existing->id + " with size " +
                           std::to_string(existing->size_bytes) + " and another size or content source");
    }
    BLOCKCSI_RETURN_IF_ERROR(Fault("controller.create.existing-found"));
    auto id_lock = locks_->Lock(existing->id);
    // Exported from the record as it is under the volume's lock, never from
    // the copy read before it: exporting a volume that is gone would make a
    // target for a deleted image. ABORTED (retry) should anything but
    // DeleteVolume, which cannot run now, take it away.
    auto current = pool_->GetVolume(existing->id);
    if (!current) {
      return Aborted("volume \"" + spec.name + "\" (" + existing->id + ") was deleted while this call ran; retry");
    }
    BLOCKCSI_RETURN_IF_ERROR(ApplyExport(*current));  // a retry after a failed export
    return WithCurrentPortals(*current);
  }

  KeyedLock::Guard source_lock;
  BLOCKCSI_ASSIGN_OR_RETURN(std::string source_image, LockedSourceImage(*pool_, *locks_, spec, source_lock));

  VolumeRecord record;
  record.id = NewVolumeId();
  auto id_lock = locks_->Lock(record.id);
  record.name = spec.name;
  record.size_bytes = spec.size_bytes;
  record.created_unix_seconds = NowUnix();
  record.source = spec.source;
  record.parameters = spec.parameters;
  record.target_iqn = options_.iqn_prefix + ":" + record.id;
  record.lun = 1;
  ExportedLunIdentity identity = exporter_->IdentityFor(record.id);
  record.serial = identity.serial;
  record.wwn = identity.wwn;
  CopyMethod method = CopyMethod::kNone;
  Status created = pool_->CreateVolume(record, source_image, &method);
  if (!created.ok()) return created.WithContext("create volume \"" + spec.name + "\"");
  // A final failure from here on takes the volume back out: the
  // provisioner will not retry it by name, so nothing else would.
  auto undo = [&](Status why) {
    if (IsFinalFailure(why)) UndoCreate(record, why);
    return why;
  };
  if (Status st = Fault("controller.create.after-record"); !st.ok()) return undo(st);
  LogInfo("volume created", {{"volume", record.id},
                             {"name", record.name},
                             {"size", std::to_string(record.size_bytes)},
                             {"copy", method == CopyMethod::kReflink      ? "reflink"
                                      : method == CopyMethod::kSparseCopy ? "sparse-copy"
                                                                          : "none"}});
  // Exported with no ACL: nobody can log in until a grant.
  if (Status st = ApplyExport(record); !st.ok()) return undo(st);
  if (Status st = Fault("controller.create.after-export"); !st.ok()) return undo(st);
  return WithCurrentPortals(record);
}

void LocalBackend::UndoCreate(const VolumeRecord& record, const Status& why) {
  Status unexported = exporter_->Remove(record.target_iqn);
  Status removed = unexported.ok() ? pool_->DeleteVolume(record.id) : unexported;
  if (!removed.ok()) {
    LogError("create failed and taking the volume back failed too; the reconcile loop or a delete must finish it",
             {{"volume", record.id}, {"error", why.ToString()}, {"undo_error", removed.ToString()}});
    return;
  }
  LogInfo("create failed; volume taken back", {{"volume", record.id}, {"error", why.ToString()}});
}

Status LocalBackend::DeleteVolume(const std::string& volume_id) {
  if (!IsVolumeId(volume_id)) return OkStatus();  // not ours, so nothing of ours to delete
  ReaderMutexLock op(reconcile_mu_);
  // The name's lock, then the volume's, in CreateVolume's order: a create
  // of this name that has found the volume answers with it before it goes
  // (without the name's lock it re-exported a deleted volume). A volume's
  // name never changes, so the unlocked read names the right lock.
  auto named = pool_->GetVolume(volume_id);
  if (!named) return OkStatus();
  auto name_lock = locks_->Lock("name:" + named->name);
  auto id_lock = locks_->Lock(volume_id);
  auto record = pool_->GetVolume(volume_id);
  if (!record) return OkStatus();
  if (!record->grants.empty()) {
    return FailedPrecondition("volume " + volume_id + " is still published to " + GrantNodes(*record));
  }
  BLOCKCSI_RETURN_IF_ERROR(exporter_->Remove(record->target_iqn));
  BLOCKCSI_RETURN_IF_ERROR(Fault("controller.delete.after-unexport"));
  BLOCKCSI_RETURN_IF_ERROR(pool_->DeleteVolume(volume_id));
  BLOCKCSI_RETURN_IF_ERROR(Fault("controller.delete.after-image-removed"));
  {
    MutexLock lock(chap_mu_);
    chap_.erase(volume_id);
  }
  LogInfo("volume deleted", {{"volume", volume_id}, {"name", record->name}});
  return OkStatus();
}

StatusOr<VolumeRecord> LocalBackend::ExpandVolume(const std::string& volume_id, uint64_t new_size_bytes) {
  if (!IsVolumeId(volume_id)) return NotOurVolume(volume_id);
  if (new_size_bytes == 0 || new_size_bytes % kTargetAllocationGranularity != 0) {
    return InvalidArgument("new size " + std::to_string(new_size_bytes) + " of volume " + volume_id +
                           " is not a positive multiple of 1 MiB");
  }
  ReaderMutexLock op(reconcile_mu_);
  auto id_lock = locks_->Lock(volume_id);
  auto record = pool_->GetVolume(volume_id);
  if (!record) return NotFound("volume " + volume_id + " not found");
  if (new_size_bytes < record->size_bytes) {
    return OutOfRange("volume " + volume_id + " is " + std::to_string(record->size_bytes) +
                      " bytes; it cannot shrink to " + std::to_string(new_size_bytes));
  }
  if (new_size_bytes > record->size_bytes) {
    BLOCKCSI_RETURN_IF_ERROR(pool_->GrowImage(volume_id, new_size_bytes));
    BLOCKCSI_RETURN_IF_ERROR(Fault("controller.expand.after-image-grown"));
    record->size_bytes = new_size_bytes;
    BLOCKCSI_RETURN_IF_ERROR(pool_->UpdateVolume(*record));
    LogInfo("volume expanded", {{"volume", volume_id}, {"size", std::to_string(new_size_bytes)}});
  }
  BLOCKCSI_RETURN_IF_ERROR(ApplyExport(*record));  // re-adds the LUN at its new size
  return WithCurrentPortals(*record);
}

StatusOr<VolumeRecord> LocalBackend::GrantAccess(const std::string& volume_id, const AccessGrant& grant) {
  if (!IsVolumeId(volume_id)) return NotOurVolume(volume_id);
  BLOCKCSI_RETURN_IF_ERROR(ValidateInitiatorName(volume_id, grant.initiator_iqn));
  BLOCKCSI_RETURN_IF_ERROR(ValidateText(grant.node_id, "node id of volume " + volume_id, kMaxNodeIdBytes, true));
  BLOCKCSI_RETURN_IF_ERROR(ValidateText(grant.capability, "access mode of volume " + volume_id, kMaxNameBytes, true));
  // Every field of the credentials, whoever sent them (the agent's clients
  // are not trusted more than the controller's): chap_rules.h.
  BLOCKCSI_RETURN_IF_ERROR(ValidateChapCredentials(grant.chap, "volume " + volume_id + ": CHAP"));
  ReaderMutexLock op(reconcile_mu_);
  auto id_lock = locks_->Lock(volume_id);
  auto record = pool_->GetVolume(volume_id);
  if (!record) return NotFound("volume " + volume_id + " not found");
  // Checked under the volume's lock: a fence that lands after this waits
  // for the lock and then revokes what this grant adds.
  if (auto fence = pool_->FenceOf(grant.node_id, grant.initiator_iqn)) {
    return FailedPrecondition(FencedMessage(*fence, volume_id));
  }
  GrantRecord wanted{grant.initiator_iqn, grant.node_id, grant.read_only, grant.capability, grant.chap.enabled()};
  auto existing = std::find_if(record->grants.begin(), record->grants.end(),
                               [&](const GrantRecord& g) { return g.initiator_iqn == grant.initiator_iqn; });
  if (existing != record->grants.end()) {
    if (existing->node_id != wanted.node_id || existing->read_only != wanted.read_only ||
        existing->capability != wanted.capability || existing->chap != wanted.chap) {
      return AlreadyExists("volume " + volume_id + " is already granted to " + grant.initiator_iqn +
                           " with another access mode, read-only flag or CHAP setting");
    }
  }
  {
    // Secrets go to memory before the export is applied (it needs them) and
    // stay there until revoke or delete.
    MutexLock lock(chap_mu_);
    if (grant.chap.enabled()) {
      chap_[volume_id][grant.initiator_iqn] = grant.chap;
    } else if (auto it = chap_.find(volume_id); it != chap_.end()) {
      it->second.erase(grant.initiator_iqn);
    }
  }
  const bool new_grant = existing == record->grants.end();
  // A final failure of a new grant takes it back (record, ACL, secrets):
  // the attacher does not unpublish what it was told failed for good.
  auto undo = [&](Status why) {
    if (new_grant && IsFinalFailure(why)) UndoGrant(*record, grant.initiator_iqn, why);
    return why;
  };
  if (new_grant) {
    record->grants.push_back(wanted);
    BLOCKCSI_RETURN_IF_ERROR(pool_->UpdateVolume(*record));
    if (Status st = Fault("controller.publish.after-grant-record"); !st.ok()) return undo(st);
    LogInfo("access granted", {{"volume", volume_id},
                               {"initiator", grant.initiator_iqn},
                               {"chap", grant.chap.enabled() ? (grant.chap.mutual() ? "mutual" : "one-way") : "off"}});
  }
  if (Status st = ApplyExport(*record); !st.ok()) return undo(st);
  if (Status st = Fault("controller.publish.after-acl"); !st.ok()) return undo(st);
  return WithCurrentPortals(*record);
}

void LocalBackend::UndoGrant(VolumeRecord record, const std::string& initiator_iqn, const Status& why) {
  record.grants.erase(std::remove_if(record.grants.begin(), record.grants.end(),
                                     [&](const GrantRecord& g) { return g.initiator_iqn == initiator_iqn; }),
                      record.grants.end());
  {
    MutexLock lock(chap_mu_);
    if (auto it = chap_.find(record.id); it != chap_.end()) it->second.erase(initiator_iqn);
  }
  Status st = pool_->UpdateVolume(record);
  if (st.ok()) st = ApplyExport(record);
  if (!st.ok()) {
    LogError("grant failed and taking it back failed too; the reconcile loop or an unpublish must finish it",
             {{"volume", record.id},
              {"initiator", initiator_iqn},
              {"error", why.ToString()},
              {"undo_error", st.ToString()}});
    return;
  }
  LogInfo("grant failed; taken back", {{"volume", record.id}, {"initiator", initiator_iqn}, {"error", why.ToString()}});
}

Status LocalBackend::RevokeAccess(const std::string& volume_id, const std::string& initiator_iqn) {
  if (!IsVolumeId(volume_id)) return OkStatus();
  ReaderMutexLock op(reconcile_mu_);
  auto id_lock = locks_->Lock(volume_id);
  auto record = pool_->GetVolume(volume_id);
  if (!record) return OkStatus();
  return RevokeLocked(*record, {initiator_iqn});
}

Status LocalBackend::RevokeLocked(const VolumeRecord& record, const std::set<std::string>& initiator_iqns) {
  const std::string& volume_id = record.id;
  VolumeRecord revoked = record;
  std::erase_if(revoked.grants, [&](const GrantRecord& g) { return initiator_iqns.contains(g.initiator_iqn); });
  const bool was_granted = revoked.grants.size() != record.grants.size();
  // Access goes first, the record after (the reverse of a grant): the
  // target's ACL never lists an initiator the record does not.
  // If the daemon cannot be changed (down, or its listing not trusted), the
  // call fails with the grant still recorded and the CO retries; a crash
  // between the two steps leaves a recorded grant without its ACL, which
  // reconcile restores until the retried revoke completes. The ACL goes out
  // before the sessions are closed, so the initiator cannot come back in;
  // both run even when the grant was already gone, so a retry still fences.
  BLOCKCSI_RETURN_IF_ERROR(ApplyExport(revoked));
  BLOCKCSI_RETURN_IF_ERROR(Fault("controller.unpublish.after-acl-removed"));
  for (const auto& iqn : initiator_iqns) {
    BLOCKCSI_RETURN_IF_ERROR(exporter_->CloseSessions(record.target_iqn, iqn));
  }
  if (was_granted) {
    BLOCKCSI_RETURN_IF_ERROR(pool_->UpdateVolume(revoked));
    BLOCKCSI_RETURN_IF_ERROR(Fault("controller.unpublish.after-grant-removed"));
  }
  {
    MutexLock lock(chap_mu_);
    if (auto it = chap_.find(volume_id); it != chap_.end()) {
      for (const auto& iqn : initiator_iqns) it->second.erase(iqn);
    }
  }
  if (was_granted) {
    for (const auto& iqn : initiator_iqns) LogInfo("access revoked", {{"volume", volume_id}, {"initiator", iqn}});
  }
  return OkStatus();
}

StatusOr<VolumeRecord> LocalBackend::GetVolume(const std::string& volume_id) {
  if (!IsVolumeId(volume_id)) return NotOurVolume(volume_id);
  auto record = pool_->GetVolume(volume_id);
  if (!record) return NotFound("volume " + volume_id + " not found");
  return WithAllocation(WithCurrentPortals(*record));
}

StatusOr<Page<VolumeRecord>> LocalBackend::ListVolumes(const std::string& start_token, int max_entries) {
  if (max_entries < 0) return InvalidArgument("max_entries must not be negative");
  if (!start_token.empty() && !IsVolumeId(start_token)) {
    return Aborted("list token " + QuoteId(start_token) + " is not one this backend gave out");
  }
  // The token is the id to resume at, as in Paginate; the pool's index
  // hands out just the page.
  Page<VolumeRecord> page;
  page.items = pool_->ListVolumesFrom(start_token, static_cast<size_t>(max_entries), &page.next_token);
  for (auto& r : page.items) r = WithAllocation(WithCurrentPortals(std::move(r)));
  return page;
}

StatusOr<uint64_t> LocalBackend::AvailableBytes(const CapacityQuery& /*query*/) { return pool_->AvailableBytes(); }

StatusOr<SnapshotRecord> LocalBackend::CreateSnapshot(const std::string& source_volume_id, const std::string& name) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateText(name, "snapshot name", kMaxNameBytes));
  if (!IsVolumeId(source_volume_id)) {
    return NotFound("source volume " + QuoteId(source_volume_id) + " of snapshot \"" + name + "\" not found");
  }
  ReaderMutexLock op(reconcile_mu_);
  auto name_lock = locks_->Lock("snapname:" + name);
  if (auto existing = pool_->FindSnapshotByName(name)) {
    if (existing->source_volume_id != source_volume_id) {
      return AlreadyExists("snapshot \"" + name + "\" already exists as " + existing->id + " of volume " +
                           existing->source_volume_id);
    }
    return *existing;
  }
  auto source_lock = locks_->Lock(source_volume_id);
  auto source = pool_->GetVolume(source_volume_id);
  if (!source) return NotFound("source volume " + source_volume_id + " of snapshot \"" + name + "\" not found");
  SnapshotRecord record;
  record.id = NewSnapshotId();
  record.name = name;
  record.source_volume_id = source_volume_id;
  record.size_bytes = source->size_bytes;
  record.created_unix_seconds = NowUnix();
  record.ready_to_use = true;
  // The snapshot's data is encrypted with its volume's key: it keeps a copy.
  record.wrapped_data_key = source->wrapped_data_key;
  CopyMethod method = CopyMethod::kNone;
  Status created = pool_->CreateSnapshot(record, &method);
  if (!created.ok()) return created.WithContext("snapshot \"" + name + "\" of volume " + source_volume_id);
  LogInfo("snapshot created", {{"snapshot", record.id},
                               {"volume", source_volume_id},
                               {"copy", method == CopyMethod::kReflink ? "reflink" : "sparse-copy"}});
  return record;
}

Status LocalBackend::DeleteSnapshot(const std::string& snapshot_id) {
  if (!IsSnapshotId(snapshot_id)) return OkStatus();
  ReaderMutexLock op(reconcile_mu_);
  auto lock = locks_->Lock(snapshot_id);
  if (!pool_->GetSnapshot(snapshot_id)) return OkStatus();
  BLOCKCSI_RETURN_IF_ERROR(pool_->DeleteSnapshot(snapshot_id));
  LogInfo("snapshot deleted", {{"snapshot", snapshot_id}});
  return OkStatus();
}

StatusOr<SnapshotRecord> LocalBackend::GetSnapshot(const std::string& snapshot_id) {
  if (!IsSnapshotId(snapshot_id)) return NotFound("snapshot " + QuoteId(snapshot_id) + " not found");
  auto record = pool_->GetSnapshot(snapshot_id);
  if (!record) return NotFound("snapshot " + snapshot_id + " not found");
  return *record;
}

StatusOr<Page<SnapshotRecord>> LocalBackend::ListSnapshots(const std::string& source_volume_id,
                                                           const std::string& start_token, int max_entries) {
  std::vector<SnapshotRecord> all = pool_->ListSnapshots();
  if (!source_volume_id.empty()) {
    std::erase_if(all, [&](const SnapshotRecord& s) { return s.source_volume_id != source_volume_id; });
  }
  return Paginate(all, start_token, max_entries, &IsSnapshotId);
}

bool LocalBackend::MayHoldVolume(const std::string& volume_id) const { return IsVolumeId(volume_id); }

Status LocalBackend::Healthy() {
  BLOCKCSI_RETURN_IF_ERROR(pool_->Healthy());
  return exporter_->Healthy();
}

}  // namespace blockcsi
