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

#include "common/fault_points.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "contract/initiator.h"

#include "backend/rbd/rbd_backend_internal.h"

// Creating, deleting and growing RBD volumes.
namespace blockcsi::rbd_internal {
namespace {

// OUT_OF_RANGE when the new volume `spec` is smaller than its open source
// (`what`: the snapshot or volume, for the message).
Status CheckSourceFits(rbd_image_t source, const CreateVolumeSpec& spec, const std::string& what) {
  uint64_t source_bytes = 0;
  int r = rbd_get_size(source, &source_bytes);
  if (r < 0) return CephError(r, "size of " + what);
  if (spec.size_bytes < source_bytes) {
    return OutOfRange("volume \"" + spec.name + "\": size " + std::to_string(spec.size_bytes) + " is smaller than " +
                      what + " (" + std::to_string(source_bytes) + ")");
  }
  return OkStatus();
}

}  // namespace

StatusOr<VolumeRecord> RbdBackend::CreateVolume(const CreateVolumeSpec& spec) {
  if (spec.name.empty()) return InvalidArgument("volume name is empty");
  BLOCKCSI_RETURN_IF_ERROR(CheckContentSource(spec));
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

  // Whether this call made the image (not a concurrent creator elsewhere):
  // only then is it this call's to take back.
  bool created = false;
  switch (spec.source.kind) {
    case ContentSource::Kind::kNone: {
      rbd_image_options_t opts;
      rbd_image_options_create(&opts);
      rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_FEATURES, kImageFeatures);
      rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_ORDER, kImageOrder);
      int r = rbd_create4(io_, image.c_str(), spec.size_bytes, opts);
      rbd_image_options_destroy(opts);
      if (r < 0 && r != -EEXIST) return CephError(r, "create rbd image " + Spec(image));
      created = r == 0;
      break;
    }
    case ContentSource::Kind::kSnapshot:
      BLOCKCSI_RETURN_IF_ERROR(CloneFromSnapshot(image, spec, &created));
      break;
    case ContentSource::Kind::kVolume:
      BLOCKCSI_RETURN_IF_ERROR(CloneFromVolume(image, spec, &created));
      break;
  }
  LogInfo("rbd image created", {{"volume", VolumeId(options_.pool, image)}, {"name", spec.name}});
  StatusOr<VolumeRecord> record = [&]() -> StatusOr<VolumeRecord> {
    BLOCKCSI_RETURN_IF_ERROR(FaultPoint("rbd.create_volume.after-create"));
    return Finish(image, spec);
  }();
  // A final failure takes the image back out: the provisioner will not
  // retry this name, so nothing else would. An uncertain one keeps it for
  // the retry, which Compare finishes.
  if (!record.ok() && created && IsFinalFailure(record.status())) UndoCreate(image, spec, record.status());
  return record;
}

void RbdBackend::UndoCreate(const std::string& image, const CreateVolumeSpec& spec, const Status& why) {
  const std::string id = VolumeId(options_.pool, image);
  // A clone of a volume may still hang off its temporary snapshot: the
  // child goes first, then the snapshot (RemoveTempSnapshot is idempotent).
  int r = rbd_remove(io_, image.c_str());
  Status undone = r < 0 && r != -ENOENT ? CephError(r, "remove rbd image " + Spec(image)) : OkStatus();
  if (undone.ok() && spec.source.kind == ContentSource::Kind::kVolume) {
    if (auto source_image = OurImage(spec.source.id)) {
      undone = RemoveTempSnapshot(*source_image, kTempSnapPrefix + image.substr(sizeof(kVolumePrefix) - 1));
    }
  }
  if (!undone.ok()) {
    LogError("create failed and taking the image back failed too; a retry or DeleteVolume must finish it",
             {{"volume", id}, {"error", why.ToString()}, {"undo_error", undone.ToString()}});
    return;
  }
  LogInfo("create failed; rbd image taken back", {{"volume", id}, {"error", why.ToString()}});
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

Status RbdBackend::CloneFromSnapshot(const std::string& image, const CreateVolumeSpec& spec, bool* created) {
  auto ref = OurSnapshot(spec.source.id);
  if (!ref) return NotFound("source snapshot " + spec.source.id + " not found");
  BLOCKCSI_ASSIGN_OR_RETURN(auto parent, Open(ref->volume.image, ref->snap.c_str(), /*read_only=*/true));
  BLOCKCSI_RETURN_IF_ERROR(CheckSourceFits(parent.get(), spec, "snapshot " + spec.source.id));
  parent.reset();
  {
    // Snapshots are protected when made; protect again in case an admin
    // unprotected it, since a clone v1 needs it.
    BLOCKCSI_ASSIGN_OR_RETURN(auto source, Open(ref->volume.image));
    int r = rbd_snap_protect(source.get(), ref->snap.c_str());
    if (r < 0 && r != -EBUSY) return CephError(r, "protect snapshot " + spec.source.id);
  }
  rbd_image_options_t opts;
  rbd_image_options_create(&opts);
  rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_FEATURES, kImageFeatures);
  rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_ORDER, kImageOrder);
  int r = rbd_clone3(io_, ref->volume.image.c_str(), ref->snap.c_str(), io_, image.c_str(), opts);
  rbd_image_options_destroy(opts);
  if (r < 0 && r != -EEXIST) return CephError(r, "clone " + spec.source.id + " to " + Spec(image));
  *created = r == 0;
  return OkStatus();
}

Status RbdBackend::CloneFromVolume(const std::string& image, const CreateVolumeSpec& spec, bool* created) {
  auto source_image = OurImage(spec.source.id);
  if (!source_image) return NotFound("source volume " + spec.source.id + " not found");
  BLOCKCSI_ASSIGN_OR_RETURN(auto source, Open(*source_image));
  BLOCKCSI_RETURN_IF_ERROR(CheckSourceFits(source.get(), spec, "source volume " + spec.source.id));
  // Named after the new image, so a retry after a crash finds its own
  // temporary snapshot and a concurrent clone of the same source another.
  const std::string temp = kTempSnapPrefix + image.substr(sizeof(kVolumePrefix) - 1);
  bool exists = false;
  int r = rbd_snap_exists(source.get(), temp.c_str(), &exists);
  if (r < 0) return CephError(r, "look up snapshot " + temp + " of " + Spec(*source_image));
  bool made_temp = false;
  if (!exists) {
    r = rbd_snap_create(source.get(), temp.c_str());
    if (r < 0 && r != -EEXIST) return CephError(r, "snapshot " + Spec(*source_image) + "@" + temp);
    made_temp = r == 0;
  }
  // A final failure before the clone exists takes back a temporary
  // snapshot this call made (after it, UndoCreate does).
  auto undo = [&](Status why) {
    if (made_temp && IsFinalFailure(why)) {
      source.reset();
      if (Status st = RemoveTempSnapshot(*source_image, temp); !st.ok()) {
        LogError("clone failed and removing its temporary snapshot failed too",
                 {{"volume", spec.source.id}, {"snapshot", temp}, {"error", st.ToString()}});
      }
    }
    return why;
  };
  if (Status st = FaultPoint("rbd.create_volume.after-temp-snapshot"); !st.ok()) return undo(st);
  r = rbd_snap_protect(source.get(), temp.c_str());
  if (r < 0 && r != -EBUSY) return undo(CephError(r, "protect " + Spec(*source_image) + "@" + temp));
  rbd_image_options_t opts;
  rbd_image_options_create(&opts);
  rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_FEATURES, kImageFeatures);
  rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_ORDER, kImageOrder);
  r = rbd_clone3(io_, source_image->c_str(), temp.c_str(), io_, image.c_str(), opts);
  rbd_image_options_destroy(opts);
  if (r < 0 && r != -EEXIST) return undo(CephError(r, "clone " + spec.source.id + " to " + Spec(image)));
  *created = r == 0;
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
    const auto name = inherited.find(kMetaName);
    if (name != inherited.end() && name->second != spec.name) stale.push_back(kMetaName);
    // The parent's wrapped key is bound to the parent's id: the controller
    // gives the clone its own once the name commits. After that commit (a
    // retry) the key is the clone's and stays.
    if (inherited.contains(kMetaWrappedKey) && (name == inherited.end() || name->second != spec.name)) {
      stale.push_back(kMetaWrappedKey);
    }
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
    BLOCKCSI_RETURN_IF_ERROR(FaultPoint("rbd.create_volume.after-inherited-metadata-removed"));
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
      BLOCKCSI_RETURN_IF_ERROR(FaultPoint("rbd.create_volume.after-flatten"));
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
    BLOCKCSI_RETURN_IF_ERROR(FaultPoint("rbd.create_volume.after-resize"));
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
  BLOCKCSI_RETURN_IF_ERROR(FaultPoint("rbd.create_volume.after-metadata"));
  r = rbd_metadata_set(handle.get(), kMetaName, spec.name.c_str());
  if (r < 0) return CephError(r, "set metadata of " + Spec(image));
  BLOCKCSI_RETURN_IF_ERROR(FaultPoint("rbd.create_volume.after-name"));
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
      return FailedPrecondition("volume " + volume_id + " is still published to node(s) " + JoinStrings(nodes, ", "));
    }
    BLOCKCSI_ASSIGN_OR_RETURN(auto all_watchers, ListWatchers(handle->get(), Spec(*image)));
    auto watchers = OthersOnly(std::move(all_watchers));
    if (!watchers.empty()) {
      std::vector<std::string> who;
      who.reserve(watchers.size());
      for (const auto& w : watchers) who.push_back("client." + std::to_string(w.client_id) + " at " + w.addr);
      return FailedPrecondition("volume " + volume_id + " is in use: watched by " + JoinStrings(who, ", "));
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
      return FailedPrecondition("volume " + volume_id + " has snapshots: " + JoinStrings(blocking, ", "));
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

}  // namespace blockcsi::rbd_internal
