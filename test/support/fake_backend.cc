#include "support/fake_backend.h"

#include <algorithm>

namespace blockcsi::testing {

Status FakeBackend::Enter(const std::string& method) {
  std::unique_lock lock(mu_);
  ++calls_[method];
  if (gated_method_ == method) {
    ++entered_gate_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return gated_method_ != method; });
  }
  if (auto it = fail_next_.find(method); it != fail_next_.end()) {
    Status st = it->second;
    fail_next_.erase(it);
    return st;
  }
  return OkStatus();
}

void FakeBackend::FailNext(const std::string& method, Status status) {
  std::lock_guard lock(mu_);
  fail_next_[method] = std::move(status);
}

int FakeBackend::Calls(const std::string& method) const {
  std::lock_guard lock(mu_);
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : it->second;
}

int FakeBackend::TotalCalls() const {
  std::lock_guard lock(mu_);
  int total = 0;
  for (const auto& [method, count] : calls_) total += count;
  return total;
}

void FakeBackend::CloseGate(const std::string& method) {
  std::lock_guard lock(mu_);
  gated_method_ = method;
  entered_gate_ = 0;
}

void FakeBackend::WaitEntered(const std::string& method) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return gated_method_ == method && entered_gate_ > 0; });
}

void FakeBackend::OpenGate() {
  std::lock_guard lock(mu_);
  gated_method_.clear();
  cv_.notify_all();
}

void FakeBackend::SetHealth(const std::string& volume_id, VolumeHealth health) {
  std::lock_guard lock(mu_);
  health_[volume_id] = std::move(health);
}

void FakeBackend::SetAvailableBytes(uint64_t bytes) {
  std::lock_guard lock(mu_);
  available_ = bytes;
}

ChapCredentials FakeBackend::LastChap(const std::string& volume_id) const {
  std::lock_guard lock(mu_);
  auto it = chap_.find(volume_id);
  return it == chap_.end() ? ChapCredentials{} : it->second;
}

void FakeBackend::AddRawGrant(const std::string& volume_id, GrantRecord grant) {
  std::lock_guard lock(mu_);
  volumes_.at(volume_id).grants.push_back(std::move(grant));
}

void FakeBackend::SetTransportParams(const std::string& volume_id, std::map<std::string, std::string> params) {
  std::lock_guard lock(mu_);
  volumes_.at(volume_id).transport_params = std::move(params);
}

void FakeBackend::SetTopology(std::map<std::string, std::string> topology) {
  std::lock_guard lock(mu_);
  topology_ = std::move(topology);
}

// No idempotency by name here: that is the real backend's logic (tested on
// the local backend on tgtd); a test that needs ALREADY_EXISTS scripts it.
StatusOr<VolumeRecord> FakeBackend::CreateVolume(const CreateVolumeSpec& spec) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("CreateVolume"));
  std::lock_guard lock(mu_);
  if (spec.size_bytes == 0 || spec.size_bytes % kGranularity != 0) {
    return InvalidArgument("fake: size " + std::to_string(spec.size_bytes) + " is not a multiple of the granularity");
  }
  if (spec.source.kind == ContentSource::Kind::kSnapshot && !snapshots_.contains(spec.source.id)) {
    return NotFound("snapshot \"" + spec.source.id + "\" not found");
  }
  if (spec.source.kind == ContentSource::Kind::kVolume && !volumes_.contains(spec.source.id)) {
    return NotFound("volume \"" + spec.source.id + "\" not found");
  }
  if (spec.size_bytes > available_) return ResourceExhausted("fake: pool full");
  available_ -= spec.size_bytes;
  VolumeRecord v;
  v.id = "vol-" + std::to_string(next_id_++);
  v.name = spec.name;
  v.size_bytes = spec.size_bytes;
  v.created_unix_seconds = 1700000000;
  v.source = spec.source;
  v.parameters = spec.parameters;
  v.portals = {"192.0.2.10:3260", "192.0.2.11:3260"};
  v.target_iqn = "iqn.2026-11.io.blockcsi:" + v.id;
  v.lun = 1;
  v.serial = "beaf" + v.id;
  v.wwn = "6001405" + std::to_string(next_id_);
  v.topology = topology_;
  volumes_[v.id] = v;
  return v;
}

Status FakeBackend::DeleteVolume(const std::string& volume_id) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("DeleteVolume"));
  std::lock_guard lock(mu_);
  auto it = volumes_.find(volume_id);
  if (it == volumes_.end()) return OkStatus();
  if (!it->second.grants.empty()) return FailedPrecondition("volume " + volume_id + " still granted");
  available_ += it->second.size_bytes;
  volumes_.erase(it);
  return OkStatus();
}

StatusOr<VolumeRecord> FakeBackend::ExpandVolume(const std::string& volume_id, uint64_t new_size_bytes) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("ExpandVolume"));
  std::lock_guard lock(mu_);
  auto it = volumes_.find(volume_id);
  if (it == volumes_.end()) return NotFound("volume " + volume_id + " not found");
  if (new_size_bytes < it->second.size_bytes) return OutOfRange("volume " + volume_id + " cannot shrink");
  it->second.size_bytes = new_size_bytes;
  return it->second;
}

StatusOr<VolumeRecord> FakeBackend::GrantAccess(const std::string& volume_id, const AccessGrant& grant) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("GrantAccess"));
  std::lock_guard lock(mu_);
  auto it = volumes_.find(volume_id);
  if (it == volumes_.end()) return NotFound("volume " + volume_id + " not found");
  for (const auto& [node, fence] : fences_) {
    if (node == grant.node_id || fence.initiator_iqn == grant.initiator_iqn) {
      return FailedPrecondition(FencedMessage(fence, volume_id));
    }
  }
  auto& grants = it->second.grants;
  auto existing = std::find_if(grants.begin(), grants.end(),
                               [&](const GrantRecord& g) { return g.initiator_iqn == grant.initiator_iqn; });
  GrantRecord record{grant.initiator_iqn, grant.node_id, grant.read_only, grant.capability, grant.chap.enabled()};
  if (existing == grants.end()) {
    grants.push_back(record);
  } else {
    *existing = record;
  }
  chap_[volume_id] = grant.chap;
  return it->second;
}

Status FakeBackend::RevokeAccess(const std::string& volume_id, const std::string& initiator_iqn) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("RevokeAccess"));
  std::lock_guard lock(mu_);
  auto it = volumes_.find(volume_id);
  if (it == volumes_.end()) return OkStatus();
  std::erase_if(it->second.grants, [&](const GrantRecord& g) { return g.initiator_iqn == initiator_iqn; });
  return OkStatus();
}

StatusOr<VolumeRecord> FakeBackend::GetVolume(const std::string& volume_id) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("GetVolume"));
  std::lock_guard lock(mu_);
  auto it = volumes_.find(volume_id);
  if (it == volumes_.end()) return NotFound("volume " + volume_id + " not found");
  return it->second;
}

StatusOr<VolumeHealth> FakeBackend::CheckVolume(const std::string& volume_id) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("CheckVolume"));
  std::lock_guard lock(mu_);
  if (!volumes_.contains(volume_id)) return NotFound("volume " + volume_id + " not found");
  auto it = health_.find(volume_id);
  return it == health_.end() ? VolumeHealth{} : it->second;
}

namespace {

// A plain slicer: tokens are "t<index>". Deciding which tokens are stale or
// unknown (ABORTED) is the real backend's logic, tested on the local backend
// on tgtd (controller_conformance_tests ListVolumesPagesWithPublishedNodes,
// SnapshotRules); a unit test that needs ABORTED scripts it with FailNext.
template <typename T>
StatusOr<Page<T>> PageOf(const std::vector<T>& all, const std::string& start_token, int max_entries) {
  size_t start = 0;
  if (!start_token.empty()) {
    if (start_token[0] != 't' || start_token.size() < 2 ||
        start_token.find_first_not_of("0123456789", 1) != std::string::npos) {
      return Internal("fake: a token it never made: " + start_token + " (script ABORTED with FailNext)");
    }
    start = std::min(all.size(), static_cast<size_t>(std::stoul(start_token.substr(1))));
  }
  Page<T> page;
  size_t end = max_entries > 0 ? std::min(all.size(), start + static_cast<size_t>(max_entries)) : all.size();
  page.items.assign(all.begin() + static_cast<std::ptrdiff_t>(start), all.begin() + static_cast<std::ptrdiff_t>(end));
  if (end < all.size()) page.next_token = "t" + std::to_string(end);
  return page;
}

}  // namespace

StatusOr<Page<VolumeRecord>> FakeBackend::ListVolumes(const std::string& start_token, int max_entries) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("ListVolumes"));
  std::lock_guard lock(mu_);
  std::vector<VolumeRecord> all;
  for (const auto& [id, v] : volumes_) all.push_back(v);
  return PageOf(all, start_token, max_entries);
}

StatusOr<uint64_t> FakeBackend::AvailableBytes(const CapacityQuery& /*query*/) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("AvailableBytes"));
  std::lock_guard lock(mu_);
  return available_;
}

StatusOr<SnapshotRecord> FakeBackend::CreateSnapshot(const std::string& source_volume_id, const std::string& name) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("CreateSnapshot"));
  std::lock_guard lock(mu_);
  // No idempotency by name here either: that is the backend's (tested on the
  // local backend by controller conformance SnapshotRules); a unit test that
  // needs ALREADY_EXISTS scripts it with FailNext.
  auto v = volumes_.find(source_volume_id);
  if (v == volumes_.end()) return NotFound("volume " + source_volume_id + " not found");
  SnapshotRecord s{"snap-" + std::to_string(next_id_++),
                   name,
                   source_volume_id,
                   v->second.size_bytes,
                   1700000100,
                   true,
                   v->second.wrapped_data_key};
  snapshots_[s.id] = s;
  return s;
}

Status FakeBackend::SetWrappedDataKey(const std::string& id, const std::string& expected, const std::string& wrapped) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("SetWrappedDataKey"));
  std::lock_guard lock(mu_);
  std::string* current = nullptr;
  if (auto v = volumes_.find(id); v != volumes_.end()) current = &v->second.wrapped_data_key;
  if (auto s = snapshots_.find(id); s != snapshots_.end()) current = &s->second.wrapped_data_key;
  if (current == nullptr) return NotFound("fake: " + id + " not found");
  if (*current == wrapped) return OkStatus();
  if (*current != expected) return Aborted("fake: the wrapped data key of " + id + " changed meanwhile");
  *current = wrapped;
  return OkStatus();
}

Status FakeBackend::DeleteSnapshot(const std::string& snapshot_id) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("DeleteSnapshot"));
  std::lock_guard lock(mu_);
  snapshots_.erase(snapshot_id);
  return OkStatus();
}

StatusOr<SnapshotRecord> FakeBackend::GetSnapshot(const std::string& snapshot_id) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("GetSnapshot"));
  std::lock_guard lock(mu_);
  auto it = snapshots_.find(snapshot_id);
  if (it == snapshots_.end()) return NotFound("snapshot " + snapshot_id + " not found");
  return it->second;
}

StatusOr<Page<SnapshotRecord>> FakeBackend::ListSnapshots(const std::string& source_volume_id,
                                                          const std::string& start_token, int max_entries) {
  BLOCKCSI_RETURN_IF_ERROR(Enter("ListSnapshots"));
  std::lock_guard lock(mu_);
  std::vector<SnapshotRecord> all;
  for (const auto& [id, s] : snapshots_) {
    if (source_volume_id.empty() || s.source_volume_id == source_volume_id) all.push_back(s);
  }
  return PageOf(all, start_token, max_entries);
}

Status FakeBackend::Healthy() { return Enter("Healthy"); }

std::shared_ptr<VolumeBackend> FakeBackend::WithSecrets(const CallSecrets& secrets) {
  std::lock_guard lock(mu_);
  secrets_seen_.push_back(secrets.values);
  return secrets_view_;
}

void FakeBackend::ServeSecretsWith(std::shared_ptr<VolumeBackend> view) {
  std::lock_guard lock(mu_);
  secrets_view_ = std::move(view);
}

std::vector<std::map<std::string, std::string>> FakeBackend::SecretsSeen() const {
  std::lock_guard lock(mu_);
  return secrets_seen_;
}

std::vector<HostFences> FakeBackend::FenceNode(const std::string& node_id, const std::string& initiator_iqn) {
  if (Status st = Enter("FenceNode"); !st.ok()) return {HostFences{Name(), st, {}}};
  std::lock_guard lock(mu_);
  auto [it, added] = fences_.try_emplace(node_id, FenceRecord{node_id, initiator_iqn, ++fence_clock_, {}});
  FenceRecord& record = it->second;
  for (auto& [id, volume] : volumes_) {
    for (const auto& g : volume.grants) {
      if (g.initiator_iqn != initiator_iqn && g.node_id != node_id) continue;
      record.held.push_back({id, g});
    }
    std::erase_if(volume.grants,
                  [&](const GrantRecord& g) { return g.initiator_iqn == initiator_iqn || g.node_id == node_id; });
  }
  return {HostFences{Name(), OkStatus(), {record}}};
}

std::vector<HostFences> FakeBackend::UnfenceNode(const std::string& node_id) {
  if (Status st = Enter("UnfenceNode"); !st.ok()) return {HostFences{Name(), st, {}}};
  std::lock_guard lock(mu_);
  fences_.erase(node_id);
  return {HostFences{Name(), OkStatus(), {}}};
}

std::vector<HostFences> FakeBackend::ListFences() {
  if (Status st = Enter("ListFences"); !st.ok()) return {HostFences{Name(), st, {}}};
  std::lock_guard lock(mu_);
  HostFences out{Name(), OkStatus(), {}};
  for (const auto& [node, fence] : fences_) out.fences.push_back(fence);
  return {out};
}

}  // namespace blockcsi::testing
