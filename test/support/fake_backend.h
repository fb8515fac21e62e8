// FakeBackend: an in-memory VolumeBackend with the contract of backend.h
// (idempotency, ALREADY_EXISTS/NOT_FOUND/FAILED_PRECONDITION, paging with
// ABORTED on an unknown token), plus what tests need: per-method error
// injection, call counts, a gate that holds an operation so a second one
// can be sent while the first is in flight, and the CHAP credentials it was
// given (to check they reached the backend). Thread-safe.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace blockcsi::testing {

class FakeBackend final : public VolumeBackend {
 public:
  static constexpr uint64_t kGranularity = 1 << 20;
  static constexpr char kTopologyKey[] = "topology.blockcsi.io/storage-host";

  std::string Name() const override { return "fake"; }
  uint64_t AllocationGranularity() const override { return kGranularity; }
  std::vector<std::string> SupportedParameters() const override { return {"thin"}; }

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
  Status Healthy() override;
  // The compare-and-set of backend.h on the in-memory records.
  Status SetWrappedDataKey(const std::string& id, const std::string& expected, const std::string& wrapped) override;
  // In memory, with the contract of backend.h: the record first, then every
  // grant of the node revoked; GrantAccess to a fenced node is refused.
  // One host, named Name(); FailNext("FenceNode") fails the next fence
  // before it records anything.
  std::vector<HostFences> FenceNode(const std::string& node_id, const std::string& initiator_iqn) override;
  std::vector<HostFences> UnfenceNode(const std::string& node_id) override;
  std::vector<HostFences> ListFences() override;
  // The fake's ids: "vol-<n>". An id of another form names nothing it has:
  // NOT_FOUND for lookups, OK for deletes and revokes, as the real backends.
  bool MayHoldVolume(const std::string& volume_id) const override { return volume_id.starts_with("vol-"); }

  // Notes the secrets the request carried (SecretsSeen) and answers the
  // view set by ServeSecretsWith, nullptr (serve it itself) by default.
  std::shared_ptr<VolumeBackend> WithSecrets(const CallSecrets& secrets) override;

  // The secrets of each request bound so far, in order.
  std::vector<std::map<std::string, std::string>> SecretsSeen() const;
  // The backend that serves requests carrying secrets from now on, as a
  // backend acting with its callers' credentials would.
  void ServeSecretsWith(std::shared_ptr<VolumeBackend> view);
  // The next call of `method` (e.g. "GrantAccess") fails with `status`.
  void FailNext(const std::string& method, Status status);
  int Calls(const std::string& method) const;
  int TotalCalls() const;  // of every method
  // While closed, `method` blocks after counting its call; WaitEntered()
  // returns once a call is blocked there.
  void CloseGate(const std::string& method);
  void WaitEntered(const std::string& method);
  void OpenGate();

  // Test controls of the stored state.
  void SetHealth(const std::string& volume_id, VolumeHealth health);
  void SetAvailableBytes(uint64_t bytes);
  ChapCredentials LastChap(const std::string& volume_id) const;
  // Adds a grant behind the controller's back (a volume attached by hand).
  void AddRawGrant(const std::string& volume_id, GrantRecord grant);
  void SetTransportParams(const std::string& volume_id, std::map<std::string, std::string> params);
  // The topology the next volumes report (default {kTopologyKey: "storage-1"}).
  void SetTopology(std::map<std::string, std::string> topology);

 private:
  Status Enter(const std::string& method);  // counts, injects, gates

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, VolumeRecord> volumes_;      // by id
  std::map<std::string, SnapshotRecord> snapshots_;  // by id
  std::map<std::string, std::string> topology_{{kTopologyKey, "storage-1"}};
  std::map<std::string, VolumeHealth> health_;
  std::map<std::string, ChapCredentials> chap_;
  std::map<std::string, FenceRecord> fences_;  // by node id
  int64_t fence_clock_ = 1000;
  std::vector<std::map<std::string, std::string>> secrets_seen_;
  std::shared_ptr<VolumeBackend> secrets_view_;
  std::map<std::string, Status> fail_next_;
  std::map<std::string, int> calls_;
  std::string gated_method_;
  int entered_gate_ = 0;
  uint64_t available_ = uint64_t{100} << 30;
  int next_id_ = 1;
};

}  // namespace blockcsi::testing
