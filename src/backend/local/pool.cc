#include "backend/local/pool.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/volume_id.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/span.h"
#include "common/unique_fd.h"

namespace blockcsi {
namespace {

using nlohmann::json;

// fsync, timed as a span of the call (common/span.h).
int TimedFsync(int fd, const std::string& what) {
  Span span("fsync", what);
  return ::fsync(fd);
}

// Sets the size of an existing image file and fsyncs it.
Status SizeImageDurably(const std::string& path, uint64_t size_bytes) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoToStatus(errno, "open " + path);
  if (::ftruncate(fd.get(), static_cast<off_t>(size_bytes)) != 0) return ErrnoToStatus(errno, "size " + path);
  if (TimedFsync(fd.get(), path) != 0) return ErrnoToStatus(errno, "fsync " + path);
  return OkStatus();
}

Status FsyncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoToStatus(errno, "open directory " + dir);
  if (TimedFsync(fd.get(), dir) != 0) return ErrnoToStatus(errno, "fsync directory " + dir);
  return OkStatus();
}

StatusOr<std::vector<std::string>> ListNames(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoToStatus(errno, "open directory " + dir);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

// Unlinks the image of an object whose record is already durably gone,
// without an fsync of images/ (one of DeleteVolume's two, issue #18): the
// record's removal is the commit point, and an image whose unlink a crash
// undoes has no record, which the next Open() removes ("image without a
// record"), as after a crash between the two steps.
Status RemoveOrphanImage(const std::string& path) {
  Span span("unlink", path);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoToStatus(errno, "remove " + path);
  return OkStatus();
}

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

// Writes `count` bytes of `from` at `offset` into `to`, in chunks.
Status CopyRange(int from, int to, off_t offset, off_t count, const std::string& what) {
  std::vector<char> buffer(1 << 20);
  while (count > 0) {
    size_t want = static_cast<size_t>(std::min<off_t>(count, static_cast<off_t>(buffer.size())));
    ssize_t n = ::pread(from, buffer.data(), want, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "read " + what);
    }
    if (n == 0) break;  // the source shrank under us: the rest stays a hole
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::pwrite(to, buffer.data() + done, static_cast<size_t>(n - done), offset + done);
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoToStatus(errno, "write copy of " + what);
      }
      done += w;
    }
    offset += n;
    count -= n;
  }
  return OkStatus();
}

}  // namespace

Status CloneOrSparseCopy(const std::string& from, const std::string& to, uint64_t size_bytes, CopyMethod* method) {
  UniqueFd src(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (src.get() < 0) return ErrnoToStatus(errno, "open " + from);
  struct stat st {};
  if (::fstat(src.get(), &st) != 0) return ErrnoToStatus(errno, "stat " + from);
  if (static_cast<uint64_t>(st.st_size) > size_bytes) {
    return OutOfRange("copy of " + from + " would shrink it from " + std::to_string(st.st_size) + " to " +
                      std::to_string(size_bytes) + " bytes");
  }
  UniqueFd dst(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (dst.get() < 0) return ErrnoToStatus(errno, "create " + to);
  CopyMethod used = CopyMethod::kReflink;
  if (::ioctl(dst.get(), FICLONE, src.get()) != 0) {
    // EOPNOTSUPP/EINVAL/EXDEV/ENOTTY: this filesystem cannot share extents.
    used = CopyMethod::kSparseCopy;
    off_t end = st.st_size;
    off_t pos = 0;
    while (pos < end) {
      off_t data = ::lseek(src.get(), pos, SEEK_DATA);
      if (data < 0) {
        if (errno == ENXIO) break;  // only a hole remains
        return ErrnoToStatus(errno, "seek data in " + from);
      }
      off_t hole = ::lseek(src.get(), data, SEEK_HOLE);
      if (hole < 0) return ErrnoToStatus(errno, "seek hole in " + from);
      BLOCKCSI_RETURN_IF_ERROR(CopyRange(src.get(), dst.get(), data, hole - data, from));
      pos = hole;
    }
  }
  if (::ftruncate(dst.get(), static_cast<off_t>(size_bytes)) != 0) return ErrnoToStatus(errno, "size " + to);
  if (TimedFsync(dst.get(), to) != 0) return ErrnoToStatus(errno, "fsync " + to);
  if (method != nullptr) *method = used;
  return OkStatus();
}

Pool::Pool(std::string dir, PoolOptions options, int lock_fd)
    : dir_(std::move(dir)), options_(std::move(options)), lock_fd_(lock_fd) {}

Pool::~Pool() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

StatusOr<std::unique_ptr<Pool>> Pool::Open(const std::string& dir, PoolOptions options) {
  if (dir.empty() || dir.front() != '/') return InvalidArgument("pool directory \"" + dir + "\" must be absolute");
  for (const char* sub : {"", "/volumes", "/snapshots", "/images", "/tmp"}) {
    BLOCKCSI_RETURN_IF_ERROR(MakeDirectories(dir + sub, 0700));
  }
  std::string lock_path = dir + "/.lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoToStatus(errno, "open " + lock_path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return FailedPrecondition("pool " + dir + " is in use by another process (lock " + lock_path + ")");
    }
    return ErrnoToStatus(err, "lock " + lock_path);
  }
  std::unique_ptr<Pool> pool(new Pool(dir, std::move(options), fd));
  BLOCKCSI_RETURN_IF_ERROR(pool->Load());
  return pool;
}

std::string Pool::ImagePath(std::string_view id) const { return dir_ + "/images/" + std::string(id) + ".img"; }
std::string Pool::VolumeRecordPath(std::string_view id) const { return dir_ + "/volumes/" + std::string(id) + ".json"; }
std::string Pool::SnapshotRecordPath(std::string_view id) const {
  return dir_ + "/snapshots/" + std::string(id) + ".json";
}

Status Pool::Fault(std::string_view point) const { return FaultPoint(point, options_.fault_hook); }

Status Pool::Load() {
  // tmp/ holds only images of operations that never committed.
  BLOCKCSI_ASSIGN_OR_RETURN(auto tmp_names, ListNames(dir_ + "/tmp"));
  for (const auto& name : tmp_names) {
    LogWarn("pool recovery: removing unfinished image", {{"file", name}});
    BLOCKCSI_RETURN_IF_ERROR(RemoveFileDurably(dir_ + "/tmp/" + name));
  }
  std::map<std::string, VolumeRecord> volumes;
  std::map<std::string, SnapshotRecord> snapshots;
  BLOCKCSI_ASSIGN_OR_RETURN(auto volume_names, ListNames(dir_ + "/volumes"));
  for (const auto& name : volume_names) {
    std::string path = dir_ + "/volumes/" + name;
    if (!name.ends_with(".json") || !IsVolumeId(name.substr(0, name.size() - 5))) {
      // WriteFileAtomically's temp files, from a crash mid-write.
      LogWarn("pool recovery: removing stray file", {{"file", path}});
      BLOCKCSI_RETURN_IF_ERROR(RemoveFileDurably(path));
      continue;
    }
    BLOCKCSI_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    auto record = VolumeFromJson(text);
    if (!record.ok()) return Internal("pool record " + path + " is unreadable: " + record.status().message());
    volumes[record->id] = *record;
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto snapshot_names, ListNames(dir_ + "/snapshots"));
  for (const auto& name : snapshot_names) {
    std::string path = dir_ + "/snapshots/" + name;
    if (!name.ends_with(".json") || !IsSnapshotId(name.substr(0, name.size() - 5))) {
      LogWarn("pool recovery: removing stray file", {{"file", path}});
      BLOCKCSI_RETURN_IF_ERROR(RemoveFileDurably(path));
      continue;
    }
    BLOCKCSI_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    auto record = SnapshotFromJson(text);
    if (!record.ok()) return Internal("pool record " + path + " is unreadable: " + record.status().message());
    snapshots[record->id] = *record;
  }
  // Images without a record: a create that crashed before its commit, or a
  // delete that crashed after it.
  BLOCKCSI_ASSIGN_OR_RETURN(auto image_names, ListNames(dir_ + "/images"));
  for (const auto& name : image_names) {
    std::string id = name.ends_with(".img") ? name.substr(0, name.size() - 4) : "";
    if (volumes.count(id) || snapshots.count(id)) continue;
    LogWarn("pool recovery: removing image without a record", {{"file", name}});
    BLOCKCSI_RETURN_IF_ERROR(RemoveFileDurably(dir_ + "/images/" + name));
  }
  // An expand grows the image before the record: roll such a volume forward.
  for (auto& [id, record] : volumes) {
    struct stat st {};
    if (::stat(ImagePath(id).c_str(), &st) != 0) {
      LogError("pool: volume has no image", {{"volume", id}});
      continue;
    }
    if (static_cast<uint64_t>(st.st_size) > record.size_bytes) {
      LogWarn("pool recovery: completing an interrupted expand",
              {{"volume", id}, {"size", std::to_string(st.st_size)}});
      record.size_bytes = static_cast<uint64_t>(st.st_size);
      BLOCKCSI_RETURN_IF_ERROR(WriteFileAtomically(VolumeRecordPath(id), VolumeToJson(record)));
    } else if (static_cast<uint64_t>(st.st_size) < record.size_bytes &&
               record.source.kind == ContentSource::Kind::kNone) {
      // An empty volume's image whose size a crash lost (PlaceImage does
      // not fsync it): sized back up, sparse, it is the volume it was.
      LogWarn("pool recovery: sizing the image of a new empty volume back up",
              {{"volume", id}, {"size", std::to_string(st.st_size)}});
      BLOCKCSI_RETURN_IF_ERROR(SizeImageDurably(ImagePath(id), record.size_bytes));
    }
  }
  std::lock_guard lock(mu_);
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
  std::lock_guard lock(mu_);
  auto it = volumes_.find(id);
  if (it == volumes_.end()) return std::nullopt;
  return it->second;
}

std::optional<VolumeRecord> Pool::FindVolumeByName(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto named = volume_names_.lower_bound({name, ""});
  if (named == volume_names_.end() || named->first != name) return std::nullopt;
  return volumes_.at(named->second);
}

std::vector<VolumeRecord> Pool::ListVolumes() const {
  std::lock_guard lock(mu_);
  std::vector<VolumeRecord> out;
  out.reserve(volumes_.size());
  for (const auto& [id, record] : volumes_) out.push_back(record);
  return out;
}

std::vector<VolumeRecord> Pool::ListVolumesFrom(const std::string& start_id, size_t max_entries,
                                                std::string* next_id) const {
  std::lock_guard lock(mu_);
  std::vector<VolumeRecord> out;
  auto it = volumes_.lower_bound(start_id);
  for (; it != volumes_.end() && (max_entries == 0 || out.size() < max_entries); ++it) out.push_back(it->second);
  // Set last: `next_id` may be `start_id` itself (a caller paging in a loop).
  *next_id = it == volumes_.end() ? std::string() : it->first;
  return out;
}

Status Pool::PlaceImage(std::string_view operation, const std::string& id, uint64_t size_bytes,
                        const std::string& source_image, CopyMethod* method) {
  std::string staged = dir_ + "/tmp/" + id + ".img";
  if (source_image.empty()) {
    UniqueFd fd(::open(staged.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (fd.get() < 0) return ErrnoToStatus(errno, "create " + staged);
    Status sized = OkStatus();
    // No fsync of the empty image (one of CreateVolume's four, issue #18):
    // it has no data, and its size protects nothing a crash could lose. A
    // crash can leave it shorter than its record only if no flush ever
    // reached it (any fsync or fdatasync of tgtd's makes the size durable
    // with the data), so nothing acknowledged was written, and Load()
    // sizes such an image back up to its record, which gives the same
    // all-zero volume. Its name is still durable before the record
    // (FsyncDir below): a record whose image is gone is not repaired.
    if (::ftruncate(fd.get(), static_cast<off_t>(size_bytes)) != 0) {
      sized = ErrnoToStatus(errno, "size image of volume " + id);
    }
    if (!sized.ok()) {
      ::unlink(staged.c_str());  // a failed create leaves nothing in tmp/
      return sized;
    }
    if (method != nullptr) *method = CopyMethod::kNone;
  } else {
    ::unlink(staged.c_str());  // a leftover of a failed attempt at the same id
    Status st = CloneOrSparseCopy(source_image, staged, size_bytes, method);
    if (!st.ok()) {
      ::unlink(staged.c_str());
      return st;
    }
  }
  BLOCKCSI_RETURN_IF_ERROR(Fault("controller." + std::string(operation) + ".image-staged"));
  std::string final_path = ImagePath(id);
  if (::rename(staged.c_str(), final_path.c_str()) != 0) return ErrnoToStatus(errno, "place image " + final_path);
  // Only the new name must be durable before the record is written; a
  // stale tmp/ entry after a crash is removed by the next Open().
  BLOCKCSI_RETURN_IF_ERROR(FsyncDir(dir_ + "/images"));
  return Fault("controller." + std::string(operation) + ".image-placed");
}

Status Pool::CreateVolume(const VolumeRecord& record, const std::string& source_image, CopyMethod* method) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(record.id));
  {
    std::lock_guard lock(mu_);
    if (volumes_.count(record.id)) return AlreadyExists("volume " + record.id + " already exists in the pool");
  }
  BLOCKCSI_RETURN_IF_ERROR(CheckRoom(record.size_bytes, "volume " + record.id));
  BLOCKCSI_RETURN_IF_ERROR(PlaceImage("create", record.id, record.size_bytes, source_image, method));
  // The commit point: from here on the volume exists.
  if (Status written = WriteFileAtomically(VolumeRecordPath(record.id), VolumeToJson(record)); !written.ok()) {
    // A failed create leaves nothing behind (a crash here is cleaned by Open).
    ::unlink(ImagePath(record.id).c_str());
    return written;
  }
  std::lock_guard lock(mu_);
  IndexVolumeLocked(record);
  return OkStatus();
}

Status Pool::UpdateVolume(const VolumeRecord& record) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(record.id));
  BLOCKCSI_RETURN_IF_ERROR(WriteFileAtomically(VolumeRecordPath(record.id), VolumeToJson(record)));
  std::lock_guard lock(mu_);
  IndexVolumeLocked(record);
  return OkStatus();
}

Status Pool::GrowImage(const std::string& id, uint64_t size_bytes) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(id));
  std::string path = ImagePath(id);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoToStatus(errno, "open image of volume " + id);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, "stat image of volume " + id);
  if (static_cast<uint64_t>(st.st_size) >= size_bytes) return OkStatus();
  BLOCKCSI_RETURN_IF_ERROR(CheckRoom(size_bytes - static_cast<uint64_t>(st.st_size), "growth of volume " + id));
  if (::ftruncate(fd.get(), static_cast<off_t>(size_bytes)) != 0) {
    return ErrnoToStatus(errno, "grow image of volume " + id);
  }
  if (TimedFsync(fd.get(), id) != 0) return ErrnoToStatus(errno, "fsync image of volume " + id);
  return OkStatus();
}

Status Pool::DeleteVolume(const std::string& id) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(id));
  BLOCKCSI_RETURN_IF_ERROR(RemoveFileDurably(VolumeRecordPath(id)));
  {
    std::lock_guard lock(mu_);
    UnindexVolumeLocked(id);
  }
  BLOCKCSI_RETURN_IF_ERROR(Fault("controller.delete.record-removed"));
  return RemoveOrphanImage(ImagePath(id));
}

std::optional<SnapshotRecord> Pool::GetSnapshot(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = snapshots_.find(id);
  if (it == snapshots_.end()) return std::nullopt;
  return it->second;
}

std::optional<SnapshotRecord> Pool::FindSnapshotByName(const std::string& name) const {
  std::lock_guard lock(mu_);
  for (const auto& [id, record] : snapshots_) {
    if (record.name == name) return record;
  }
  return std::nullopt;
}

std::vector<SnapshotRecord> Pool::ListSnapshots() const {
  std::lock_guard lock(mu_);
  std::vector<SnapshotRecord> out;
  for (const auto& [id, record] : snapshots_) out.push_back(record);
  return out;
}

Status Pool::CreateSnapshot(const SnapshotRecord& record, CopyMethod* method) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateSnapshotId(record.id));
  BLOCKCSI_RETURN_IF_ERROR(ValidateVolumeId(record.source_volume_id));
  {
    std::lock_guard lock(mu_);
    if (snapshots_.count(record.id)) return AlreadyExists("snapshot " + record.id + " already exists in the pool");
  }
  BLOCKCSI_RETURN_IF_ERROR(
      PlaceImage("snapshot", record.id, record.size_bytes, ImagePath(record.source_volume_id), method));
  BLOCKCSI_RETURN_IF_ERROR(WriteFileAtomically(SnapshotRecordPath(record.id), SnapshotToJson(record)));
  std::lock_guard lock(mu_);
  snapshots_[record.id] = record;
  return OkStatus();
}

Status Pool::DeleteSnapshot(const std::string& id) {
  BLOCKCSI_RETURN_IF_ERROR(ValidateSnapshotId(id));
  BLOCKCSI_RETURN_IF_ERROR(RemoveFileDurably(SnapshotRecordPath(id)));
  {
    std::lock_guard lock(mu_);
    snapshots_.erase(id);
  }
  BLOCKCSI_RETURN_IF_ERROR(Fault("controller.delete-snapshot.record-removed"));
  return RemoveOrphanImage(ImagePath(id));
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

namespace {

// Bytes times the ratio, saturating instead of overflowing.
uint64_t Scaled(uint64_t bytes, double ratio) {
  long double v = static_cast<long double>(bytes) * ratio;
  if (v >= static_cast<long double>(std::numeric_limits<uint64_t>::max())) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(v);
}

}  // namespace

StatusOr<uint64_t> Pool::AvailableBytes() const {
  struct statvfs vfs {};
  if (::statvfs(dir_.c_str(), &vfs) != 0) return ErrnoToStatus(errno, "statvfs pool " + dir_);
  return Scaled(static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize, options_.overcommit_ratio);
}

Status Pool::CheckRoom(uint64_t bytes, const std::string& what) const {
  struct statvfs vfs {};
  if (::statvfs(dir_.c_str(), &vfs) != 0) return ErrnoToStatus(errno, "statvfs pool " + dir_);
  const uint64_t total = Scaled(static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize, options_.overcommit_ratio);
  const uint64_t free = Scaled(static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize, options_.overcommit_ratio);
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%g", options_.overcommit_ratio);
  if (bytes > static_cast<uint64_t>(std::numeric_limits<off_t>::max()) || bytes > total) {
    return OutOfRange(what + ": " + std::to_string(bytes) + " bytes is more than the pool can ever hold (" +
                      std::to_string(total) + " bytes: its file system times the overcommit ratio " + ratio + ")");
  }
  if (bytes > free) {
    return ResourceExhausted(what + ": " + std::to_string(bytes) + " bytes is more than the pool allows now (" +
                             std::to_string(free) + " bytes: its free space times the overcommit ratio " + ratio + ")");
  }
  return OkStatus();
}

Status Pool::Healthy() const {
  if (::access((dir_ + "/volumes").c_str(), R_OK | W_OK | X_OK) != 0) {
    return ErrnoToStatus(errno, "access pool " + dir_);
  }
  return OkStatus();
}

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
    return r;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("snapshot record: ") + e.what());
  }
}

}  // namespace blockcsi
