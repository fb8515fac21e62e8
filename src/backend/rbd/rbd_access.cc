#include "backend/rbd/rbd_backend.h"

#include <openssl/sha.h>
#include <rados/librados.h>
#include <rbd/librbd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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

// Granting and revoking a node's access to an RBD volume.
namespace blockcsi::rbd_internal {

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
  // Under the image's lock: a fence that lands after this waits for it and
  // then revokes what this grant adds.
  BLOCKCSI_ASSIGN_OR_RETURN(auto fence, GetNodeFence(node));
  if (fence) return FailedPrecondition(FencedMessage(*fence, volume_id));
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

namespace {

// The client addresses an earlier revoke of `node` blocklisted (its fence
// record), to be lifted later.
std::vector<std::string> FencedAddrs(const std::map<std::string, std::string>& meta, const std::string& node) {
  std::vector<std::string> fenced;
  if (auto it = meta.find(kMetaFencePrefix + node); it != meta.end()) {
    json j = json::parse(it->second, nullptr, false);
    if (j.is_object() && j["addrs"].is_array()) {
      for (const auto& a : j["addrs"]) {
        if (a.is_string()) fenced.push_back(a.get<std::string>());
      }
    }
  }
  return fenced;
}

// The client addresses of a "a,b,..." metadata value.
std::set<std::string> AddrsOf(const std::string& value) {
  std::set<std::string> addrs;
  for (auto& addr : SplitString(value, ',')) {
    if (!addr.empty()) addrs.insert(addr);
  }
  return addrs;
}

// The nodes other than `node` granted the image, and the clients they
// registered (their bridges write blockcsi.client.<node> when they attach).
struct OtherGrants {
  bool any = false;
  bool all_registered = true;
  std::set<std::string> clients;
};
OtherGrants OtherGrantsOf(const std::map<std::string, std::string>& meta, const std::string& node) {
  OtherGrants others;
  const std::string grant_key = kMetaGrantPrefix + node;
  for (const auto& [key, value] : meta) {
    if (!key.starts_with(kMetaGrantPrefix) || key == grant_key) continue;
    others.any = true;
    auto registered = meta.find(kMetaClientPrefix + key.substr(std::string_view(kMetaGrantPrefix).size()));
    if (registered == meta.end()) {
      others.all_registered = false;
      continue;
    }
    others.clients.merge(AddrsOf(registered->second));
  }
  return others;
}

}  // namespace

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
  return RevokeLocked(volume_id, *image, handle.get(), meta, node);
}

Status RbdBackend::RevokeLocked(const std::string& volume_id, const std::string& image_name, rbd_image_t image,
                                const std::map<std::string, std::string>& meta, const std::string& node) {
  const std::string grant_key = kMetaGrantPrefix + node;
  const std::string client_key = kMetaClientPrefix + node;
  const OtherGrants others = OtherGrantsOf(meta, node);

  // Whose clients to cut off: the ones the node registered as its own; when
  // it registered none, the watchers no other granted node registered (only
  // when every other node did: an unregistered one's client would look like
  // this node's); and when nobody else may use the image after this, every
  // watcher. Never another granted node's registered client.
  std::set<std::string> fence;
  if (auto it = meta.find(client_key); it != meta.end()) fence = AddrsOf(it->second);
  BLOCKCSI_ASSIGN_OR_RETURN(auto all_watchers, ListWatchers(image, Spec(image_name)));
  auto watchers = OthersOnly(std::move(all_watchers));
  if (!others.any) {
    for (const auto& w : watchers) fence.insert(w.addr);
  } else if (!meta.contains(client_key) && others.all_registered) {
    for (const auto& w : watchers) {
      if (!others.clients.contains(w.addr)) fence.insert(w.addr);
    }
  } else if (!meta.contains(client_key) && !watchers.empty()) {
    LogWarn(
        "rbd revoke cannot tell this node's clients from other nodes' (a granted node registered none); "
        "not fencing",
        {{"volume", volume_id}, {"node", node}});
  }
  for (const auto& addr : others.clients) fence.erase(addr);

  std::vector<std::string> fenced = FencedAddrs(meta, node);
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
    int r = rbd_metadata_set(image, (kMetaFencePrefix + node).c_str(), j.dump().c_str());
    if (r < 0) return CephError(r, "set metadata of " + Spec(image_name));
    // A blocklisted owner cannot release its exclusive lock; break it so the
    // next node's client takes the lock at once instead of waiting it out.
    BLOCKCSI_ASSIGN_OR_RETURN(auto lockers, ListLockers(image, Spec(image_name)));
    for (const auto& locker : lockers) {
      if (!fence.contains(locker.addr)) continue;
      r = rbd_break_lock(image, locker.client.c_str(), locker.cookie.c_str());
      if (r < 0 && r != -ENOENT) return CephError(r, "break lock of " + locker.client + " on " + Spec(image_name));
    }
  }
  for (const std::string& key : {grant_key, client_key}) {
    int r = rbd_metadata_remove(image, key.c_str());
    if (r < 0 && r != -ENOENT) return CephError(r, "remove metadata of " + Spec(image_name));
  }
  LogInfo("rbd volume unpublished", {{"volume", volume_id}, {"node", node}});
  return OkStatus();
}

// ---- fencing -----------------------------------------------------------
// The node's fence is a pool metadata entry (blockcsi.fenced.<node>), set
// before anything else so that GrantAccess refuses the node from then on;
// then every image of ours, each under its lock (a grant racing the fence
// either sees the entry or is revoked here): a grant of the node is added
// to the entry's `held` and revoked, which blocklists the node's clients
// and breaks their exclusive lock (RevokeLocked).

StatusOr<std::optional<FenceRecord>> RbdBackend::GetNodeFence(const std::string& node) const {
  const std::string key = kPoolMetaFencedPrefix + node;
  size_t len = 4096;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string value(len, '\0');
    int r = rbd_pool_metadata_get(io_, key.c_str(), value.data(), &len);
    if (r == -ERANGE) continue;
    if (r == -ENOENT) return std::optional<FenceRecord>();
    if (r < 0) return CephError(r, "read the fence of node " + node + " in pool " + options_.pool);
    value.resize(strnlen(value.c_str(), len));
    auto record = FenceRecordFromJson(value);
    // An unreadable entry still fences: the node stays out.
    if (!record.ok()) return std::optional<FenceRecord>(FenceRecord{node, InitiatorIqnForNode(node), 0, {}});
    return std::optional<FenceRecord>(*std::move(record));
  }
  return Internal("read the fence of node " + node + ": value keeps growing");
}

Status RbdBackend::PutNodeFence(const FenceRecord& record) {
  const std::string key = kPoolMetaFencedPrefix + record.node_id;
  int r = rbd_pool_metadata_set(io_, key.c_str(), FenceRecordToJson(record).c_str());
  if (r < 0) return CephError(r, "record the fence of node " + record.node_id + " in pool " + options_.pool);
  return OkStatus();
}

std::vector<HostFences> RbdBackend::FenceNode(const std::string& node_id, const std::string& initiator_iqn) {
  HostFences out{Name(), OkStatus(), {}};
  auto answer = [&](Status status) {
    out.status = std::move(status);
    return std::vector<HostFences>{out};
  };
  if (Status st = ValidateNodeId(node_id); !st.ok()) return answer(st);
  auto fencing = locks_.Lock(std::string("fence:") + node_id);  // never an image name
  auto existing = GetNodeFence(node_id);
  if (!existing.ok()) return answer(existing.status());
  FenceRecord record =
      existing->value_or(FenceRecord{node_id, initiator_iqn, static_cast<int64_t>(std::time(nullptr)), {}});
  if (Status st = PutNodeFence(record); !st.ok()) return answer(st);
  auto names = ListImageNames(io_);
  if (!names.ok()) return answer(names.status());
  const std::string grant_key = kMetaGrantPrefix + node_id;
  for (const auto& name : *names) {
    if (!HasHashedName(name, kVolumePrefix)) continue;
    auto held = locks_.Lock(name);
    auto opened = Open(name);
    if (!opened.ok()) {
      if (opened.status().code() == StatusCode::kNotFound) continue;  // deleted meanwhile
      return answer(opened.status());
    }
    auto meta = ListMetadata(opened->get(), Spec(name));
    if (!meta.ok()) return answer(meta.status());
    auto grant = meta->find(grant_key);
    if (grant == meta->end()) continue;
    const std::string volume_id = VolumeId(options_.pool, name);
    json j = json::parse(grant->second, nullptr, false);
    GrantRecord g{initiator_iqn, node_id, false, "", false};
    if (j.is_object()) {
      g.initiator_iqn = j.value("initiator_iqn", initiator_iqn);
      g.read_only = j.value("read_only", false);
      g.capability = j.value("capability", "");
    }
    const bool known = std::any_of(record.held.begin(), record.held.end(),
                                   [&](const FencedGrant& h) { return h.volume_id == volume_id; });
    if (!known) {
      record.held.push_back({volume_id, g});
      if (Status st = PutNodeFence(record); !st.ok()) return answer(st);
    }
    if (Status st = RevokeLocked(volume_id, name, opened->get(), *meta, node_id); !st.ok()) {
      return answer(st.WithContext("fence node \"" + node_id + "\" on volume " + volume_id));
    }
  }
  out.fences.push_back(record);
  LogInfo("node fenced", {{"node", node_id}, {"pool", options_.pool}, {"held", std::to_string(record.held.size())}});
  return answer(OkStatus());
}

std::vector<HostFences> RbdBackend::UnfenceNode(const std::string& node_id) {
  HostFences out{Name(), OkStatus(), {}};
  if (!ValidateNodeId(node_id).ok()) return {out};
  auto fencing = locks_.Lock(std::string("fence:") + node_id);
  int r = rbd_pool_metadata_remove(io_, (kPoolMetaFencedPrefix + node_id).c_str());
  if (r < 0 && r != -ENOENT) {
    out.status = CephError(r, "remove the fence of node " + node_id + " in pool " + options_.pool);
  } else if (r == 0) {
    // The blocklist entries themselves are lifted by the next grant to the
    // node once none of its fenced clients is still a watcher (GrantAccess).
    LogInfo("node unfenced", {{"node", node_id}, {"pool", options_.pool}});
  }
  return {out};
}

std::vector<HostFences> RbdBackend::ListFences() {
  HostFences out{Name(), OkStatus(), {}};
  size_t key_len = 4096, val_len = 16384;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string keys(key_len, '\0'), vals(val_len, '\0');
    int r = rbd_pool_metadata_list(io_, kPoolMetaFencedPrefix, 0, keys.data(), &key_len, vals.data(), &val_len);
    if (r == -ERANGE) continue;
    if (r == -ENOENT) return {out};
    if (r < 0) {
      out.status = CephError(r, "list metadata of pool " + options_.pool);
      return {out};
    }
    auto k = SplitNul(keys, key_len);
    auto v = SplitNul(vals, val_len);
    for (size_t i = 0; i < k.size() && i < v.size(); ++i) {
      if (!k[i].starts_with(kPoolMetaFencedPrefix)) continue;
      auto record = FenceRecordFromJson(v[i]);
      const std::string node = k[i].substr(sizeof(kPoolMetaFencedPrefix) - 1);
      out.fences.push_back(record.ok() ? *record : FenceRecord{node, InitiatorIqnForNode(node), 0, {}});
    }
    return {out};
  }
  out.status = Internal("list metadata of pool " + options_.pool + ": buffer keeps growing");
  return {out};
}

// A snapshot's key is its image's (SnapRecord), so setting it sets the
// image's; the compare-and-set is under the image's metadata lock.
Status RbdBackend::SetWrappedDataKey(const std::string& id, const std::string& expected, const std::string& wrapped) {
  std::optional<std::string> image = OurImage(id);
  if (!image) {
    if (auto snap = OurSnapshot(id)) image = snap->volume.image;
  }
  if (!image) return NotFound("volume or snapshot " + id + " not found");
  if (wrapped.empty()) return InvalidArgument("wrapped data key of " + id + " is empty");
  auto held = locks_.Lock(*image);
  BLOCKCSI_ASSIGN_OR_RETURN(auto handle, Open(*image));
  BLOCKCSI_ASSIGN_OR_RETURN(auto meta, ListMetadata(handle.get(), Spec(*image)));
  if (!meta.contains(kMetaName)) return NotFound("volume of " + id + " not found");
  auto it = meta.find(kMetaWrappedKey);
  const std::string current = it == meta.end() ? "" : it->second;
  if (current == wrapped) return OkStatus();
  if (current != expected) {
    return Aborted("the wrapped data key of " + id + " is not the one this call read (changed meanwhile); re-read it");
  }
  int r = rbd_metadata_set(handle.get(), kMetaWrappedKey, wrapped.c_str());
  if (r < 0) return CephError(r, "set the wrapped data key of " + Spec(*image));
  LogInfo("wrapped data key stored", {{"volume", VolumeId(options_.pool, *image)}});
  return OkStatus();
}

}  // namespace blockcsi::rbd_internal
