#include "backend/local/pool.h"

#include <sys/types.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "backend/volume_id.h"
#include "common/logging.h"

namespace blockcsi {
namespace {

using nlohmann::json;

std::string SourceKindName(ContentSource::Kind kind) {
  switch (kind) {
    case ContentSource::Kind::kSnapshot:
      return "snapshot";
    case ContentSource::Kind::kVolume:
      return "volume";
    case ContentSource::Kind::kNone:
      break;
  }
  return "";
}

}  // namespace

Pool::Pool(std::string dir, PoolOptions options, std::unique_ptr<HeldLock> lock)
    : dir_(std::move(dir)), options_(std::move(options)), files_(*options_.files), lock_(std::move(lock)) {}

Pool::~Pool() = default;  // releases the pool's lock

StatusOr<std::unique_ptr<Pool>> Pool::Open(const std::string& dir, PoolOptions options) {
  if (dir.empty() || dir.front() != '/') return InvalidArgument("pool directory \"" + dir + "\" must be absolute");
  if (options.files == nullptr) options.files = MakeImageFiles();
  for (const char* sub : {"", "/volumes", "/snapshots", "/images", "/tmp", "/fences"}) {
    BLOCKCSI_RETURN_IF_ERROR(options.files->MakeDirectory(dir + sub));
  }
  std::string lock_path = dir + "/.lock";
  auto lock = options.files->Lock(lock_path);
  if (lock.status().code() == StatusCode::kFailedPrecondition) {
    return FailedPrecondition("pool " + dir + " is in use by another process (lock " + lock_path + ")");
  }
  BLOCKCSI_RETURN_IF_ERROR(lock.status());
  std::unique_ptr<Pool> pool(new Pool(dir, std::move(options), std::move(lock).value()));
  BLOCKCSI_RETURN_IF_ERROR(pool->Load());
  return pool;
}

std::string Pool::ImagePath(std::string_view id) const { return dir_ + "/images/" + std::string(id) + ".img"; }
StatusOr<uint64_t> Pool::ImageSize(std::string_view id) const { return files_.Size(ImagePath(id)); }
std::string Pool::VolumeRecordPath(std::string_view id) const { return dir_ + "/volumes/" + std::string(id) + ".json"; }
std::string Pool::SnapshotRecordPath(std::string_view id) const {
  return dir_ + "/snapshots/" + std::string(id) + ".json";
}

Status Pool::Fault(std::string_view point) const { return FaultPoint(point, options_.fault_hook); }

Status Pool::Load() {
  // tmp/ holds only images of operations that never committed.
  BLOCKCSI_ASSIGN_OR_RETURN(auto tmp_names, files_.List(dir_ + "/tmp"));
  for (const auto& name : tmp_names) {
    LogWarn("pool recovery: removing unfinished image", {{"file", name}});
    BLOCKCSI_RETURN_IF_ERROR(files_.RemoveDurably(dir_ + "/tmp/" + name));
  }
  BLOCKCSI_RETURN_IF_ERROR(LoadFences());
  std::map<std::string, VolumeRecord> volumes;
  std::map<std::string, SnapshotRecord> snapshots;
  BLOCKCSI_ASSIGN_OR_RETURN(auto volume_names, files_.List(dir_ + "/volumes"));
  for (const auto& name : volume_names) {
    std::string path = dir_ + "/volumes/" + name;
    if (!name.ends_with(".json") || !IsVolumeId(name.substr(0, name.size() - 5))) {
      // WriteFileAtomically's temp files, from a crash mid-write.
      LogWarn("pool recovery: removing stray file", {{"file", path}});
      BLOCKCSI_RETURN_IF_ERROR(files_.RemoveDurably(path));
      continue;
    }
    BLOCKCSI_ASSIGN_OR_RETURN(std::string text, files_.ReadRecord(path));
    auto record = VolumeFromJson(text);
    if (!record.ok()) return Internal("pool record " + path + " is unreadable: " + record.status().message());
    volumes[record->id] = *record;
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto snapshot_names, files_.List(dir_ + "/snapshots"));
  for (const auto& name : snapshot_names) {
    std::string path = dir_ + "/snapshots/" + name;
    if (!name.ends_with(".json") || !IsSnapshotId(name.substr(0, name.size() - 5))) {
      LogWarn("pool recovery: removing stray file", {{"file", path}});
      BLOCKCSI_RETURN_IF_ERROR(files_.RemoveDurably(path));
      continue;
    }
    BLOCKCSI_ASSIGN_OR_RETURN(std::string text, files_.ReadRecord(path));
    auto record = SnapshotFromJson(text);
    if (!record.ok()) return Internal("pool record " + path + " is unreadable: " + record.status().message());
    snapshots[record->id] = *record;
  }
  // Images without a record: a create that crashed before its commit, or a
  // delete that crashed after it.
  BLOCKCSI_ASSIGN_OR_RETURN(auto image_names, files_.List(dir_ + "/images"));
  for (const auto& name : image_names) {
    std::string id = name.ends_with(".img") ? name.substr(0, name.size() - 4) : "";
    if (volumes.count(id) || snapshots.count(id)) continue;
    LogWarn("pool recovery: removing image without a record", {{"file", name}});
    BLOCKCSI_RETURN_IF_ERROR(files_.RemoveDurably(dir_ + "/images/" + name));
  }
  // An expand grows the image before the record: roll such a volume forward.
  for (auto& [id, record] : volumes) {
    auto size = files_.Size(ImagePath(id));
    if (!size.ok()) {
      LogError("pool: volume has no image", {{"volume", id}, {"error", size.status().ToString()}});
      continue;
    }
    if (*size > record.size_bytes) {
      LogWarn("pool recovery: completing an interrupted expand", {{"volume", id}, {"size", std::to_string(*size)}});
      record.size_bytes = *size;
      BLOCKCSI_RETURN_IF_ERROR(files_.WriteRecord(VolumeRecordPath(id), VolumeToJson(record)));
    } else if (*size < record.size_bytes && record.source.kind == ContentSource::Kind::kNone) {
      // An empty volume's image whose size a crash lost (PlaceImage does
      // not fsync it): sized back up, sparse, it is the volume it was. The
      // size is made durable (Resize fsyncs) so the repair is done once.
      LogWarn("pool recovery: sizing the image of a new empty volume back up",
              {{"volume", id}, {"size", std::to_string(*size)}});
      BLOCKCSI_RETURN_IF_ERROR(files_.Resize(ImagePath(id), record.size_bytes));
    }
  }
  MutexLock lock(mu_);
  volumes_.clear();
  volume_names_.clear();
  for (const auto& [id, record] : volumes) IndexVolumeLocked(record);
  snapshots_ = std::move(snapshots);
  return OkStatus();
}

void Pool::IndexVolumeLocked(const VolumeRecord& record) {
  auto [it, inserted] = volumes_.try_emplace(record.id, record);
  if (!inserted) {
    volume_names_.erase({it->second.name, record.id});
    it->second = record;
  }
  volume_names_.insert({record.name, record.id});
}

void Pool::UnindexVolumeLocked(const std::string& id) {
  auto it = volumes_.find(id);
  if (it == volumes_.end()) return;
  volume_names_.erase({it->second.name, id});
  volumes_.erase(it);
}

std::optional<VolumeRecord> Pool::GetVolume(const std::string& id) const {
  MutexLock lock(mu_);
  auto it = volumes_.find(id);
  if (it == volumes_.end()) return std::nullopt;
  return it->second;
}

std::optional<VolumeRecord> Pool::FindVolumeByName(const std::string& name) const {
  MutexLock lock(mu_);
  auto named = volume_names_.lower_bound({name, ""});
  if (named == volume_names_.end() || named->first != name) return std::nullopt;
  return volumes_.at(named->second);
}

std::vector<VolumeRecord> Pool::ListVolumes() const {
  MutexLock lock(mu_);
  std::vector<VolumeRecord> out;
  out.reserve(volumes_.size());
  for (const auto& [id, record] : volumes_) out.push_back(record);
  return out;
}

std::vector<VolumeRecord> Pool::ListVolumesFrom(const std::string& start_id, size_t max_entries,
                                                std::string* next_id) const {
  MutexLock lock(mu_);
  std::vector<VolumeRecord> out;
  auto it = volumes_.lower_bound(start_id);
  for (; it != volumes_.end() && (max_entries == 0 || out.size() < max_entries); ++it) out.push_back(it->second);
  // Set last: `next_id` may be `start_id` itself (a caller paging in a loop).
  *next_id = it == volumes_.end() ? std::string() : it->first;
  return out;
}

Status Pool::PlaceImage(const PlaceImagePoints& points, const std::string& id, uint64_t size_bytes,
                        const std::string& source_image, CopyMethod* method) {
  std::string staged = dir_ + "/tmp/" + id + ".img";
  if (source_image.empty()) {
    // No fsync of the empty image (one of CreateVolume's four):
    // it has no data, and its size protects nothing a crash could lose. A
    // crash can leave it shorter than its record only if no flush ever
    // reached it (any fsync or fdatasync of tgtd's makes the size durable
    // with the data), so nothing acknowledged was written, and Load()
    // sizes such an image back up to its record, which gives the same
    // all-zero volume. Its name is still durable before the record
    // (SyncDirectory below): a record whose image is gone is not repaired.
    BLOCKCSI_RETURN_IF_ERROR(files_.Create(staged, size_bytes));  // a failure leaves nothing in tmp/
    if (method != nullptr) *method = CopyMethod::kNone;
  } else {
    BLOCKCSI_RETURN_IF_ERROR(files_.Remove(staged));  // a leftover of a failed attempt at the same id
    // The copy is fsynced by Clone: its data must be durable before its
    // record commits it (a snapshot cannot be made again after a crash).
    Status st = files_.Clone(source_image, staged, size_bytes, method);
    if (!st.ok()) {
      (void)files_.Remove(staged);  // best effort; the next Open() empties tmp/ anyway
      return st;
    }
  }
  BLOCKCSI_RETURN_IF_ERROR(Fault(points.staged));
  std::string final_path = ImagePath(id);
  BLOCKCSI_RETURN_IF_ERROR(files_.Rename(staged, final_path).WithContext("place image"));
  // Crash point: the record is written next. Without this fsync of images/
  // a crash after the record could keep the record and lose the rename (the
  // image back in tmp/, which Open() empties): a volume or snapshot whose
  // image is gone. Only the new name must be durable; a stale tmp/ entry
  // after a crash is removed by the next Open().
  BLOCKCSI_RETURN_IF_ERROR(files_.SyncDirectory(dir_ + "/images"));
  return Fault(points.placed);
}

Status Pool::CreateVolume(const VolumeRecord& record, const std::string& source_image, CopyMethod* method) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(record.id));
  {
    MutexLock lock(mu_);
    if (volumes_.count(record.id)) return AlreadyExists("volume " + record.id + " already exists in the pool");
  }
  BLOCKCSI_ASSIGN_OR_RETURN(RoomReservation room, ReserveRoom(record.size_bytes, true, "volume " + record.id));
  BLOCKCSI_RETURN_IF_ERROR(
      PlaceImage(PlaceImagePoints{"controller.create.image-staged", "controller.create.image-placed"}, record.id,
                 record.size_bytes, source_image, method));
  // The commit point: from here on the volume exists. Its two fsyncs (the
  // record file, then volumes/) are the crash points of CreateVolume's
  // answer: a volume the CO was told exists must still exist after a crash
  // (else its PV names a volume the pool no longer has), and never as a
  // torn record that Open() would refuse.
  if (Status written = files_.WriteRecord(VolumeRecordPath(record.id), VolumeToJson(record)); !written.ok()) {
    // A failed create leaves nothing behind (a crash here is cleaned by Open).
    (void)files_.Remove(ImagePath(record.id));
    return written;
  }
  MutexLock lock(mu_);
  IndexVolumeLocked(record);
  return OkStatus();
}

Status Pool::UpdateVolume(const VolumeRecord& record) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(record.id));
  // Both fsyncs (the record file, then volumes/) are crash points of a
  // grant and of a revoke. A grant is recorded durably before its ACL is
  // applied: reconcile rebuilds ACLs from records, so a grant a crash lost
  // would take a published node's access away. A revoke is recorded
  // durably before the call answers: a grant a crash brought back would
  // let the revoked node in again once reconcile restores its ACL
  // (fencing). The same holds for an expand's new size.
  BLOCKCSI_RETURN_IF_ERROR(files_.WriteRecord(VolumeRecordPath(record.id), VolumeToJson(record)));
  MutexLock lock(mu_);
  IndexVolumeLocked(record);
  return OkStatus();
}

Status Pool::GrowImage(const std::string& id, uint64_t size_bytes) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(id));
  std::string path = ImagePath(id);
  auto size = files_.Size(path);
  if (!size.ok()) return size.status().WithContext("image of volume " + id);
  if (*size >= size_bytes) return OkStatus();
  // Held until the image is grown; the caller's UpdateVolume then records
  // the size that accounts for it.
  BLOCKCSI_ASSIGN_OR_RETURN(RoomReservation room, ReserveRoom(size_bytes - *size, false, "growth of volume " + id));
  // Resize fsyncs: the grown size is durable before the record says so, so
  // a record never claims more than its image has after a crash (Load()
  // rolls an image bigger than its record forward, never the reverse).
  return files_.Resize(path, size_bytes).WithContext("grow image of volume " + id);
}

Status Pool::DeleteVolume(const std::string& id) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(id));
  // The commit point, durable (fsync of volumes/) before the image goes: a
  // crash can then leave an image without a record (which Open() removes),
  // never a record without its image, and a volume the CO was told is
  // deleted never comes back.
  BLOCKCSI_RETURN_IF_ERROR(files_.RemoveDurably(VolumeRecordPath(id)));
  {
    MutexLock lock(mu_);
    UnindexVolumeLocked(id);
  }
  BLOCKCSI_RETURN_IF_ERROR(Fault("controller.delete.record-removed"));
  // No fsync of images/ (one of DeleteVolume's two): an image
  // whose unlink a crash undoes has no record, which the next Open()
  // removes, as after a crash between the two steps.
  return files_.Remove(ImagePath(id));
}

std::optional<SnapshotRecord> Pool::GetSnapshot(const std::string& id) const {
  MutexLock lock(mu_);
  auto it = snapshots_.find(id);
  if (it == snapshots_.end()) return std::nullopt;
  return it->second;
}

std::optional<SnapshotRecord> Pool::FindSnapshotByName(const std::string& name) const {
  MutexLock lock(mu_);
  for (const auto& [id, record] : snapshots_) {
    if (record.name == name) return record;
  }
  return std::nullopt;
}

std::vector<SnapshotRecord> Pool::ListSnapshots() const {
  MutexLock lock(mu_);
  std::vector<SnapshotRecord> out;
  for (const auto& [id, record] : snapshots_) out.push_back(record);
  return out;
}

Status Pool::CreateSnapshot(const SnapshotRecord& record, CopyMethod* method) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateSnapshotId(record.id));
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(record.source_volume_id));
  {
    MutexLock lock(mu_);
    if (snapshots_.count(record.id)) return AlreadyExists("snapshot " + record.id + " already exists in the pool");
  }
  // A snapshot is provisioned like a volume: without a reflink its copy
  // takes as much space as its source has written.
  BLOCKCSI_ASSIGN_OR_RETURN(RoomReservation room, ReserveRoom(record.size_bytes, false, "snapshot " + record.id));
  BLOCKCSI_RETURN_IF_ERROR(
      PlaceImage(PlaceImagePoints{"controller.snapshot.image-staged", "controller.snapshot.image-placed"}, record.id,
                 record.size_bytes, ImagePath(record.source_volume_id), method));
  // Commit point of the snapshot (record file and snapshots/ fsynced): a
  // snapshot the CO was told exists survives a crash, as a volume does.
  BLOCKCSI_RETURN_IF_ERROR(files_.WriteRecord(SnapshotRecordPath(record.id), SnapshotToJson(record)));
  MutexLock lock(mu_);
  snapshots_[record.id] = record;
  return OkStatus();
}

Status Pool::UpdateSnapshot(const SnapshotRecord& record) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateSnapshotId(record.id));
  // Durable before the answer, as a volume's update: a rotation that was
  // told a snapshot's key is re-wrapped must find it so after a crash.
  BLOCKCSI_RETURN_IF_ERROR(files_.WriteRecord(SnapshotRecordPath(record.id), SnapshotToJson(record)));
  MutexLock lock(mu_);
  snapshots_[record.id] = record;
  return OkStatus();
}

Status Pool::DeleteSnapshot(const std::string& id) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateSnapshotId(id));
  // As DeleteVolume: the record's removal durable first, the image after
  // without an fsync (an orphan image is removed by Open()).
  BLOCKCSI_RETURN_IF_ERROR(files_.RemoveDurably(SnapshotRecordPath(id)));
  {
    MutexLock lock(mu_);
    snapshots_.erase(id);
  }
  BLOCKCSI_RETURN_IF_ERROR(Fault("controller.delete-snapshot.record-removed"));
  return files_.Remove(ImagePath(id));
}

StatusOr<double> ParseOvercommitRatio(std::string_view text) {
  std::string copy(text);
  char* end = nullptr;
  errno = 0;
  double ratio = std::strtod(copy.c_str(), &end);
  // strtod skips leading blanks and reads "inf"/"nan": refuse those.
  bool digit_first = !copy.empty() && (std::isdigit(static_cast<unsigned char>(copy.front())) || copy.front() == '.');
  if (!digit_first || end != copy.c_str() + copy.size() || errno != 0 || !std::isfinite(ratio) || ratio <= 0 ||
      ratio > 1000) {
    return InvalidArgument("overcommit ratio must be a number above 0 and at most 1000, not \"" + copy.substr(0, 40) +
                           "\"");
  }
  return ratio;
}

Status Pool::Healthy() const { return files_.CheckAccess(dir_ + "/volumes"); }

std::string Pool::VolumeToJson(const VolumeRecord& r) {
  json grants = json::array();
  for (const auto& g : r.grants) {
    grants.push_back({{"initiator_iqn", g.initiator_iqn},
                      {"node_id", g.node_id},
                      {"read_only", g.read_only},
                      {"capability", g.capability},
                      {"chap", g.chap}});
  }
  json j = {{"version", 1},
            {"id", r.id},
            {"name", r.name},
            {"size_bytes", r.size_bytes},
            {"created_unix_seconds", r.created_unix_seconds},
            {"source", {{"kind", SourceKindName(r.source.kind)}, {"id", r.source.id}}},
            {"parameters", r.parameters},
            {"target_iqn", r.target_iqn},
            {"lun", r.lun},
            {"serial", r.serial},
            {"wwn", r.wwn},
            {"grants", grants}};
  // Only the wrapped form exists here (backend.h); absent when not encrypted.
  if (!r.wrapped_data_key.empty()) j["wrapped_data_key"] = r.wrapped_data_key;
  return j.dump(2) + "\n";
}

StatusOr<VolumeRecord> Pool::VolumeFromJson(std::string_view text) {
  try {
    json j = json::parse(text);
    VolumeRecord r;
    r.id = j.at("id").get<std::string>();
    BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(r.id));
    r.name = j.at("name").get<std::string>();
    r.size_bytes = j.at("size_bytes").get<uint64_t>();
    r.created_unix_seconds = j.at("created_unix_seconds").get<int64_t>();
    std::string kind = j.at("source").at("kind").get<std::string>();
    r.source.kind = kind == "snapshot" ? ContentSource::Kind::kSnapshot
                    : kind == "volume" ? ContentSource::Kind::kVolume
                                       : ContentSource::Kind::kNone;
    r.source.id = j.at("source").at("id").get<std::string>();
    r.parameters = j.at("parameters").get<std::map<std::string, std::string>>();
    r.target_iqn = j.at("target_iqn").get<std::string>();
    r.lun = j.at("lun").get<int>();
    r.serial = j.at("serial").get<std::string>();
    r.wwn = j.at("wwn").get<std::string>();
    for (const auto& g : j.at("grants")) {
      r.grants.push_back({g.at("initiator_iqn").get<std::string>(), g.at("node_id").get<std::string>(),
                          g.at("read_only").get<bool>(), g.at("capability").get<std::string>(),
                          g.at("chap").get<bool>()});
    }
    r.wrapped_data_key = j.value("wrapped_data_key", "");  // records of before encryption have none
    return r;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("volume record: ") + e.what());
  }
}

std::string Pool::SnapshotToJson(const SnapshotRecord& r) {
  json j = {{"version", 1},
            {"id", r.id},
            {"name", r.name},
            {"source_volume_id", r.source_volume_id},
            {"size_bytes", r.size_bytes},
            {"created_unix_seconds", r.created_unix_seconds}};
  if (!r.wrapped_data_key.empty()) j["wrapped_data_key"] = r.wrapped_data_key;
  return j.dump(2) + "\n";
}

StatusOr<SnapshotRecord> Pool::SnapshotFromJson(std::string_view text) {
  try {
    json j = json::parse(text);
    SnapshotRecord r;
    r.id = j.at("id").get<std::string>();
    BLOCKCSI_RETURN_IF_ERROR(ValidateSnapshotId(r.id));
    r.name = j.at("name").get<std::string>();
    r.source_volume_id = j.at("source_volume_id").get<std::string>();
    r.size_bytes = j.at("size_bytes").get<uint64_t>();
    r.created_unix_seconds = j.at("created_unix_seconds").get<int64_t>();
    r.ready_to_use = true;
    r.wrapped_data_key = j.value("wrapped_data_key", "");
    return r;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("snapshot record: ") + e.what());
  }
}

}  // namespace blockcsi
