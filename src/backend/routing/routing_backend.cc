#include "backend/routing/routing_backend.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "backend/routing/placement.h"
#include "backend/storage_class.h"
#include "contract/volume_key.h"

namespace blockcsi {
namespace {

std::string Quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

bool IsDriverKey(std::string_view key) {
  return key == storage_class::kFsType || key == storage_class::kMkfsOptions || key == storage_class::kChap ||
         key == storage_class::kBackend || key == volume_key::kEncryptedParameter ||
         key.starts_with(storage_class::kSidecarPrefix);
}

}  // namespace

StatusOr<std::shared_ptr<RoutingBackend>> RoutingBackend::Make(std::vector<NamedBackend> backends,
                                                               const std::string& default_name) {
  if (backends.empty()) return InvalidArgument("no backends to route between");
  std::set<std::string> names;
  uint64_t granularity = 1;
  size_t default_index = backends.size();
  for (size_t i = 0; i < backends.size(); ++i) {
    const auto& b = backends[i];
    if (b.name.empty() || b.name.find(kBackendIdSeparator) != std::string::npos || b.backend == nullptr) {
      return InvalidArgument("backend name " + Quoted(b.name) + " is empty or contains \"~\"");
    }
    if (!names.insert(b.name).second) return InvalidArgument("backend " + Quoted(b.name) + " is configured twice");
    granularity = std::lcm(granularity, std::max<uint64_t>(b.backend->AllocationGranularity(), 1));
    if (b.name == default_name) default_index = i;
  }
  if (default_index == backends.size()) {
    return InvalidArgument("default backend " + Quoted(default_name) + " is not configured");
  }
  return std::shared_ptr<RoutingBackend>(new RoutingBackend(std::move(backends), default_index, granularity));
}

std::shared_ptr<VolumeBackend> RoutingBackend::WithSecrets(const CallSecrets& secrets) {
  std::vector<NamedBackend> bound = backends_;
  bool any_bound = false;
  for (auto& b : bound) {
    if (auto view = b.backend->WithSecrets(secrets)) {
      b.backend = std::move(view);
      any_bound = true;
    }
  }
  if (!any_bound) return nullptr;
  return std::shared_ptr<RoutingBackend>(new RoutingBackend(std::move(bound), default_index_, granularity_));
}

std::string RoutingBackend::JoinId(std::string_view backend_name, std::string_view inner_id) {
  std::string id(backend_name);
  id += kBackendIdSeparator;
  id += inner_id;
  return id;
}

std::string RoutingBackend::Name() const {
  std::string name = "routing(";
  for (size_t i = 0; i < backends_.size(); ++i) {
    name += (i == 0 ? "" : ",") + backends_[i].name + "=" + backends_[i].backend->Name();
  }
  return name + ")";
}

std::vector<std::string> RoutingBackend::SupportedParameters() const {
  std::set<std::string> keys;
  for (const auto& b : backends_) {
    for (auto& k : b.backend->SupportedParameters()) keys.insert(std::move(k));
  }
  return {keys.begin(), keys.end()};
}

const NamedBackend* RoutingBackend::Find(std::string_view name) const {
  for (const auto& b : backends_) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

StatusOr<RoutingBackend::Routed> RoutingBackend::Route(std::string_view what, const std::string& id) const {
  size_t sep = id.find(kBackendIdSeparator);
  if (sep == std::string::npos) return Routed{&backends_[default_index_], id};
  std::string_view name = std::string_view(id).substr(0, sep);
  const NamedBackend* backend = Find(name);
  if (backend == nullptr) {
    return NotFound(std::string(what) + " " + Quoted(id) + " does not exist: its backend " + Quoted(name) +
                    " is not configured");
  }
  return Routed{backend, id.substr(sep + 1)};
}

StatusOr<std::string> RoutingBackend::Outer(const NamedBackend& backend, const std::string& inner_id) const {
  if (inner_id.empty()) return inner_id;
  std::string id = JoinId(backend.name, inner_id);
  if (id.size() > kMaxCsiIdBytes) {
    return Internal("id " + Quoted(id) + " of backend " + Quoted(backend.name) + " is longer than CSI's " +
                    std::to_string(kMaxCsiIdBytes) + " bytes; choose a shorter backend name");
  }
  return id;
}

StatusOr<VolumeRecord> RoutingBackend::Outer(const NamedBackend& backend, VolumeRecord record) const {
  BLOCKCSI_ASSIGN_OR_RETURN(record.id, Outer(backend, record.id));
  for (const auto& [key, value] : backend.topology) record.topology[key] = value;
  if (record.source.kind != ContentSource::Kind::kNone) {
    BLOCKCSI_ASSIGN_OR_RETURN(record.source.id, Outer(backend, record.source.id));
  }
  return record;
}

StatusOr<SnapshotRecord> RoutingBackend::Outer(const NamedBackend& backend, SnapshotRecord record) const {
  BLOCKCSI_ASSIGN_OR_RETURN(record.id, Outer(backend, record.id));
  BLOCKCSI_ASSIGN_OR_RETURN(record.source_volume_id, Outer(backend, record.source_volume_id));
  return record;
}

StatusOr<std::vector<const NamedBackend*>> RoutingBackend::Candidates(const CreateVolumeSpec& spec,
                                                                      const std::string& what,
                                                                      std::string* inner_source_id) const {
  const NamedBackend* chosen = nullptr;
  if (auto it = spec.parameters.find(storage_class::kBackend); it != spec.parameters.end()) {
    chosen = Find(it->second);
    if (chosen == nullptr) {
      std::string names;
      for (const auto& b : backends_) names += (names.empty() ? "" : ", ") + b.name;
      return InvalidArgument(what + ": parameter backend " + Quoted(it->second) +
                             " names no configured backend (configured: " + names + ")");
    }
  }
  if (spec.source.kind != ContentSource::Kind::kNone) {
    const char* kind = spec.source.kind == ContentSource::Kind::kSnapshot ? "source snapshot" : "source volume";
    auto routed = Route(kind, spec.source.id);
    if (!routed.ok()) return routed.status().WithContext(what);
    if (chosen != nullptr && chosen != routed->backend) {
      return InvalidArgument(what + ": " + kind + " " + Quoted(spec.source.id) + " is on backend " +
                             Quoted(routed->backend->name) + ", the parameters ask for backend " +
                             Quoted(chosen->name) + "; restores and clones stay within one backend");
    }
    chosen = routed->backend;
    *inner_source_id = routed->inner_id;
  }
  std::vector<const NamedBackend*> candidates;
  if (chosen != nullptr) {
    candidates.push_back(chosen);
  } else {
    std::vector<TopologySegments> hosts;
    for (const auto& b : backends_) hosts.push_back(b.topology);
    for (size_t i : PlacementOrder(hosts, default_index_, spec.accessibility)) candidates.push_back(&backends_[i]);
  }
  // A named backend (or the source's) must still be reachable from where
  // the volume is required; CSI's code for "not in that topology" is
  // RESOURCE_EXHAUSTED.
  std::erase_if(candidates, [&](const NamedBackend* b) { return !PlacementAllows(b->topology, spec.accessibility); });
  if (candidates.empty()) {
    std::string requisite;
    for (const auto& s : spec.accessibility.requisite)
      requisite += (requisite.empty() ? "" : ", ") + DescribeSegments(s);
    std::string hosts;
    for (const auto& b : chosen != nullptr ? std::vector<NamedBackend>{*chosen} : backends_) {
      hosts += (hosts.empty() ? "" : ", ") + b.name + " " + DescribeSegments(b.topology);
    }
    return ResourceExhausted(what + ": no backend is reachable from the requisite topology " + requisite +
                             " (backends: " + hosts + ")");
  }
  // Parameters are the StorageClass's; a host that does not understand one
  // cannot make this volume.
  std::string refusal;
  std::erase_if(candidates, [&](const NamedBackend* b) {
    const auto supported = b->backend->SupportedParameters();
    for (const auto& [key, value] : spec.parameters) {
      if (!IsDriverKey(key) && std::find(supported.begin(), supported.end(), key) == supported.end()) {
        if (refusal.empty()) {
          refusal = what + ": parameter " + Quoted(key) + " is not understood by backend " + Quoted(b->name);
        }
        return true;
      }
    }
    return false;
  });
  if (candidates.empty()) return InvalidArgument(refusal);
  return candidates;
}

StatusOr<const NamedBackend*> RoutingBackend::HolderOf(const std::string& name) const {
  for (const auto& b : backends_) {
    std::string token;
    do {
      auto page = b.backend->ListVolumes(token, 0);
      if (!page.ok()) return page.status().WithContext("backend " + Quoted(b.name));
      for (const auto& record : page->items) {
        if (record.name == name) return &b;
      }
      token = page->next_token;
    } while (!token.empty());
  }
  return nullptr;
}

StatusOr<VolumeRecord> RoutingBackend::CreateVolume(const CreateVolumeSpec& spec) {
  const std::string what = "volume name " + Quoted(spec.name);
  CreateVolumeSpec inner = spec;
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<const NamedBackend*> candidates, Candidates(spec, what, &inner.source.id));
  inner.accessibility = {};  // decided here; a backend of one host has no choice
  if (candidates.size() > 1) {
    // Which host holds this name already, from an earlier try that skipped
    // a full host: that host answers (the same volume, or ALREADY_EXISTS),
    // whatever room the others have now.
    BLOCKCSI_ASSIGN_OR_RETURN(const NamedBackend* holder, HolderOf(spec.name));
    if (holder != nullptr) {
      if (std::find(candidates.begin(), candidates.end(), holder) == candidates.end()) {
        return AlreadyExists(what + " exists on backend " + Quoted(holder->name) +
                             ", which these parameters or topology requirements do not allow");
      }
      candidates = {holder};
    }
  }
  std::string full;
  bool all_out_of_range = true;
  for (const NamedBackend* candidate : candidates) {
    auto record = candidate->backend->CreateVolume(inner);
    if (record.ok()) return Outer(*candidate, std::move(*record));
    const StatusCode code = record.status().code();
    if (candidates.size() == 1) return record.status();
    // A host without room for this volume (now, or ever) is skipped; the
    // failed call left nothing on it.
    if (code != StatusCode::kResourceExhausted && code != StatusCode::kOutOfRange) {
      return record.status().WithContext("backend " + Quoted(candidate->name));
    }
    all_out_of_range = all_out_of_range && code == StatusCode::kOutOfRange;
    full += (full.empty() ? "" : "; ") + candidate->name + ": " + record.status().message();
  }
  if (all_out_of_range) return OutOfRange(what + ": no allowed backend can hold it (" + full + ")");
  return ResourceExhausted(what + ": no allowed backend has room (" + full + ")");
}

Status RoutingBackend::DeleteVolume(const std::string& volume_id) {
  auto routed = Route("volume", volume_id);
  if (!routed.ok()) return OkStatus();  // not configured here: nothing to delete
  return routed->backend->backend->DeleteVolume(routed->inner_id);
}

StatusOr<VolumeRecord> RoutingBackend::ExpandVolume(const std::string& volume_id, uint64_t new_size_bytes) {
  BLOCKCSI_ASSIGN_OR_RETURN(Routed routed, Route("volume", volume_id));
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeRecord record,
                            routed.backend->backend->ExpandVolume(routed.inner_id, new_size_bytes));
  return Outer(*routed.backend, std::move(record));
}

StatusOr<VolumeRecord> RoutingBackend::GrantAccess(const std::string& volume_id, const AccessGrant& grant) {
  BLOCKCSI_ASSIGN_OR_RETURN(Routed routed, Route("volume", volume_id));
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeRecord record, routed.backend->backend->GrantAccess(routed.inner_id, grant));
  return Outer(*routed.backend, std::move(record));
}

Status RoutingBackend::RevokeAccess(const std::string& volume_id, const std::string& initiator_iqn) {
  auto routed = Route("volume", volume_id);
  if (!routed.ok()) return OkStatus();
  return routed->backend->backend->RevokeAccess(routed->inner_id, initiator_iqn);
}

StatusOr<VolumeRecord> RoutingBackend::GetVolume(const std::string& volume_id) {
  BLOCKCSI_ASSIGN_OR_RETURN(Routed routed, Route("volume", volume_id));
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeRecord record, routed.backend->backend->GetVolume(routed.inner_id));
  return Outer(*routed.backend, std::move(record));
}

StatusOr<VolumeHealth> RoutingBackend::CheckVolume(const std::string& volume_id) {
  BLOCKCSI_ASSIGN_OR_RETURN(Routed routed, Route("volume", volume_id));
  return routed.backend->backend->CheckVolume(routed.inner_id);
}

std::vector<StatusOr<VolumeHealth>> RoutingBackend::CheckVolumes(const std::vector<std::string>& volume_ids) {
  std::vector<StatusOr<VolumeHealth>> out(volume_ids.size(), StatusOr<VolumeHealth>(Internal("not checked")));
  std::map<const NamedBackend*, std::pair<std::vector<size_t>, std::vector<std::string>>> groups;
  for (size_t i = 0; i < volume_ids.size(); ++i) {
    auto routed = Route("volume", volume_ids[i]);
    if (!routed.ok()) {
      out[i] = routed.status();
      continue;
    }
    auto& group = groups[routed->backend];
    group.first.push_back(i);
    group.second.push_back(routed->inner_id);
  }
  for (auto& [backend, group] : groups) {
    auto results = backend->backend->CheckVolumes(group.second);
    for (size_t j = 0; j < group.first.size(); ++j) {
      out[group.first[j]] =
          j < results.size()
              ? std::move(results[j])
              : StatusOr<VolumeHealth>(Internal("backend \"" + backend->name + "\" returned no health result"));
    }
  }
  return out;
}

StatusOr<std::pair<size_t, std::string>> RoutingBackend::ParseToken(std::string_view what,
                                                                    const std::string& token) const {
  if (token.empty()) return std::pair<size_t, std::string>{0, ""};
  size_t sep = token.find(kBackendIdSeparator);
  if (sep != std::string::npos) {
    std::string_view name = std::string_view(token).substr(0, sep);
    for (size_t i = 0; i < backends_.size(); ++i) {
      if (backends_[i].name == name) return std::pair<size_t, std::string>{i, token.substr(sep + 1)};
    }
  }
  return Aborted(std::string(what) + ": unknown starting token " + Quoted(token));
}

namespace {

// Pages through backends [first, last) in order, resuming `first` at
// `token`; `list(backend, token, max)` lists one backend, `outer` maps its
// records. The next token names the backend to resume at.
template <typename T, typename List, typename MapRecord>
StatusOr<Page<T>> PageAcross(const std::vector<NamedBackend>& backends, size_t first, size_t last,
                             const std::string& token, int max_entries, List list, MapRecord outer) {
  Page<T> page;
  for (size_t i = first; i < last; ++i) {
    const int remaining = max_entries > 0 ? max_entries - static_cast<int>(page.items.size()) : 0;
    if (max_entries > 0 && remaining <= 0) {
      page.next_token = RoutingBackend::JoinId(backends[i].name, "");
      return page;
    }
    auto inner = list(*backends[i].backend, i == first ? token : std::string(), remaining);
    if (!inner.ok()) return inner.status().WithContext("backend \"" + backends[i].name + "\"");
    for (auto& record : inner->items) {
      BLOCKCSI_ASSIGN_OR_RETURN(T mapped, outer(backends[i], std::move(record)));
      page.items.push_back(std::move(mapped));
    }
    if (!inner->next_token.empty()) {
      page.next_token = RoutingBackend::JoinId(backends[i].name, inner->next_token);
      return page;
    }
  }
  return page;
}

}  // namespace

StatusOr<Page<VolumeRecord>> RoutingBackend::ListVolumes(const std::string& start_token, int max_entries) {
  BLOCKCSI_ASSIGN_OR_RETURN(auto start, ParseToken("list volumes", start_token));
  return PageAcross<VolumeRecord>(
      backends_, start.first, backends_.size(), start.second, max_entries,
      [](VolumeBackend& b, const std::string& token, int max) { return b.ListVolumes(token, max); },
      [this](const NamedBackend& b, VolumeRecord r) { return Outer(b, std::move(r)); });
}

StatusOr<uint64_t> RoutingBackend::AvailableBytes(const CapacityQuery& query) {
  std::vector<const NamedBackend*> candidates;
  if (auto it = query.parameters.find(storage_class::kBackend); it != query.parameters.end()) {
    const NamedBackend* backend = Find(it->second);
    if (backend == nullptr) {
      return InvalidArgument("parameter backend " + Quoted(it->second) + " names no configured backend");
    }
    candidates.push_back(backend);
  } else if (!query.accessible_topology.empty()) {
    // The hosts CreateVolume places on (placement.h): the default and
    // the zoned ones.
    for (size_t i = 0; i < backends_.size(); ++i) {
      if (i == default_index_ || !backends_[i].topology.empty()) candidates.push_back(&backends_[i]);
    }
  }
  if (query.accessible_topology.empty()) {
    if (candidates.empty()) candidates.push_back(&backends_[default_index_]);
    return candidates.front()->backend->AvailableBytes(query);
  }
  // One segment: what a volume made for it could get, i.e. the most free
  // space of one host it reaches (a volume is never split across hosts).
  std::optional<uint64_t> best;
  Status first_error;
  for (const NamedBackend* b : candidates) {
    if (!SegmentReaches(b->topology, query.accessible_topology)) continue;
    auto bytes = b->backend->AvailableBytes(query);
    if (!bytes.ok()) {
      if (first_error.ok()) first_error = bytes.status().WithContext("backend " + Quoted(b->name));
      continue;
    }
    best = std::max(best.value_or(0), *bytes);
  }
  if (best.has_value()) return *best;
  if (!first_error.ok()) return first_error;
  return uint64_t{0};  // no host serves this segment
}

StatusOr<SnapshotRecord> RoutingBackend::CreateSnapshot(const std::string& source_volume_id, const std::string& name) {
  BLOCKCSI_ASSIGN_OR_RETURN(Routed routed, Route("volume", source_volume_id));
  BLOCKCSI_ASSIGN_OR_RETURN(SnapshotRecord record, routed.backend->backend->CreateSnapshot(routed.inner_id, name));
  return Outer(*routed.backend, std::move(record));
}

Status RoutingBackend::DeleteSnapshot(const std::string& snapshot_id) {
  auto routed = Route("snapshot", snapshot_id);
  if (!routed.ok()) return OkStatus();
  return routed->backend->backend->DeleteSnapshot(routed->inner_id);
}

// The key stays bound to the outer id the controller wrapped it with; the
// inner backend stores the text as it is given.
Status RoutingBackend::SetWrappedDataKey(const std::string& id, const std::string& expected,
                                         const std::string& wrapped) {
  BLOCKCSI_ASSIGN_OR_RETURN(Routed routed, Route("volume or snapshot", id));
  return routed.backend->backend->SetWrappedDataKey(routed.inner_id, expected, wrapped);
}

StatusOr<SnapshotRecord> RoutingBackend::GetSnapshot(const std::string& snapshot_id) {
  BLOCKCSI_ASSIGN_OR_RETURN(Routed routed, Route("snapshot", snapshot_id));
  BLOCKCSI_ASSIGN_OR_RETURN(SnapshotRecord record, routed.backend->backend->GetSnapshot(routed.inner_id));
  return Outer(*routed.backend, std::move(record));
}

StatusOr<Page<SnapshotRecord>> RoutingBackend::ListSnapshots(const std::string& source_volume_id,
                                                             const std::string& start_token, int max_entries) {
  BLOCKCSI_ASSIGN_OR_RETURN(auto start, ParseToken("list snapshots", start_token));
  size_t first = start.first;
  size_t last = backends_.size();
  std::string inner_source;
  if (!source_volume_id.empty()) {
    BLOCKCSI_ASSIGN_OR_RETURN(Routed routed, Route("volume", source_volume_id));
    const size_t index = static_cast<size_t>(routed.backend - backends_.data());
    if (!start_token.empty() && start.first != index) {
      return Aborted("list snapshots: starting token " + Quoted(start_token) + " is not one of volume " +
                     Quoted(source_volume_id) + "'s backend");
    }
    first = index;
    last = index + 1;
    inner_source = routed.inner_id;
  }
  return PageAcross<SnapshotRecord>(
      backends_, first, last, start.second, max_entries,
      [&inner_source](VolumeBackend& b, const std::string& token, int max) {
        return b.ListSnapshots(inner_source, token, max);
      },
      [this](const NamedBackend& b, SnapshotRecord r) { return Outer(b, std::move(r)); });
}

bool RoutingBackend::MayHoldVolume(const std::string& volume_id) const {
  auto routed = Route("volume", volume_id);
  // "<name>~..." of a backend not configured here is not a volume here.
  return routed.ok() && routed->backend->backend->MayHoldVolume(routed->inner_id);
}

Status RoutingBackend::Healthy() {
  std::string sick;
  StatusCode code = StatusCode::kOk;
  for (const auto& b : backends_) {
    Status st = b.backend->Healthy();
    if (st.ok()) continue;
    if (code == StatusCode::kOk) code = st.code();
    sick += (sick.empty() ? "" : "; ") + std::string("backend ") + Quoted(b.name) + ": " + st.message();
  }
  if (code == StatusCode::kOk) return OkStatus();
  return Status(code, sick);
}

// Each host is asked at once, on a thread of its own: a host that is down
// (a remote agent waits out its call deadline) must not hold up the fence
// of the others. The answers keep configuration order; each carries the
// configured name, and the held volumes their routed ids.
std::vector<HostFences> RoutingBackend::EachHost(const std::function<std::vector<HostFences>(VolumeBackend&)>& call) {
  std::vector<std::vector<HostFences>> answers(backends_.size());
  std::vector<std::thread> threads;
  threads.reserve(backends_.size());
  for (size_t i = 0; i < backends_.size(); ++i) {
    threads.emplace_back([&, i] { answers[i] = call(*backends_[i].backend); });
  }
  for (auto& t : threads) t.join();
  std::vector<HostFences> out;
  for (size_t i = 0; i < backends_.size(); ++i) {
    for (auto& answer : answers[i]) {
      answer.host = backends_[i].name;
      for (auto& fence : answer.fences) {
        for (auto& held : fence.held) {
          auto outer = Outer(backends_[i], held.volume_id);
          if (outer.ok()) held.volume_id = *outer;
        }
      }
      if (!answer.status.ok()) answer.status = answer.status.WithContext("backend " + Quoted(backends_[i].name));
      out.push_back(std::move(answer));
    }
  }
  return out;
}

std::vector<HostFences> RoutingBackend::FenceNode(const std::string& node_id, const std::string& initiator_iqn) {
  return EachHost([&](VolumeBackend& b) { return b.FenceNode(node_id, initiator_iqn); });
}

std::vector<HostFences> RoutingBackend::UnfenceNode(const std::string& node_id) {
  return EachHost([&](VolumeBackend& b) { return b.UnfenceNode(node_id); });
}

std::vector<HostFences> RoutingBackend::ListFences() {
  return EachHost([](VolumeBackend& b) { return b.ListFences(); });
}

}  // namespace blockcsi
