#include "backend/rbd/rbd_secret_backend.h"

#include <openssl/evp.h>

#include <map>

#include "common/logging.h"
#include "common/mutex.h"

namespace blockcsi {
namespace {

// rbd_backend.cc sizes images in whole MiB.
constexpr uint64_t kRbdGranularity = uint64_t{1} << 20;

std::string Sha256Hex(const std::string& data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr) != 1) return "";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 0xf];
  }
  return out;
}

struct RbdConnectionEntry {
  std::shared_ptr<VolumeBackend> backend;
  uint64_t last_used = 0;
};

// The connections opened so far, shared by the backend and every view a
// request binds to its secrets (WithSecrets).
struct RbdConnections {
  Mutex mu;
  std::map<std::string, RbdConnectionEntry> by_key GUARDED_BY(mu);  // by "<user>/<sha256(key)>"
  uint64_t clock GUARDED_BY(mu) = 0;
};

class RbdSecretBackend final : public VolumeBackend {
 public:
  RbdSecretBackend(RbdBackendOptions options, std::shared_ptr<RbdConnections> connections, CallSecrets secrets)
      : options_(std::move(options)), connections_(std::move(connections)), secrets_(std::move(secrets)) {}

  std::string Name() const override { return "rbd"; }
  uint64_t AllocationGranularity() const override { return kRbdGranularity; }
  std::vector<std::string> SupportedParameters() const override { return {}; }

  StatusOr<VolumeRecord> CreateVolume(const CreateVolumeSpec& spec) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->CreateVolume(spec);
  }
  Status DeleteVolume(const std::string& volume_id) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->DeleteVolume(volume_id);
  }
  StatusOr<VolumeRecord> ExpandVolume(const std::string& volume_id, uint64_t new_size_bytes) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->ExpandVolume(volume_id, new_size_bytes);
  }
  StatusOr<VolumeRecord> GrantAccess(const std::string& volume_id, const AccessGrant& grant) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->GrantAccess(volume_id, grant);
  }
  Status RevokeAccess(const std::string& volume_id, const std::string& initiator_iqn) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->RevokeAccess(volume_id, initiator_iqn);
  }
  StatusOr<VolumeRecord> GetVolume(const std::string& volume_id) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->GetVolume(volume_id);
  }
  StatusOr<VolumeHealth> CheckVolume(const std::string& volume_id) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->CheckVolume(volume_id);
  }
  std::vector<StatusOr<VolumeHealth>> CheckVolumes(const std::vector<std::string>& volume_ids) override {
    auto b = Connection();
    if (!b.ok()) return std::vector<StatusOr<VolumeHealth>>(volume_ids.size(), b.status());
    return (*b)->CheckVolumes(volume_ids);
  }
  StatusOr<Page<VolumeRecord>> ListVolumes(const std::string& start_token, int max_entries) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->ListVolumes(start_token, max_entries);
  }
  StatusOr<uint64_t> AvailableBytes(const CapacityQuery& query) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->AvailableBytes(query);
  }
  StatusOr<SnapshotRecord> CreateSnapshot(const std::string& source_volume_id, const std::string& name) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->CreateSnapshot(source_volume_id, name);
  }
  Status DeleteSnapshot(const std::string& snapshot_id) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->DeleteSnapshot(snapshot_id);
  }
  Status SetWrappedDataKey(const std::string& id, const std::string& expected, const std::string& wrapped) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->SetWrappedDataKey(id, expected, wrapped);
  }
  StatusOr<SnapshotRecord> GetSnapshot(const std::string& snapshot_id) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->GetSnapshot(snapshot_id);
  }
  StatusOr<Page<SnapshotRecord>> ListSnapshots(const std::string& source_volume_id, const std::string& start_token,
                                               int max_entries) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->ListSnapshots(source_volume_id, start_token, max_entries);
  }
  bool MayHoldVolume(const std::string& volume_id) const override { return ParseRbdVolumeId(volume_id).has_value(); }
  Status Healthy() override {
    std::shared_ptr<VolumeBackend> latest;
    {
      MutexLock lock(connections_->mu);
      latest = MostRecentLocked();
    }
    return latest == nullptr ? OkStatus() : latest->Healthy();
  }
  // Fencing acts with the most recent connection: a controller without
  // --ceph-user has no credentials of its own, and before any request has
  // brought some it cannot fence (the fence stays incomplete and is retried).
  std::vector<HostFences> FenceNode(const std::string& node_id, const std::string& initiator_iqn) override {
    auto b = Connection();
    if (!b.ok()) return {HostFences{Name(), b.status(), {}}};
    return (*b)->FenceNode(node_id, initiator_iqn);
  }
  std::vector<HostFences> UnfenceNode(const std::string& node_id) override {
    auto b = Connection();
    if (!b.ok()) return {HostFences{Name(), b.status(), {}}};
    return (*b)->UnfenceNode(node_id);
  }
  std::vector<HostFences> ListFences() override {
    auto b = Connection();
    if (!b.ok()) return {HostFences{Name(), b.status(), {}}};
    return (*b)->ListFences();
  }
  // A request without secrets is served like any call without them: by
  // the most recent connection.
  std::shared_ptr<VolumeBackend> WithSecrets(const CallSecrets& secrets) override {
    if (secrets.values.empty()) return nullptr;
    return std::make_shared<RbdSecretBackend>(options_, connections_, secrets);
  }

 private:
  std::shared_ptr<VolumeBackend> MostRecentLocked() REQUIRES(connections_->mu) {
    RbdConnectionEntry* best = nullptr;
    for (auto& [key, entry] : connections_->by_key) {
      if (best == nullptr || entry.last_used > best->last_used) best = &entry;
    }
    if (best == nullptr) return nullptr;
    best->last_used = ++connections_->clock;
    return best->backend;
  }

  // The connection for the secrets this view is bound to (opened on first
  // use), or the most recent one when it has none.
  StatusOr<std::shared_ptr<VolumeBackend>> Connection() {
    RbdBackendOptions options = options_;
    if (!secrets_.values.empty()) BLOCKCSI_RETURN_IF_ERROR(ApplyRbdSecrets(secrets_.values, &options));
    if (options.key.empty()) {
      MutexLock lock(connections_->mu);
      if (auto latest = MostRecentLocked()) return latest;
      return FailedPrecondition(std::string("no cephx credentials: the rbd backend has no --ceph-user, and this call "
                                            "carried no secret with \"") +
                                rbd_secret_keys::kUserId + "\" and \"" + rbd_secret_keys::kUserKey +
                                "\" (set the StorageClass's csi.storage.k8s.io/provisioner-secret-name and "
                                "controller-publish-secret-name)");
    }
    const std::string key = options.ceph_user + "/" + Sha256Hex(options.key);
    {
      MutexLock lock(connections_->mu);
      if (auto it = connections_->by_key.find(key); it != connections_->by_key.end()) {
        it->second.last_used = ++connections_->clock;
        return it->second.backend;
      }
    }
    // Connecting takes a round trip or more: not under the lock. Two calls
    // racing to open the same connection both connect; one copy is kept.
    auto opened = MakeRbdBackend(options);
    options.key.clear();
    if (!opened.ok()) return opened.status().WithContext("with the cephx credentials of the call's secret");
    MutexLock lock(connections_->mu);
    auto& by_key = connections_->by_key;
    auto [it, inserted] = by_key.try_emplace(key, RbdConnectionEntry{*opened, 0});
    it->second.last_used = ++connections_->clock;
    if (inserted) {
      LogInfo("rbd connection opened from a CSI secret", {{"pool", options_.pool}, {"user", options.ceph_user}});
      while (by_key.size() > kMaxRbdSecretConnections) {
        auto oldest = by_key.begin();
        for (auto i = by_key.begin(); i != by_key.end(); ++i) {
          if (i->second.last_used < oldest->second.last_used) oldest = i;
        }
        by_key.erase(oldest);  // in-flight calls keep their shared_ptr
      }
    }
    return it->second.backend;
  }

  const RbdBackendOptions options_;
  const std::shared_ptr<RbdConnections> connections_;
  const CallSecrets secrets_;  // empty for the backend itself; never logged
};

}  // namespace

StatusOr<std::shared_ptr<VolumeBackend>> MakeRbdSecretBackend(const RbdBackendOptions& options) {
  if (!options.ceph_user.empty() || !options.keyring.empty() || !options.key.empty()) {
    return InvalidArgument("--ceph-user/--ceph-keyring are set: the rbd backend has its own identity");
  }
  if (options.pool.empty()) return InvalidArgument("--rbd-pool is required for --backend rbd");
  LogInfo("rbd backend waits for cephx credentials from CSI secrets", {{"pool", options.pool}});
  return std::shared_ptr<VolumeBackend>(
      std::make_shared<RbdSecretBackend>(options, std::make_shared<RbdConnections>(), CallSecrets{}));
}

}  // namespace blockcsi
