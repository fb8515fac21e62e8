// Internals of the RBD backend shared by its rbd_*.cc files: naming of
// images and snapshots, librbd listing helpers and the RbdBackend class.
// Not part of the backend's interface (backend/rbd/rbd_backend.h).
#pragma once

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

#include "backend/rbd/rbd_backend.h"
#include "common/ceph_lazy.h"
#include "common/keyed_lock.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/strings.h"
#include "contract/initiator.h"

namespace blockcsi::rbd_internal {

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
// The image's wrapped data key (backend.h): its snapshots share it.
constexpr char kMetaWrappedKey[] = "blockcsi.wrapped_data_key";
constexpr char kPoolMetaSnapPrefix[] = "blockcsi.snap.";
constexpr char kPoolMetaFencedPrefix[] = "blockcsi.fenced.";

constexpr uint64_t kGranularity = 1ULL << 20;
// What krbd maps on any kernel since 4.9; object-map/fast-diff/deep-flatten
// would make older kernels refuse the image.
constexpr uint64_t kImageFeatures = RBD_FEATURE_LAYERING | RBD_FEATURE_EXCLUSIVE_LOCK;
constexpr uint64_t kImageOrder = 22;  // 4 MiB objects, Ceph's default

using json = nlohmann::json;

inline Status CephError(int r, std::string_view what) { return ErrnoToStatus(-r, what); }

inline bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

inline bool HasHashedName(std::string_view s, std::string_view prefix) {
  return s.size() == prefix.size() + kHashHexLen && s.starts_with(prefix) && IsLowerHex(s.substr(prefix.size()));
}

inline bool IsValidPoolName(std::string_view pool) {
  if (pool.empty() || pool.size() > kMaxPoolLen) return false;
  return std::all_of(pool.begin(), pool.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// First 128 bits of SHA-256, hex: deterministic and collision-free in
// practice, and every character is legal in an image or snapshot name.
inline std::string NameHash(std::string_view name) {
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

inline std::optional<SnapRef> ParseSnapshotId(std::string_view id) {
  size_t at = id.find('@');
  if (at == std::string_view::npos) return std::nullopt;
  auto volume = ParseRbdVolumeId(id.substr(0, at));
  std::string_view snap = id.substr(at + 1);
  if (!volume || !HasHashedName(snap, kSnapPrefix)) return std::nullopt;
  return SnapRef{*volume, std::string(snap)};
}

inline std::string VolumeId(const std::string& pool, const std::string& image) {
  return kIdPrefix + pool + "." + image;
}
inline std::string SnapshotId(const std::string& pool, const std::string& image, const std::string& snap) {
  return VolumeId(pool, image) + "@" + snap;
}

inline std::string SourceString(const ContentSource& source) {
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

inline ContentSource SourceFromString(std::string_view s) {
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

inline std::vector<std::string> SplitNul(const std::string& buf, size_t len) {
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

inline StatusOr<std::map<std::string, std::string>> ListMetadata(rbd_image_t image, std::string_view what) {
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

inline StatusOr<std::vector<Watcher>> ListWatchers(rbd_image_t image, std::string_view what) {
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

inline StatusOr<std::vector<SnapInfo>> ListSnaps(rbd_image_t image, std::string_view what) {
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

inline StatusOr<std::vector<Locker>> ListLockers(rbd_image_t image, std::string_view what) {
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

inline StatusOr<std::vector<std::string>> ListImageNames(rados_ioctx_t io) {
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
  bool MayHoldVolume(const std::string& volume_id) const override { return ParseRbdVolumeId(volume_id).has_value(); }

 private:
  // The node's fence entry in the pool's metadata, if any.
  StatusOr<std::optional<FenceRecord>> GetNodeFence(const std::string& node) const;
  Status PutNodeFence(const FenceRecord& record);
  // Revokes `node`'s grant of an open image whose lock the caller holds:
  // its clients blocklisted, their lock broken, the grant removed.
  Status RevokeLocked(const std::string& volume_id, const std::string& image_name, rbd_image_t image,
                      const std::map<std::string, std::string>& meta, const std::string& node);
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
  // `*created`: whether this call made the image (not found it made).
  Status CloneFromSnapshot(const std::string& image, const CreateVolumeSpec& spec, bool* created);
  Status CloneFromVolume(const std::string& image, const CreateVolumeSpec& spec, bool* created);
  // After a final failure of a create that made `image`: removes it (and a
  // clone's temporary snapshot); logs what it could not take back.
  void UndoCreate(const std::string& image, const CreateVolumeSpec& spec, const Status& why);
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
  KeyedLock locks_;  // per image: its metadata's read-modify-write cycles
};

}  // namespace blockcsi::rbd_internal
