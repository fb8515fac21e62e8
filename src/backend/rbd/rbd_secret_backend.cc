#include "backend/rbd/rbd_secret_backend.h"

#include <openssl/evp.h>

#include <map>
#include <mutex>

#include "backend/call_scope.h"
#include "common/logging.h"

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

class RbdSecretBackend final : public VolumeBackend {
 public:
  explicit RbdSecretBackend(RbdBackendOptions options) : options_(std::move(options)) {}

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
  StatusOr<uint64_t> AvailableBytes() override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->AvailableBytes();
  }
  StatusOr<SnapshotRecord> CreateSnapshot(const std::string& source_volume_id, const std::string& name) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->CreateSnapshot(source_volume_id, name);
  }
  Status DeleteSnapshot(const std::string& snapshot_id) override {
    BLOCKCSI_ASSIGN_OR_RETURN(auto b, Connection());
    return b->DeleteSnapshot(snapshot_id);
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
      std::lock_guard lock(mu_);
      latest = MostRecentLocked();
    }
    return latest == nullptr ? OkStatus() : latest->Healthy();
  }

 private:
  struct Entry {
    std::shared_ptr<VolumeBackend> backend;
    uint64_t last_used = 0;
  };

  std::shared_ptr<VolumeBackend> MostRecentLocked() {
    Entry* best = nullptr;
    for (auto& [key, entry] : connections_) {
      if (best == nullptr || entry.last_used > best->last_used) best = &entry;
    }
    if (best == nullptr) return nullptr;
    best->last_used = ++clock_;
    return best->backend;
  }

  // The connection for this call's secrets (opened on first use), or the
  // most recent one when the call carries none.
  StatusOr<std::shared_ptr<VolumeBackend>> Connection() {
    const CallScope* scope = CurrentCallScope();
    RbdBackendOptions options = options_;
    if (scope != nullptr) BLOCKCSI_RETURN_IF_ERROR(ApplyRbdSecrets(scope->secrets, &options));
    if (options.key.empty()) {
      std::lock_guard lock(mu_);
      if (auto latest = MostRecentLocked()) return latest;
      return FailedPrecondition(std::string("no cephx credentials: the rbd backend has no --ceph-user, and this call "
                                            "carried no secret with \"") +
                                rbd_secret_keys::kUserId + "\" and \"" + rbd_secret_keys::kUserKey +
                                "\" (set the StorageClass's csi.storage.k8s.io/provisioner-secret-name and "
                                "controller-publish-secret-name)");
    }
    const std::string key = options.ceph_user + "/" + Sha256Hex(options.key);
    {
      std::lock_guard lock(mu_);
      if (auto it = connections_.find(key); it != connections_.end()) {
        it->second.last_used = ++clock_;
        return it->second.backend;
      }
    }
    // Connecting takes a round trip or more: not under the lock. Two calls
    // racing to open the same connection both connect; one copy is kept.
    auto opened = MakeRbdBackend(options);
    options.key.clear();
    if (!opened.ok()) return opened.status().WithContext("with the cephx credentials of the call's secret");
    std::lock_guard lock(mu_);
    auto [it, inserted] = connections_.try_emplace(key, Entry{*opened, 0});
    it->second.last_used = ++clock_;
    if (inserted) {
      LogInfo("rbd connection opened from a CSI secret", {{"pool", options_.pool}, {"user", options.ceph_user}});
      while (connections_.size() > kMaxRbdSecretConnections) {
        auto oldest = connections_.begin();
        for (auto i = connections_.begin(); i != connections_.end(); ++i) {
          if (i->second.last_used < oldest->second.last_used) oldest = i;
        }
        connections_.erase(oldest);  // in-flight calls keep their shared_ptr
      }
    }
    return it->second.backend;
  }

  const RbdBackendOptions options_;
  std::mutex mu_;
  std::map<std::string, Entry> connections_;  // guarded by mu_; "<user>/<sha256(key)>"
  uint64_t clock_ = 0;                        // guarded by mu_
};

}  // namespace

StatusOr<std::shared_ptr<VolumeBackend>> MakeRbdSecretBackend(const RbdBackendOptions& options) {
  if (!options.ceph_user.empty() || !options.keyring.empty() || !options.key.empty()) {
    return InvalidArgument("--ceph-user/--ceph-keyring are set: the rbd backend has its own identity");
  }
  if (options.pool.empty()) return InvalidArgument("--rbd-pool is required for --backend rbd");
  LogInfo("rbd backend waits for cephx credentials from CSI secrets", {{"pool", options.pool}});
  return std::shared_ptr<VolumeBackend>(std::make_shared<RbdSecretBackend>(options));
}

}  // namespace blockcsi
