#include "backend/rbd/rbd_backend.h"

#include <openssl/sha.h>
#include <rados/librados.h>
#include <rbd/librbd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attach/initiator.h"
#include "common/logging.h"
#include "common/metrics.h"

namespace blockcsi {
namespace {

constexpr char kIdPrefix[] = "rbd.";
constexpr char kVolumePrefix[] = "csi-vol-";
constexpr char kSnapPrefix[] = "csi-snap-";
constexpr char kTempSnapPrefix[] = "csi-tmp-";
constexpr size_t kHashHexLen = 32;
constexpr size_t kMaxPoolLen = 40;

constexpr char kMetaName[] = "blockcsi.name";
constexpr char kMetaSource[] = "blockcsi.source";
constexpr char kMetaParamPrefix[] = "blockcsi.param.";
constexpr char kMetaGrantPrefix[] = "blockcsi.grant.";
constexpr char kMetaFencePrefix[] = "blockcsi.fence.";
constexpr char kMetaClientPrefix[] = "blockcsi.client.";
constexpr char kPoolMetaSnapPrefix[] = "blockcsi.snap.";

constexpr uint64_t kGranularity = 1ULL << 20;
// What krbd maps on any kernel since 4.9; object-map/fast-diff/deep-flatten
// would make older kernels refuse the image.
constexpr uint64_t kImageFeatures = RBD_FEATURE_LAYERING | RBD_FEATURE_EXCLUSIVE_LOCK;
constexpr uint64_t kImageOrder = 22;  // 4 MiB objects, Ceph's default

using json = nlohmann::json;

Status CephError(int r, std::string_view what) { return ErrnoToStatus(-r, what); }

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool HasHashedName(std::string_view s, std::string_view prefix) {
  return s.size() == prefix.size() + kHashHexLen && s.starts_with(prefix) && IsLowerHex(s.substr(prefix.size()));
}

bool IsValidPoolName(std::string_view pool) {
  if (pool.empty() || pool.size() > kMaxPoolLen) return false;
  return std::all_of(pool.begin(), pool.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// First 128 bits of SHA-256, hex: deterministic and collision-free in
// practice, and every character is legal in an image or snapshot name.
std::string NameHash(std::string_view name) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(name.data()), name.size(), md);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < kHashHexLen / 2; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 0xf]);
  }
  return out;
}

struct SnapRef {
  RbdVolumeRef volume;
  std::string snap;
};

std::optional<SnapRef> ParseSnapshotId(std::string_view id) {
  size_t at = id.find('@');
  if (at == std::string_view::npos) return std::nullopt;
  auto volume = ParseRbdVolumeId(id.substr(0, at));
  std::string_view snap = id.substr(at + 1);
  if (!volume || !HasHashedName(snap, kSnapPrefix)) return std::nullopt;
  return SnapRef{*volume, std::string(snap)};
}

std::string VolumeId(const std::string& pool, const std::string& image) { return kIdPrefix + pool + "." + image; }
std::string SnapshotId(const std::string& pool, const std::string& image, const std::string& snap) {
  return VolumeId(pool, image) + "@" + snap;
}

std::string SourceString(const ContentSource& source) {
  switch (source.kind) {
    case ContentSource::Kind::kSnapshot:
      return "snapshot:" + source.id;
    case ContentSource::Kind::kVolume:
      return "volume:" + source.id;
    case ContentSource::Kind::kNone:
      break;
  }
  return "";
}

ContentSource SourceFromString(std::string_view s) {
  ContentSource out;
  if (s.starts_with("snapshot:")) {
    out.kind = ContentSource::Kind::kSnapshot;
    out.id = std::string(s.substr(9));
  } else if (s.starts_with("volume:")) {
    out.kind = ContentSource::Kind::kVolume;
    out.id = std::string(s.substr(7));
  }
  return out;
}

std::vector<std::string> SplitNul(const std::string& buf, size_t len) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < len) {
    size_t end = buf.find('\0', pos);
    if (end == std::string::npos || end > len) end = len;
    out.emplace_back(buf.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

std::vector<std::string> SplitComma(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    size_t comma = s.find(',');
    std::string_view part = s.substr(0, comma);
    if (!part.empty()) out.emplace_back(part);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

std::string JoinComma(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

struct ImageCloser {
  void operator()(void* image) const { rbd_close(static_cast<rbd_image_t>(image)); }
};
using ImageHandle = std::unique_ptr<void, ImageCloser>;

struct IoCtxCloser {
  void operator()(void* io) const { rados_ioctx_destroy(static_cast<rados_ioctx_t>(io)); }
};
using IoCtxHandle = std::unique_ptr<void, IoCtxCloser>;

struct Watcher {
  std::string addr;
  int64_t client_id = 0;
};

struct SnapInfo {
  uint64_t id = 0;
  uint64_t size = 0;
  std::string name;
};

StatusOr<std::map<std::string, std::string>> ListMetadata(rbd_image_t image, std::string_view what) {
  size_t key_len = 4096;
  size_t val_len = 4096;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string keys(key_len, '\0');
    std::string vals(val_len, '\0');
    int r = rbd_metadata_list(image, "", 0, keys.data(), &key_len, vals.data(), &val_len);
    if (r == -ERANGE) continue;
    if (r < 0) return CephError(r, "list metadata of " + std::string(what));
    std::vector<std::string> k = SplitNul(keys, key_len);
    std::vector<std::string> v = SplitNul(vals, val_len);
    std::map<std::string, std::string> out;
    for (size_t i = 0; i < k.size(); ++i) {
      if (k[i].empty()) continue;
      out[k[i]] = i < v.size() ? v[i] : "";
    }
    return out;
  }
  return Internal("list metadata of " + std::string(what) + ": buffer keeps growing");
}

StatusOr<std::vector<Watcher>> ListWatchers(rbd_image_t image, std::string_view what) {
  size_t max = 16;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::vector<rbd_image_watcher_t> watchers(max);
    size_t n = max;
    int r = rbd_watchers_list(image, watchers.data(), &n);
    if (r == -ERANGE) {
      max = n + 4;
      continue;
    }
    if (r < 0) return CephError(r, "list watchers of " + std::string(what));
    std::vector<Watcher> out;
    for (size_t i = 0; i < n; ++i) out.push_back({watchers[i].addr != nullptr ? watchers[i].addr : "", watchers[i].id});
    rbd_watchers_list_cleanup(watchers.data(), n);
    return out;
  }
  return Internal("list watchers of " + std::string(what) + ": list keeps growing");
}

StatusOr<std::vector<SnapInfo>> ListSnaps(rbd_image_t image, std::string_view what) {
  int max = 16;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::vector<rbd_snap_info_t> snaps(static_cast<size_t>(max) + 1);
    int n = max;
    int r = rbd_snap_list(image, snaps.data(), &n);
    if (r == -ERANGE) {
      max = n + 4;
      continue;
    }
    if (r < 0) return CephError(r, "list snapshots of " + std::string(what));
    std::vector<SnapInfo> out;
    out.reserve(static_cast<size_t>(r));
    for (int i = 0; i < r; ++i) out.push_back({snaps[i].id, snaps[i].size, snaps[i].name});
    rbd_snap_list_end(snaps.data());
    return out;
  }
  return Internal("list snapshots of " + std::string(what) + ": list keeps growing");
}

struct Locker {
  std::string client;
  std::string cookie;
  std::string addr;
};

StatusOr<std::vector<Locker>> ListLockers(rbd_image_t image, std::string_view what) {
  size_t tag_len = 256, clients_len = 1024, cookies_len = 1024, addrs_len = 1024;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string tag(tag_len, '\0'), clients(clients_len, '\0'), cookies(cookies_len, '\0'), addrs(addrs_len, '\0');
    int exclusive = 0;
    ssize_t n = rbd_list_lockers(image, &exclusive, tag.data(), &tag_len, clients.data(), &clients_len, cookies.data(),
                                 &cookies_len, addrs.data(), &addrs_len);
    if (n == -ERANGE) continue;
    if (n < 0) return CephError(static_cast<int>(n), "list lockers of " + std::string(what));
    auto c = SplitNul(clients, clients_len);
    auto k = SplitNul(cookies, cookies_len);
    auto a = SplitNul(addrs, addrs_len);
    std::vector<Locker> out;
    for (size_t i = 0; i < static_cast<size_t>(n) && i < c.size() && i < k.size() && i < a.size(); ++i) {
      out.push_back({c[i], k[i], a[i]});
    }
    return out;
  }
  return Internal("list lockers of " + std::string(what) + ": list keeps growing");
}

StatusOr<std::vector<std::string>> ListImageNames(rados_ioctx_t io) {
  size_t max = 64;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::vector<rbd_image_spec_t> images(max);
    size_t n = max;
    int r = rbd_list2(io, images.data(), &n);
    if (r == -ERANGE) {
      max = n + 16;
      continue;
    }
    if (r < 0) return CephError(r, "list rbd images");
    std::vector<std::string> out;
    for (size_t i = 0; i < n; ++i) out.emplace_back(images[i].name);
    rbd_image_spec_list_cleanup(images.data(), n);
    std::sort(out.begin(), out.end());
    return out;
  }
  return Internal("list rbd images: list keeps growing");
}

// Mutual exclusion per image for the read-modify-write cycles on its
// metadata; the map only grows by the number of images this process touched.
class ImageLocks {
 public:
  struct Held {
    std::shared_ptr<std::mutex> mu;
    std::unique_lock<std::mutex> lock;
  };
  Held Lock(const std::string& image) {
    std::shared_ptr<std::mutex> mu;
    {
      std::lock_guard<std::mutex> guard(mu_);
      auto& slot = locks_[image];
      if (!slot) slot = std::make_shared<std::mutex>();
      mu = slot;
    }
    std::unique_lock<std::mutex> lock(*mu);
    return Held{std::move(mu), std::move(lock)};
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<std::mutex>> locks_;  // guarded by mu_
};

class RbdBackend final : public VolumeBackend {
 public:
  RbdBackend(RbdBackendOptions options, rados_t cluster, rados_ioctx_t io, std::string monitors)
      : options_(std::move(options)),
        cluster_(cluster),
        io_(io),
        monitors_(std::move(monitors)),
        my_client_id_(static_cast<int64_t>(rados_get_instance_id(cluster))) {}
  ~RbdBackend() override {
    rados_ioctx_destroy(io_);
    rados_shutdown(cluster_);
  }
  RbdBackend(const RbdBackend&) = delete;
  RbdBackend& operator=(const RbdBackend&) = delete;

  std::string Name() const override { return "rbd"; }
  uint64_t AllocationGranularity() const override { return kGranularity; }
  std::vector<std::string> SupportedParameters() const override { return {}; }

  StatusOr<VolumeRecord> CreateVolume(const CreateVolumeSpec& spec) override;
  Status DeleteVolume(const std::string& volume_id) override;
  StatusOr<VolumeRecord> ExpandVolume(const std::string& volume_id, uint64_t new_size_bytes) override;
  StatusOr<VolumeRecord> GrantAccess(const std::string& volume_id, const AccessGrant& grant) override;
  Status RevokeAccess(const std::string& volume_id, const std::string& initiator_iqn) override;
  StatusOr<VolumeRecord> GetVolume(const std::string& volume_id) override;
  StatusOr<VolumeHealth> CheckVolume(const std::string& volume_id) override;
  StatusOr<Page<VolumeRecord>> ListVolumes(const std::string& start_token, int max_entries) override;
  StatusOr<uint64_t> AvailableBytes() override;
  StatusOr<SnapshotRecord> CreateSnapshot(const std::string& source_volume_id, const std::string& name) override;
  Status DeleteSnapshot(const std::string& snapshot_id) override;
  StatusOr<SnapshotRecord> GetSnapshot(const std::string& snapshot_id) override;
  StatusOr<Page<SnapshotRecord>> ListSnapshots(const std::string& source_volume_id, const std::string& start_token,
                                               int max_entries) override;
  Status Healthy() override;
  bool MayHoldVolume(const std::string& volume_id) const override { return ParseRbdVolumeId(volume_id).has_value(); }

 private:
  std::string Spec(const std::string& image) const { return options_.pool + "/" + image; }
  // The image a volume id names when it is ours (this pool, our format).
  std::optional<std::string> OurImage(std::string_view volume_id) const {
    auto ref = ParseRbdVolumeId(volume_id);
    if (!ref || ref->pool != options_.pool) return std::nullopt;
    return ref->image;
  }
  std::optional<SnapRef> OurSnapshot(std::string_view snapshot_id) const {
    auto ref = ParseSnapshotId(snapshot_id);
    if (!ref || ref->volume.pool != options_.pool) return std::nullopt;
    return ref;
  }

  StatusOr<ImageHandle> Open(const std::string& image, const char* snap = nullptr, bool read_only = false) const;
  StatusOr<VolumeRecord> Record(const std::string& image, rbd_image_t handle,
                                const std::map<std::string, std::string>& meta) const;
  StatusOr<VolumeRecord> Finish(const std::string& image, const CreateVolumeSpec& spec);
  StatusOr<VolumeRecord> Compare(const std::string& image, rbd_image_t handle, const CreateVolumeSpec& spec);
  Status CloneFromSnapshot(const std::string& image, const CreateVolumeSpec& spec);
  Status CloneFromVolume(const std::string& image, const CreateVolumeSpec& spec);
  Status RemoveTempSnapshot(const std::string& source_image, const std::string& temp_snap);
  Status FlattenChildren(const std::string& image, const std::string& snap);
  StatusOr<SnapshotRecord> SnapRecord(const std::string& image, rbd_image_t handle, const SnapInfo& snap,
                                      const std::string& co_name) const;
  StatusOr<std::map<std::string, json>> SnapIndex() const;
  std::vector<Watcher> OthersOnly(std::vector<Watcher> watchers) const;
  void Unfence(const std::vector<std::string>& addrs, std::string_view volume_id);
  StatusOr<std::string> MonCommand(const std::string& command) const;

  RbdBackendOptions options_;  // key cleared after connecting
  rados_t cluster_;
  rados_ioctx_t io_;
  std::string monitors_;
  int64_t my_client_id_;
  ImageLocks locks_;
};

StatusOr<ImageHandle> RbdBackend::Open(const std::string& image, const char* snap, bool read_only) const {
  rbd_image_t handle = nullptr;
  // Read-only opens register no watch and take no lock: the cheap way to
  // look at an image that a node may be using.
  int r =
      read_only ? rbd_open_read_only(io_, image.c_str(), &handle, snap) : rbd_open(io_, image.c_str(), &handle, snap);
  if (r == -ENOENT) {
    return NotFound("rbd image " + Spec(image) + (snap != nullptr ? "@" + std::string(snap) : "") + " not found");
  }
  if (r < 0) return CephError(r, "open rbd image " + Spec(image));
  return ImageHandle(handle);
}

StatusOr<std::string> RbdBackend::MonCommand(const std::string& command) const {
  const char* cmd[] = {command.c_str()};
  char* out = nullptr;
  size_t out_len = 0;
  char* status = nullptr;
  size_t status_len = 0;
  int r = rados_mon_command(cluster_, cmd, 1, "", 0, &out, &out_len, &status, &status_len);
  std::string result(out != nullptr ? out : "", out_len);
  std::string message(status != nullptr ? status : "", status_len);
  rados_buffer_free(out);
  rados_buffer_free(status);
  if (r < 0) return CephError(r, "ceph mon command " + command + (message.empty() ? "" : ": " + message));
  return result;
}

std::vector<Watcher> RbdBackend::OthersOnly(std::vector<Watcher> watchers) const {
  std::erase_if(watchers, [&](const Watcher& w) { return w.client_id == my_client_id_; });
  return watchers;
}

StatusOr<VolumeRecord> RbdBackend::Record(const std::string& image, rbd_image_t handle,
                                          const std::map<std::string, std::string>& meta) const {
  VolumeRecord record;
  record.id = VolumeId(options_.pool, image);
  auto name = meta.find(kMetaName);
  if (name == meta.end()) return NotFound("volume " + record.id + " is not (yet) complete");
  record.name = name->second;
  int r = rbd_get_size(handle, &record.size_bytes);
  if (r < 0) return CephError(r, "size of rbd image " + Spec(image));
  timespec created{};
  if (rbd_get_create_timestamp(handle, &created) == 0) record.created_unix_seconds = created.tv_sec;
  if (auto it = meta.find(kMetaSource); it != meta.end()) record.source = SourceFromString(it->second);
  char image_id[128] = {};
  r = rbd_get_id(handle, image_id, sizeof(image_id));
  if (r < 0) return CephError(r, "id of rbd image " + Spec(image));
  record.transport = "rbd";
  record.transport_params = {
      {rbd_params::kPool, options_.pool},      {rbd_params::kImage, image},
      {rbd_params::kImageId, image_id},        {rbd_params::kMonitors, monitors_},
      {rbd_params::kUser, options_.ceph_user},
  };
  for (const auto& [key, value] : meta) {
    if (key.starts_with(kMetaParamPrefix)) {
      record.parameters[key.substr(sizeof(kMetaParamPrefix) - 1)] = value;
    } else if (key.starts_with(kMetaGrantPrefix)) {
      json j = json::parse(value, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) return Internal("volume " + record.id + ": unreadable metadata " + key);
      GrantRecord grant;
      grant.node_id = j.value("node_id", "");
      grant.initiator_iqn = j.value("initiator_iqn", "");
      grant.read_only = j.value("read_only", false);
      grant.capability = j.value("capability", "");
      record.grants.push_back(std::move(grant));
    }
  }
  record.topology = options_.topology;
  return record;
}

StatusOr<VolumeRecord> RbdBackend::CreateVolume(const CreateVolumeSpec& spec) {
  if (spec.name.empty()) return InvalidArgument("volume name is empty");
  if (spec.size_bytes == 0 || spec.size_bytes % kGranularity != 0) {
    return InvalidArgument("volume " + spec.name + ": size " + std::to_string(spec.size_bytes) +
                           " is not a positive multiple of " + std::to_string(kGranularity));
  }
  const std::string image = kVolumePrefix + NameHash(spec.name);
  auto held = locks_.Lock(image);

  // Read-only: a retried create must not disturb a node already using it.
  auto existing = Open(image, nullptr, /*read_only=*/true);
  if (existing.ok()) return Compare(image, existing->get(), spec);
  if (existing.status().code() != StatusCode::kNotFound) return existing.status();

  switch (spec.source.kind) {
    case ContentSource::Kind::kNone: {
      rbd_image_options_t opts;
      rbd_image_options_create(&opts);
      rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_FEATURES, kImageFeatures);
      rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_ORDER, kImageOrder);
      int r = rbd_create4(io_, image.c_str(), spec.size_bytes, opts);
      rbd_image_options_destroy(opts);
      if (r < 0 && r != -EEXIST) return CephError(r, "create rbd image " + Spec(image));
      break;
    }
    case ContentSource::Kind::kSnapshot:
      BLOCKCSI_RETURN_IF_ERROR(CloneFromSnapshot(image, spec));
      break;
    case ContentSource::Kind::kVolume:
      BLOCKCSI_RETURN_IF_ERROR(CloneFromVolume(image, spec));
      break;
  }
  LogInfo("rbd image created", {{"volume", VolumeId(options_.pool, image)}, {"name", spec.name}});
  return Finish(image, spec);
}

// An image of this name exists: either our earlier, complete create (compare
// it with the request) or one that stopped half-way (finish it).
StatusOr<VolumeRecord> RbdBackend::Compare(const std::string& image, rbd_image_t handle, const CreateVolumeSpec& spec) {
  const std::string id = VolumeId(options_.pool, image);
  BLOCKCSI_ASSIGN_OR_RETURN(auto meta, ListMetadata(handle, Spec(image)));
  auto name = meta.find(kMetaName);
  if (name == meta.end()) return Finish(image, spec);
  // A clone starts with its parent's metadata (rbd_clone3 copies it), name
  // included. Image names are derived from the CO's name, so another name on
  // a clone we were asked to make is the parent's: an unfinished create.
  // (Finish removes the inherited name first, so a name that is still
  // there with a source other than ours was inherited.)
  if (name->second != spec.name && spec.source.kind != ContentSource::Kind::kNone &&
      (meta.contains(kMetaSource) ? meta[kMetaSource] : "") != SourceString(spec.source)) {
    return Finish(image, spec);
  }
  if (name->second != spec.name) {
    return AlreadyExists("volume " + id + " belongs to another name (\"" + name->second + "\")");
  }
  std::string source = meta.contains(kMetaSource) ? meta[kMetaSource] : "";
  if (source != SourceString(spec.source)) {
    return AlreadyExists("volume \"" + spec.name + "\" exists with another content source (" +
                         (source.empty() ? "none" : source) + ")");
  }
  uint64_t size = 0;
  int r = rbd_get_size(handle, &size);
  if (r < 0) return CephError(r, "size of rbd image " + Spec(image));
  if (size != spec.size_bytes) {
    return AlreadyExists("volume \"" + spec.name + "\" exists with size " + std::to_string(size) + ", not " +
                         std::to_string(spec.size_bytes));
  }
  return Record(image, handle, meta);
}

Status RbdBackend::CloneFromSnapshot(const std::string& image, const CreateVolumeSpec& spec) {
  auto ref = OurSnapshot(spec.source.id);
  if (!ref) return NotFound("source snapshot " + spec.source.id + " not found");
  BLOCKCSI_ASSIGN_OR_RETURN(auto parent, Open(ref->volume.image, ref->snap.c_str(), /*read_only=*/true));
  uint64_t snap_size = 0;
  int r = rbd_get_size(parent.get(), &snap_size);
  if (r < 0) return CephError(r, "size of snapshot " + spec.source.id);
  if (spec.size_bytes < snap_size) {
    return OutOfRange("volume \"" + spec.name + "\": size " + std::to_string(spec.size_bytes) +
                      " is smaller than snapshot " + spec.source.id + " (" + std::to_string(snap_size) + ")");
  }
  parent.reset();
  {
    // Snapshots are protected when made; protect again in case an admin
    // unprotected it, since a clone v1 needs it.
    BLOCKCSI_ASSIGN_OR_RETURN(auto source, Open(ref->volume.image));
    r = rbd_snap_protect(source.get(), ref->snap.c_str());
    if (r < 0 && r != -EBUSY) return CephError(r, "protect snapshot " + spec.source.id);
  }
  rbd_image_options_t opts;
  rbd_image_options_create(&opts);
  rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_FEATURES, kImageFeatures);
  rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_ORDER, kImageOrder);
  r = rbd_clone3(io_, ref->volume.image.c_str(), ref->snap.c_str(), io_, image.c_str(), opts);
  rbd_image_options_destroy(opts);
  if (r < 0 && r != -EEXIST) return CephError(r, "clone " + spec.source.id + " to " + Spec(image));
  return OkStatus();
}

Status RbdBackend::CloneFromVolume(const std::string& image, const CreateVolumeSpec& spec) {
  auto source_image = OurImage(spec.source.id);
  if (!source_image) return NotFound("source volume " + spec.source.id + " not found");
  BLOCKCSI_ASSIGN_OR_RETURN(auto source, Open(*source_image));
  uint64_t size = 0;
  int r = rbd_get_size(source.get(), &size);
  if (r < 0) return CephError(r, "size of volume " + spec.source.id);
  if (spec.size_bytes < size) {
    return OutOfRange("volume \"" + spec.name + "\": size " + std::to_string(spec.size_bytes) +
                      " is smaller than source volume " + spec.source.id + " (" + std::to_string(size) + ")");
  }
  // Named after the new image, so a retry after a crash finds its own
  // temporary snapshot and a concurrent clone of the same source another.
  const std::string temp = kTempSnapPrefix + image.substr(sizeof(kVolumePrefix) - 1);
  bool exists = false;
  r = rbd_snap_exists(source.get(), temp.c_str(), &exists);
  if (r < 0) return CephError(r, "look up snapshot " + temp + " of " + Spec(*source_image));
  if (!exists) {
    r = rbd_snap_create(source.get(), temp.c_str());
    if (r < 0 && r != -EEXIST) return CephError(r, "snapshot " + Spec(*source_image) + "@" + temp);
  }
  r = rbd_snap_protect(source.get(), temp.c_str());
  if (r < 0 && r != -EBUSY) return CephError(r, "protect " + Spec(*source_image) + "@" + temp);
  rbd_image_options_t opts;
  rbd_image_options_create(&opts);
  rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_FEATURES, kImageFeatures);
  rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_ORDER, kImageOrder);
  r = rbd_clone3(io_, source_image->c_str(), temp.c_str(), io_, image.c_str(), opts);
  rbd_image_options_destroy(opts);
  if (r < 0 && r != -EEXIST) return CephError(r, "clone " + spec.source.id + " to " + Spec(image));
  return OkStatus();
}

Status RbdBackend::RemoveTempSnapshot(const std::string& source_image, const std::string& temp_snap) {
  auto source = Open(source_image);
  if (!source.ok()) return source.status().code() == StatusCode::kNotFound ? OkStatus() : source.status();
  int r = rbd_snap_unprotect(source->get(), temp_snap.c_str());
  if (r < 0 && r != -EINVAL && r != -ENOENT) return CephError(r, "unprotect " + Spec(source_image) + "@" + temp_snap);
  r = rbd_snap_remove(source->get(), temp_snap.c_str());
  if (r < 0 && r != -ENOENT) return CephError(r, "remove " + Spec(source_image) + "@" + temp_snap);
  return OkStatus();
}

// The steps after the image exists, each idempotent so that a retry after a
// crash anywhere completes the volume: detach a clone of a volume from its
// temporary snapshot, grow to the requested size, then write the metadata
// with the name last (the commit mark that GetVolume and ListVolumes see).
StatusOr<VolumeRecord> RbdBackend::Finish(const std::string& image, const CreateVolumeSpec& spec) {
  BLOCKCSI_ASSIGN_OR_RETURN(auto handle, Open(image));
  if (spec.source.kind != ContentSource::Kind::kNone) {
    // What the clone inherited from its parent is the parent's: its name
    // (the commit mark — removed first), grants, fences, client addresses,
    // parameters and source. Left in place, a restore of a published volume
    // would come out published to the parent's nodes.
    BLOCKCSI_ASSIGN_OR_RETURN(auto inherited, ListMetadata(handle.get(), Spec(image)));
    std::vector<std::string> stale;
    if (auto it = inherited.find(kMetaName); it != inherited.end() && it->second != spec.name)
      stale.push_back(kMetaName);
    for (const auto& [key, value] : inherited) {
      bool ours_to_drop = key.starts_with(kMetaGrantPrefix) || key.starts_with(kMetaFencePrefix) ||
                          key.starts_with(kMetaClientPrefix) || key.starts_with(kMetaParamPrefix) ||
                          (key == kMetaSource && value != SourceString(spec.source));
      if (ours_to_drop) stale.push_back(key);
    }
    for (const auto& key : stale) {
      int r = rbd_metadata_remove(handle.get(), key.c_str());
      if (r < 0 && r != -ENOENT) return CephError(r, "remove inherited metadata " + key + " of " + Spec(image));
    }
  }
  if (spec.source.kind == ContentSource::Kind::kVolume) {
    rbd_linked_image_spec_t parent{};
    rbd_snap_spec_t parent_snap{};
    int r = rbd_get_parent(handle.get(), &parent, &parent_snap);
    if (r == 0) {
      std::string parent_image = parent.image_name != nullptr ? parent.image_name : "";
      std::string snap = parent_snap.name != nullptr ? parent_snap.name : "";
      rbd_linked_image_spec_cleanup(&parent);
      rbd_snap_spec_cleanup(&parent_snap);
      r = rbd_flatten(handle.get());
      if (r < 0) return CephError(r, "flatten " + Spec(image));
      if (snap.starts_with(kTempSnapPrefix)) BLOCKCSI_RETURN_IF_ERROR(RemoveTempSnapshot(parent_image, snap));
    } else if (r != -ENOENT) {
      return CephError(r, "parent of " + Spec(image));
    }
  }
  uint64_t size = 0;
  int r = rbd_get_size(handle.get(), &size);
  if (r < 0) return CephError(r, "size of " + Spec(image));
  if (size < spec.size_bytes) {
    r = rbd_resize(handle.get(), spec.size_bytes);
    if (r < 0) return CephError(r, "resize " + Spec(image));
  }
  std::string source = SourceString(spec.source);
  if (!source.empty()) {
    r = rbd_metadata_set(handle.get(), kMetaSource, source.c_str());
    if (r < 0) return CephError(r, "set metadata of " + Spec(image));
  }
  for (const auto& [key, value] : spec.parameters) {
    r = rbd_metadata_set(handle.get(), (kMetaParamPrefix + key).c_str(), value.c_str());
    if (r < 0) return CephError(r, "set metadata of " + Spec(image));
  }
  r = rbd_metadata_set(handle.get(), kMetaName, spec.name.c_str());
  if (r < 0) return CephError(r, "set metadata of " + Spec(image));
  BLOCKCSI_ASSIGN_OR_RETURN(auto meta, ListMetadata(handle.get(), Spec(image)));
  return Record(image, handle.get(), meta);
}

Status RbdBackend::DeleteVolume(const std::string& volume_id) {
  auto image = OurImage(volume_id);
  if (!image) return OkStatus();
  auto held = locks_.Lock(*image);
  std::vector<std::string> fenced;
  {
    // Read-only: our own watch would otherwise be one more watcher to skip.
    auto handle = Open(*image, nullptr, /*read_only=*/true);
    if (!handle.ok()) return handle.status().code() == StatusCode::kNotFound ? OkStatus() : handle.status();
    BLOCKCSI_ASSIGN_OR_RETURN(auto meta, ListMetadata(handle->get(), Spec(*image)));
    std::vector<std::string> nodes;
    for (const auto& [key, value] : meta) {
      if (key.starts_with(kMetaGrantPrefix)) nodes.push_back(key.substr(sizeof(kMetaGrantPrefix) - 1));
      if (key.starts_with(kMetaFencePrefix)) {
        json j = json::parse(value, nullptr, false);
        if (j.is_object() && j["addrs"].is_array()) {
          for (const auto& a : j["addrs"]) {
            if (a.is_string()) fenced.push_back(a.get<std::string>());
          }
        }
      }
    }
    if (!nodes.empty()) {
      return FailedPrecondition("volume " + volume_id + " is still published to node(s) " + JoinComma(nodes));
    }
    BLOCKCSI_ASSIGN_OR_RETURN(auto all_watchers, ListWatchers(handle->get(), Spec(*image)));
    auto watchers = OthersOnly(std::move(all_watchers));
    if (!watchers.empty()) {
      std::vector<std::string> who;
      who.reserve(watchers.size());
      for (const auto& w : watchers) who.push_back("client." + std::to_string(w.client_id) + " at " + w.addr);
      return FailedPrecondition("volume " + volume_id + " is in use: watched by " + JoinComma(who));
    }
    BLOCKCSI_ASSIGN_OR_RETURN(auto snaps, ListSnaps(handle->get(), Spec(*image)));
    std::vector<std::string> blocking;
    for (const auto& snap : snaps) {
      if (snap.name.starts_with(kTempSnapPrefix)) {
        // A clone of this volume that stopped half-way. Its new image, if it
        // exists and still hangs off this snapshot, is being finished by a
        // retry; otherwise the snapshot is litter.
        std::string child = kVolumePrefix + snap.name.substr(sizeof(kTempSnapPrefix) - 1);
        auto child_handle = Open(child, nullptr, /*read_only=*/true);
        bool in_use = false;
        if (child_handle.ok()) {
          rbd_linked_image_spec_t parent{};
          rbd_snap_spec_t parent_snap{};
          if (rbd_get_parent(child_handle->get(), &parent, &parent_snap) == 0) {
            in_use = true;
            rbd_linked_image_spec_cleanup(&parent);
            rbd_snap_spec_cleanup(&parent_snap);
          }
        }
        if (!in_use) {
          handle->reset();
          BLOCKCSI_RETURN_IF_ERROR(RemoveTempSnapshot(*image, snap.name));
          BLOCKCSI_ASSIGN_OR_RETURN(*handle, Open(*image, nullptr, /*read_only=*/true));
          continue;
        }
      }
      blocking.push_back(SnapshotId(options_.pool, *image, snap.name));
    }
    if (!blocking.empty()) {
      return FailedPrecondition("volume " + volume_id + " has snapshots: " + JoinComma(blocking));
    }
  }
  int r = rbd_remove(io_, image->c_str());
  if (r == -EBUSY) return FailedPrecondition("volume " + volume_id + " is in use (image has watchers)");
  if (r == -ENOTEMPTY) return FailedPrecondition("volume " + volume_id + " has snapshots");
  if (r < 0 && r != -ENOENT) return CephError(r, "remove rbd image " + Spec(*image));
  LogInfo("rbd image removed", {{"volume", volume_id}});
  // The fenced clients had this image only (one connection per attachment),
  // so with the image gone their entries protect nothing.
  Unfence(fenced, volume_id);
  return OkStatus();
}

void RbdBackend::Unfence(const std::vector<std::string>& addrs, std::string_view volume_id) {
  for (const auto& addr : addrs) {
    json cmd = {{"prefix", "osd blocklist"}, {"blocklistop", "rm"}, {"addr", addr}};
    auto out = MonCommand(cmd.dump());
    RecordTargetOperation("unblocklist", out.status());
    if (!out.ok() && out.status().code() != StatusCode::kNotFound) {
      // Not fatal: the entry expires on its own after fence_expiry.
      LogWarn("rbd unfence failed", {{"volume", volume_id}, {"client", addr}, {"error", out.status().ToString()}});
      continue;
    }
    LogInfo("rbd client unfenced", {{"volume", volume_id}, {"client", addr}});
  }
}

StatusOr<VolumeRecord> RbdBackend::ExpandVolume(const std::string& volume_id, uint64_t new_size_bytes) {
  auto image = OurImage(volume_id);
  if (!image) return NotFound("volume " + volume_id + " not found");
  if (new_size_bytes == 0) return InvalidArgument("volume " + volume_id + ": new size is 0");
  uint64_t size = (new_size_bytes + kGranularity - 1) / kGranularity * kGranularity;
  auto held = locks_.Lock(*image);
  BLOCKCSI_ASSIGN_OR_RETURN(auto handle, Open(*image));
  BLOCKCSI_ASSIGN_OR_RETURN(auto meta, ListMetadata(handle.get(), Spec(*image)));
  if (!meta.contains(kMetaName)) return NotFound("volume " + volume_id + " not found");
  uint64_t current = 0;
  int r = rbd_get_size(handle.get(), &current);
  if (r < 0) return CephError(r, "size of " + Spec(*image));
  if (size < current) {
    return OutOfRange("volume " + volume_id + ": cannot shrink from " + std::to_string(current) + " to " +
                      std::to_string(size));
  }
  if (size > current) {
    r = rbd_resize(handle.get(), size);
    if (r < 0) return CephError(r, "resize " + Spec(*image));
    LogInfo("rbd image expanded", {{"volume", volume_id}, {"size", std::to_string(size)}});
  }
  return Record(*image, handle.get(), meta);
}

std::string NodeIdOf(const std::string& node_id, const std::string& initiator_iqn) {
  if (!node_id.empty()) return node_id;
  if (auto id = NodeIdFromInitiatorIqn(initiator_iqn)) return *id;
  return "";
}

StatusOr<VolumeRecord> RbdBackend::GrantAccess(const std::string& volume_id, const AccessGrant& grant) {
  auto image = OurImage(volume_id);
  if (!image) return NotFound("volume " + volume_id + " not found");
  const std::string node = NodeIdOf(grant.node_id, grant.initiator_iqn);
  BLOCKCSI_RETURN_IF_ERROR(ValidateNodeId(node));
  if (grant.chap.enabled()) {
    return InvalidArgument("volume " + volume_id + ": rbd volumes authenticate with cephx, not CHAP");
  }
  auto held = locks_.Lock(*image);
  BLOCKCSI_ASSIGN_OR_RETURN(auto handle, Open(*image));
  BLOCKCSI_ASSIGN_OR_RETURN(auto meta, ListMetadata(handle.get(), Spec(*image)));
  if (!meta.contains(kMetaName)) return NotFound("volume " + volume_id + " not found");

  const std::string grant_key = kMetaGrantPrefix + node;
  if (auto it = meta.find(grant_key); it != meta.end()) {
    json j = json::parse(it->second, nullptr, false);
    if (j.is_object() &&
        (j.value("capability", "") != grant.capability || j.value("read_only", false) != grant.read_only)) {
      return AlreadyExists("volume " + volume_id + " is already published to node " + node +
                           " with another capability or read-only flag");
    }
  }

  // Lift this node's earlier fence once none of the fenced clients is still
  // a watcher: by then the OSDs have dropped them, and the node is about to
  // attach with a fresh client (a new nonce) anyway.
  const std::string fence_key = kMetaFencePrefix + node;
  if (auto it = meta.find(fence_key); it != meta.end()) {
    json j = json::parse(it->second, nullptr, false);
    std::vector<std::string> addrs;
    if (j.is_object() && j["addrs"].is_array()) {
      for (const auto& a : j["addrs"]) {
        if (a.is_string()) addrs.push_back(a.get<std::string>());
      }
    }
    BLOCKCSI_ASSIGN_OR_RETURN(auto watchers, ListWatchers(handle.get(), Spec(*image)));
    bool still_there = std::any_of(addrs.begin(), addrs.end(), [&](const std::string& addr) {
      return std::any_of(watchers.begin(), watchers.end(), [&](const Watcher& w) { return w.addr == addr; });
    });
    if (!still_there) {
      Unfence(addrs, volume_id);
      int r = rbd_metadata_remove(handle.get(), fence_key.c_str());
      if (r < 0 && r != -ENOENT) return CephError(r, "remove metadata of " + Spec(*image));
    } else {
      LogWarn("rbd fence kept: a fenced client still watches the image", {{"volume", volume_id}, {"node", node}});
    }
  }

  json record = {{"node_id", node},
                 {"initiator_iqn", grant.initiator_iqn},
                 {"read_only", grant.read_only},
                 {"capability", grant.capability}};
  int r = rbd_metadata_set(handle.get(), grant_key.c_str(), record.dump().c_str());
  if (r < 0) return CephError(r, "set metadata of " + Spec(*image));
  LogInfo("rbd volume published", {{"volume", volume_id}, {"node", node}});
  BLOCKCSI_ASSIGN_OR_RETURN(meta, ListMetadata(handle.get(), Spec(*image)));
  return Record(*image, handle.get(), meta);
}

Status RbdBackend::RevokeAccess(const std::string& volume_id, const std::string& initiator_iqn) {
  auto image = OurImage(volume_id);
  if (!image) return OkStatus();
  std::string node = NodeIdOf("", initiator_iqn);
  if (node.empty()) node = initiator_iqn;             // a bare node id
  if (!ValidateNodeId(node).ok()) return OkStatus();  // cannot be a grant of ours
  auto held = locks_.Lock(*image);
  auto opened = Open(*image);
  if (!opened.ok()) return opened.status().code() == StatusCode::kNotFound ? OkStatus() : opened.status();
  ImageHandle handle = std::move(opened).value();
  BLOCKCSI_ASSIGN_OR_RETURN(auto meta, ListMetadata(handle.get(), Spec(*image)));

  const std::string grant_key = kMetaGrantPrefix + node;
  const std::string client_key = kMetaClientPrefix + node;
  bool others_granted = false;
  for (const auto& [key, value] : meta) {
    if (key.starts_with(kMetaGrantPrefix) && key != grant_key) others_granted = true;
  }

  // Whose clients to cut off: the ones the node said are its own, and — when
  // nobody else may use the image after this — every other watcher too.
  std::set<std::string> fence;
  if (auto it = meta.find(client_key); it != meta.end()) {
    for (auto& addr : SplitComma(it->second)) fence.insert(addr);
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto all_watchers, ListWatchers(handle.get(), Spec(*image)));
  auto watchers = OthersOnly(std::move(all_watchers));
  if (!others_granted) {
    for (const auto& w : watchers) fence.insert(w.addr);
  } else if (!meta.contains(client_key) && !watchers.empty()) {
    LogWarn("rbd revoke cannot tell this node's clients from other nodes'; not fencing",
            {{"volume", volume_id}, {"node", node}});
  }

  std::vector<std::string> fenced;
  if (auto it = meta.find(kMetaFencePrefix + node); it != meta.end()) {
    json j = json::parse(it->second, nullptr, false);
    if (j.is_object() && j["addrs"].is_array()) {
      for (const auto& a : j["addrs"]) {
        if (a.is_string()) fenced.push_back(a.get<std::string>());
      }
    }
  }
  for (const auto& addr : fence) {
    std::string mutable_addr = addr;
    int r = rados_blocklist_add(cluster_, mutable_addr.data(), static_cast<uint32_t>(options_.fence_expiry.count()));
    if (r < 0) {
      std::string what = "blocklist client " + addr;
      what += " of node " + node;
      what += " (volume " + volume_id + ")";
      Status failed = CephError(r, what);
      RecordTargetOperation("blocklist", failed);
      return failed;
    }
    RecordTargetOperation("blocklist", OkStatus());
    LogInfo("rbd client fenced", {{"volume", volume_id}, {"node", node}, {"client", addr}});
    if (std::find(fenced.begin(), fenced.end(), addr) == fenced.end()) fenced.push_back(addr);
  }
  if (!fence.empty()) {
    // Record before anything else can fail, so the entries are lifted later.
    json j = {{"addrs", fenced}, {"at", static_cast<int64_t>(std::time(nullptr))}};
    int r = rbd_metadata_set(handle.get(), (kMetaFencePrefix + node).c_str(), j.dump().c_str());
    if (r < 0) return CephError(r, "set metadata of " + Spec(*image));
    // A blocklisted owner cannot release its exclusive lock; break it so the
    // next node's client takes the lock at once instead of waiting it out.
    BLOCKCSI_ASSIGN_OR_RETURN(auto lockers, ListLockers(handle.get(), Spec(*image)));
    for (const auto& locker : lockers) {
      if (!fence.contains(locker.addr)) continue;
      r = rbd_break_lock(handle.get(), locker.client.c_str(), locker.cookie.c_str());
      if (r < 0 && r != -ENOENT) return CephError(r, "break lock of " + locker.client + " on " + Spec(*image));
    }
  }
  for (const std::string& key : {grant_key, client_key}) {
    int r = rbd_metadata_remove(handle.get(), key.c_str());
    if (r < 0 && r != -ENOENT) return CephError(r, "remove metadata of " + Spec(*image));
  }
  LogInfo("rbd volume unpublished", {{"volume", volume_id}, {"node", node}});
  return OkStatus();
}

StatusOr<VolumeRecord> RbdBackend::GetVolume(const std::string& volume_id) {
  auto image = OurImage(volume_id);
  if (!image) return NotFound("volume " + volume_id + " not found");
  BLOCKCSI_ASSIGN_OR_RETURN(auto handle, Open(*image, nullptr, /*read_only=*/true));
  BLOCKCSI_ASSIGN_OR_RETURN(auto meta, ListMetadata(handle.get(), Spec(*image)));
  return Record(*image, handle.get(), meta);
}

StatusOr<VolumeHealth> RbdBackend::CheckVolume(const std::string& volume_id) {
  auto image = OurImage(volume_id);
  if (!image) return NotFound("volume " + volume_id + " not found");
  auto handle = Open(*image, nullptr, /*read_only=*/true);
  if (!handle.ok()) {
    if (handle.status().code() != StatusCode::kNotFound) return handle.status();
    return VolumeHealth{true, "rbd image " + Spec(*image) + " is missing"};
  }
  return VolumeHealth{};
}

StatusOr<Page<VolumeRecord>> RbdBackend::ListVolumes(const std::string& start_token, int max_entries) {
  // The token is the image name to resume at: still meaningful when images
  // come and go between pages; anything else was not made by us.
  if (!start_token.empty() && !HasHashedName(start_token, kVolumePrefix)) {
    return Aborted("list volumes: unknown starting token \"" + start_token + "\"");
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto names, ListImageNames(io_));
  Page<VolumeRecord> page;
  for (const auto& name : names) {
    if (!HasHashedName(name, kVolumePrefix) || name < start_token) continue;
    if (max_entries > 0 && static_cast<int>(page.items.size()) == max_entries) {
      page.next_token = name;
      break;
    }
    auto handle = Open(name, nullptr, /*read_only=*/true);
    if (!handle.ok()) {
      if (handle.status().code() == StatusCode::kNotFound) continue;  // removed meanwhile
      return handle.status();
    }
    BLOCKCSI_ASSIGN_OR_RETURN(auto meta, ListMetadata(handle->get(), Spec(name)));
    if (!meta.contains(kMetaName)) continue;  // half-made: not a volume yet
    BLOCKCSI_ASSIGN_OR_RETURN(auto record, Record(name, handle->get(), meta));
    page.items.push_back(std::move(record));
  }
  return page;
}

StatusOr<uint64_t> RbdBackend::AvailableBytes() {
  // Pool stats come from the mgr; max_avail already accounts for the pool's
  // replication and the fullest OSD, which raw cluster stats would not.
  BLOCKCSI_ASSIGN_OR_RETURN(std::string out, MonCommand(R"({"prefix":"df","format":"json"})"));
  json j = json::parse(out, nullptr, false);
  if (!j.is_object() || !j["pools"].is_array()) return Unavailable("ceph df: unreadable answer");
  for (const auto& pool : j["pools"]) {
    if (pool.value("name", "") != options_.pool) continue;
    const auto& stats = pool["stats"];
    if (!stats.is_object() || !stats["max_avail"].is_number()) break;
    return stats["max_avail"].get<uint64_t>();
  }
  return Unavailable("ceph df: no stats for pool " + options_.pool + " (is a ceph-mgr running?)");
}

StatusOr<std::map<std::string, json>> RbdBackend::SnapIndex() const {
  size_t key_len = 4096, val_len = 4096;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string keys(key_len, '\0'), vals(val_len, '\0');
    int r = rbd_pool_metadata_list(io_, kPoolMetaSnapPrefix, 0, keys.data(), &key_len, vals.data(), &val_len);
    if (r == -ERANGE) continue;
    if (r == -ENOENT) return std::map<std::string, json>{};
    if (r < 0) return CephError(r, "list metadata of pool " + options_.pool);
    auto k = SplitNul(keys, key_len);
    auto v = SplitNul(vals, val_len);
    std::map<std::string, json> out;
    for (size_t i = 0; i < k.size() && i < v.size(); ++i) {
      if (!k[i].starts_with(kPoolMetaSnapPrefix)) continue;
      json j = json::parse(v[i], nullptr, false);
      if (j.is_object()) out[k[i].substr(sizeof(kPoolMetaSnapPrefix) - 1)] = std::move(j);
    }
    return out;
  }
  return Internal("list metadata of pool " + options_.pool + ": buffer keeps growing");
}

StatusOr<SnapshotRecord> RbdBackend::SnapRecord(const std::string& image, rbd_image_t handle, const SnapInfo& snap,
                                                const std::string& co_name) const {
  SnapshotRecord record;
  record.id = SnapshotId(options_.pool, image, snap.name);
  record.name = co_name;
  record.source_volume_id = VolumeId(options_.pool, image);
  record.size_bytes = snap.size;
  timespec ts{};
  if (rbd_snap_get_timestamp(handle, snap.id, &ts) == 0) record.created_unix_seconds = ts.tv_sec;
  record.ready_to_use = true;  // RBD snapshots are complete when made
  return record;
}

StatusOr<SnapshotRecord> RbdBackend::CreateSnapshot(const std::string& source_volume_id, const std::string& name) {
  if (name.empty()) return InvalidArgument("snapshot name is empty");
  auto image = OurImage(source_volume_id);
  if (!image) return NotFound("source volume " + source_volume_id + " not found");
  const std::string snap = kSnapPrefix + NameHash(name);
  auto held = locks_.Lock(*image);
  BLOCKCSI_ASSIGN_OR_RETURN(auto handle, Open(*image));
  BLOCKCSI_ASSIGN_OR_RETURN(auto meta, ListMetadata(handle.get(), Spec(*image)));
  if (!meta.contains(kMetaName)) return NotFound("source volume " + source_volume_id + " not found");

  // A snapshot name is unique across volumes: the pool index says where it
  // lives. An entry whose snapshot is gone is stale (a crash between index
  // and snapshot, or a delete that stopped half-way) and is overwritten.
  const std::string index_key = kPoolMetaSnapPrefix + snap;
  BLOCKCSI_ASSIGN_OR_RETURN(auto index, SnapIndex());
  if (auto it = index.find(snap); it != index.end()) {
    std::string other = it->second.value("volume", "");
    if (other != *image && HasHashedName(other, kVolumePrefix)) {
      auto other_handle = Open(other, nullptr, /*read_only=*/true);
      bool exists = false;
      if (other_handle.ok() && rbd_snap_exists(other_handle->get(), snap.c_str(), &exists) == 0 && exists) {
        return AlreadyExists("snapshot \"" + name + "\" exists for another volume (" + VolumeId(options_.pool, other) +
                             ")");
      }
    }
  }
  json entry = {{"volume", *image}, {"name", name}};
  int r = rbd_pool_metadata_set(io_, index_key.c_str(), entry.dump().c_str());
  if (r < 0) return CephError(r, "set metadata of pool " + options_.pool);

  bool exists = false;
  r = rbd_snap_exists(handle.get(), snap.c_str(), &exists);
  if (r < 0) return CephError(r, "look up snapshot " + snap + " of " + Spec(*image));
  if (!exists) {
    r = rbd_snap_create(handle.get(), snap.c_str());
    if (r < 0 && r != -EEXIST) return CephError(r, "snapshot " + Spec(*image) + "@" + snap);
    LogInfo("rbd snapshot created", {{"snapshot", SnapshotId(options_.pool, *image, snap)}, {"name", name}});
  }
  // Protected up front so a restore never has to write to the source image.
  r = rbd_snap_protect(handle.get(), snap.c_str());
  if (r < 0 && r != -EBUSY) return CephError(r, "protect " + Spec(*image) + "@" + snap);
  BLOCKCSI_ASSIGN_OR_RETURN(auto snaps, ListSnaps(handle.get(), Spec(*image)));
  for (const auto& s : snaps) {
    if (s.name == snap) return SnapRecord(*image, handle.get(), s, name);
  }
  return Internal("snapshot " + Spec(*image) + "@" + snap + " vanished right after it was made");
}

// Children (restored volumes) keep their parent snapshot alive; flattening
// them copies the shared blocks in so that the snapshot can go.
Status RbdBackend::FlattenChildren(const std::string& image, const std::string& snap) {
  BLOCKCSI_ASSIGN_OR_RETURN(auto at_snap, Open(image, snap.c_str(), /*read_only=*/true));
  size_t max = 16;
  std::vector<std::pair<int64_t, std::string>> children;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::vector<rbd_linked_image_spec_t> specs(max);
    size_t n = max;
    int r = rbd_list_children3(at_snap.get(), specs.data(), &n);
    if (r == -ERANGE) {
      max = n + 4;
      continue;
    }
    if (r < 0) return CephError(r, "list clones of " + Spec(image) + "@" + snap);
    for (size_t i = 0; i < n; ++i) {
      if (specs[i].trash) {
        rbd_linked_image_spec_list_cleanup(specs.data(), n);
        return FailedPrecondition("snapshot " + Spec(image) + "@" + snap + " has a clone in the trash");
      }
      children.emplace_back(specs[i].pool_id, specs[i].image_name);
    }
    rbd_linked_image_spec_list_cleanup(specs.data(), n);
    break;
  }
  at_snap.reset();
  for (const auto& [pool_id, child] : children) {
    rados_ioctx_t raw = nullptr;
    int r = rados_ioctx_create2(cluster_, pool_id, &raw);
    if (r < 0) return CephError(r, "open pool of clone " + child);
    IoCtxHandle io(raw);
    rbd_image_t child_handle = nullptr;
    r = rbd_open(raw, child.c_str(), &child_handle, nullptr);
    if (r == -ENOENT) continue;
    if (r < 0) return CephError(r, "open clone " + child);
    ImageHandle owned(child_handle);
    LogInfo("rbd flattening clone before its snapshot goes", {{"clone", child}, {"snapshot", snap}});
    r = rbd_flatten(child_handle);
    if (r < 0) return CephError(r, "flatten clone " + child);
  }
  return OkStatus();
}

Status RbdBackend::DeleteSnapshot(const std::string& snapshot_id) {
  auto ref = OurSnapshot(snapshot_id);
  if (!ref) return OkStatus();
  const std::string& image = ref->volume.image;
  const std::string index_key = kPoolMetaSnapPrefix + ref->snap;
  auto held = locks_.Lock(image);
  auto handle = Open(image);
  if (!handle.ok() && handle.status().code() != StatusCode::kNotFound) return handle.status();
  if (handle.ok()) {
    bool exists = false;
    int r = rbd_snap_exists(handle->get(), ref->snap.c_str(), &exists);
    if (r < 0) return CephError(r, "look up snapshot " + snapshot_id);
    if (exists) {
      handle->reset();
      BLOCKCSI_RETURN_IF_ERROR(FlattenChildren(image, ref->snap));
      BLOCKCSI_ASSIGN_OR_RETURN(*handle, Open(image));
      r = rbd_snap_unprotect(handle->get(), ref->snap.c_str());
      if (r < 0 && r != -EINVAL && r != -ENOENT) return CephError(r, "unprotect snapshot " + snapshot_id);
      r = rbd_snap_remove(handle->get(), ref->snap.c_str());
      if (r < 0 && r != -ENOENT) return CephError(r, "remove snapshot " + snapshot_id);
      LogInfo("rbd snapshot removed", {{"snapshot", snapshot_id}});
    }
  }
  // Only drop the index entry when it points here: the same CO name may have
  // been reused for a snapshot of another volume after a stale entry.
  BLOCKCSI_ASSIGN_OR_RETURN(auto index, SnapIndex());
  if (auto it = index.find(ref->snap); it != index.end() && it->second.value("volume", "") == image) {
    int r = rbd_pool_metadata_remove(io_, index_key.c_str());
    if (r < 0 && r != -ENOENT) return CephError(r, "remove metadata of pool " + options_.pool);
  }
  return OkStatus();
}

StatusOr<SnapshotRecord> RbdBackend::GetSnapshot(const std::string& snapshot_id) {
  auto ref = OurSnapshot(snapshot_id);
  if (!ref) return NotFound("snapshot " + snapshot_id + " not found");
  auto handle = Open(ref->volume.image, nullptr, /*read_only=*/true);
  if (!handle.ok()) {
    if (handle.status().code() == StatusCode::kNotFound) return NotFound("snapshot " + snapshot_id + " not found");
    return handle.status();
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto snaps, ListSnaps(handle->get(), Spec(ref->volume.image)));
  BLOCKCSI_ASSIGN_OR_RETURN(auto index, SnapIndex());
  for (const auto& s : snaps) {
    if (s.name != ref->snap) continue;
    std::string co_name;
    if (auto it = index.find(s.name); it != index.end()) co_name = it->second.value("name", "");
    return SnapRecord(ref->volume.image, handle->get(), s, co_name);
  }
  return NotFound("snapshot " + snapshot_id + " not found");
}

StatusOr<Page<SnapshotRecord>> RbdBackend::ListSnapshots(const std::string& source_volume_id,
                                                         const std::string& start_token, int max_entries) {
  if (!start_token.empty() && !OurSnapshot(start_token)) {
    return Aborted("list snapshots: unknown starting token \"" + start_token + "\"");
  }
  std::vector<std::string> images;
  if (!source_volume_id.empty()) {
    auto image = OurImage(source_volume_id);
    if (!image) return Page<SnapshotRecord>{};  // CSI: an unknown source lists nothing
    images.push_back(*image);
  } else {
    BLOCKCSI_ASSIGN_OR_RETURN(auto names, ListImageNames(io_));
    for (auto& n : names) {
      if (HasHashedName(n, kVolumePrefix)) images.push_back(std::move(n));
    }
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto index, SnapIndex());
  std::vector<SnapshotRecord> all;
  for (const auto& image : images) {
    auto handle = Open(image, nullptr, /*read_only=*/true);
    if (!handle.ok()) {
      if (handle.status().code() == StatusCode::kNotFound) continue;
      return handle.status();
    }
    BLOCKCSI_ASSIGN_OR_RETURN(auto snaps, ListSnaps(handle->get(), Spec(image)));
    for (const auto& s : snaps) {
      if (!HasHashedName(s.name, kSnapPrefix)) continue;
      std::string co_name;
      if (auto it = index.find(s.name); it != index.end()) co_name = it->second.value("name", "");
      BLOCKCSI_ASSIGN_OR_RETURN(auto record, SnapRecord(image, handle->get(), s, co_name));
      all.push_back(std::move(record));
    }
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  Page<SnapshotRecord> page;
  for (auto& record : all) {
    if (record.id < start_token) continue;
    if (max_entries > 0 && static_cast<int>(page.items.size()) == max_entries) {
      page.next_token = record.id;
      break;
    }
    page.items.push_back(std::move(record));
  }
  return page;
}

Status RbdBackend::Healthy() {
  // One round trip to the OSD holding the pool's directory object: proves
  // the monitors let us in and the pool's PG is serving.
  uint64_t size = 0;
  time_t mtime = 0;
  int r = rados_stat(io_, "rbd_directory", &size, &mtime);
  if (r < 0 && r != -ENOENT) return CephError(r, "ceph pool " + options_.pool).WithContext("rbd backend unhealthy");
  return OkStatus();
}

bool IsValidCephUser(std::string_view user) {
  if (user.empty() || user.size() > 128 || user.starts_with("client.")) return false;
  return std::all_of(user.begin(), user.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
}

}  // namespace

std::optional<RbdVolumeRef> ParseRbdVolumeId(std::string_view id) {
  if (!id.starts_with(kIdPrefix)) return std::nullopt;
  id.remove_prefix(sizeof(kIdPrefix) - 1);
  size_t dot = id.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  std::string_view pool = id.substr(0, dot);
  std::string_view image = id.substr(dot + 1);
  if (!IsValidPoolName(pool) || !HasHashedName(image, kVolumePrefix)) return std::nullopt;
  return RbdVolumeRef{std::string(pool), std::string(image)};
}

Status ApplyRbdSecrets(const std::map<std::string, std::string>& secrets, RbdBackendOptions* options) {
  auto user = secrets.find(rbd_secret_keys::kUserId);
  auto key = secrets.find(rbd_secret_keys::kUserKey);
  if (user == secrets.end() && key == secrets.end()) return OkStatus();
  if (user == secrets.end())
    return InvalidArgument(std::string("ceph secret has no \"") + rbd_secret_keys::kUserId + "\"");
  if (key == secrets.end() || key->second.empty()) {
    return InvalidArgument(std::string("ceph secret has no \"") + rbd_secret_keys::kUserKey + "\"");
  }
  if (!IsValidCephUser(user->second)) {
    return InvalidArgument(std::string("ceph secret: \"") + rbd_secret_keys::kUserId + "\" is not a valid cephx id");
  }
  options->ceph_user = user->second;
  options->key = key->second;
  options->keyring.clear();
  return OkStatus();
}

StatusOr<std::shared_ptr<VolumeBackend>> MakeRbdBackend(const RbdBackendOptions& options) {
  if (!IsValidPoolName(options.pool)) {
    return InvalidArgument("--rbd-pool \"" + options.pool + "\": want 1-" + std::to_string(kMaxPoolLen) +
                           " of [A-Za-z0-9_-]");
  }
  if (!IsValidCephUser(options.ceph_user)) {
    return InvalidArgument("--ceph-user \"" + options.ceph_user + "\": want a cephx id without \"client.\"");
  }
  if (!options.keyring.empty() && !options.key.empty()) {
    return InvalidArgument("--ceph-keyring and a cephx key from a secret are mutually exclusive");
  }
  rados_t cluster = nullptr;
  int r = rados_create2(&cluster, "ceph", ("client." + options.ceph_user).c_str(), 0);
  if (r < 0) return CephError(r, "create rados handle");
  auto fail = [&](Status st) -> StatusOr<std::shared_ptr<VolumeBackend>> {
    rados_shutdown(cluster);
    return st;
  };
  r = rados_conf_read_file(cluster, options.ceph_conf.empty() ? nullptr : options.ceph_conf.c_str());
  if (r < 0) return fail(CephError(r, "--ceph-conf " + options.ceph_conf).WithContext("read ceph conf"));
  if (!options.keyring.empty()) {
    r = rados_conf_set(cluster, "keyring", options.keyring.c_str());
    if (r < 0) return fail(CephError(r, "--ceph-keyring " + options.keyring));
  }
  if (!options.key.empty()) {
    r = rados_conf_set(cluster, "key", options.key.c_str());
    if (r < 0) return fail(InvalidArgument("the cephx key was refused by librados"));
  }
  const std::string timeout = std::to_string(options.op_timeout.count());
  for (const char* option : {"rados_mon_op_timeout", "rados_osd_op_timeout", "client_mount_timeout"}) {
    r = rados_conf_set(cluster, option, timeout.c_str());
    if (r < 0) return fail(CephError(r, std::string("set ") + option));
  }
  r = rados_connect(cluster);
  if (r < 0) {
    rados_shutdown(cluster);
    return Unavailable("connect to ceph as client." + options.ceph_user + ": " + ErrnoToStatus(-r, "").message());
  }
  rados_ioctx_t io = nullptr;
  r = rados_ioctx_create(cluster, options.pool.c_str(), &io);
  if (r == -ENOENT) return fail(InvalidArgument("--rbd-pool " + options.pool + ": no such pool"));
  if (r < 0) return fail(CephError(r, "open pool " + options.pool));
  char monitors[1024] = {};
  if (rados_conf_get(cluster, "mon_host", monitors, sizeof(monitors)) < 0) monitors[0] = '\0';
  RbdBackendOptions kept = options;
  kept.key.clear();  // librados holds it; nothing else needs it
  LogInfo("rbd backend connected", {{"pool", options.pool}, {"user", options.ceph_user}, {"monitors", monitors}});
  return std::shared_ptr<VolumeBackend>(std::make_shared<RbdBackend>(std::move(kept), cluster, io, monitors));
}

}  // namespace blockcsi
