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

#include "common/logging.h"
#include "common/metrics.h"
#include "contract/initiator.h"

#include "backend/rbd/rbd_backend_internal.h"

// RBD snapshots and the pool index of their CSI names.
namespace blockcsi::rbd_internal {

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
  // The image's key, as it is now: a volume with snapshots is never deleted,
  // and a rotation re-wraps the one key that the image and its snapshots share.
  BLOCKCSI_ASSIGN_OR_RETURN(auto meta, ListMetadata(handle, Spec(image)));
  if (auto it = meta.find(kMetaWrappedKey); it != meta.end()) record.wrapped_data_key = it->second;
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

}  // namespace blockcsi::rbd_internal
