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

namespace blockcsi::rbd_internal {

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
    if (key == kMetaWrappedKey) {
      record.wrapped_data_key = value;
    } else if (key.starts_with(kMetaParamPrefix)) {
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

StatusOr<uint64_t> RbdBackend::AvailableBytes(const CapacityQuery& /*query*/) {
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

}  // namespace blockcsi::rbd_internal

namespace blockcsi {

using namespace rbd_internal;  // NOLINT(google-build-using-namespace): the rbd_*.cc files share these internals

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
  // The Ceph libraries are loaded here, by the first RBD backend, not at
  // program start (common/ceph_lazy.h).
  BLOCKCSI_RETURN_IF_ERROR(LoadCephLibraries());
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
