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

  const std::string grant_key = kMetaGrantPrefix + node;
  const std::string client_key = kMetaClientPrefix + node;
  bool others_granted = false;
  for (const auto& [key, value] : meta) {
    if (key.starts_with(kMetaGrantPrefix) && key != grant_key) others_granted = true;
  }

  // Whose clients to cut off: the ones the node said are its own, and — when
  // nobody else may use the image after this — every other watcher too.
  std::set<std::string> fence;
  if (auto it = meta.find(client_key); it != meta.end()) {
    for (auto& addr : SplitString(it->second, ',')) {
      if (!addr.empty()) fence.insert(addr);
    }
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto all_watchers, ListWatchers(handle.get(), Spec(*image)));
  auto watchers = OthersOnly(std::move(all_watchers));
  if (!others_granted) {
    for (const auto& w : watchers) fence.insert(w.addr);
  } else if (!meta.contains(client_key) && !watchers.empty()) {
    LogWarn("rbd revoke cannot tell this node's clients from other nodes'; not fencing",
            {{"volume", volume_id}, {"node", node}});
  }

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
    int r = rbd_metadata_set(handle.get(), (kMetaFencePrefix + node).c_str(), j.dump().c_str());
    if (r < 0) return CephError(r, "set metadata of " + Spec(*image));
    // A blocklisted owner cannot release its exclusive lock; break it so the
    // next node's client takes the lock at once instead of waiting it out.
    BLOCKCSI_ASSIGN_OR_RETURN(auto lockers, ListLockers(handle.get(), Spec(*image)));
    for (const auto& locker : lockers) {
      if (!fence.contains(locker.addr)) continue;
      r = rbd_break_lock(handle.get(), locker.client.c_str(), locker.cookie.c_str());
      if (r < 0 && r != -ENOENT) return CephError(r, "break lock of " + locker.client + " on " + Spec(*image));
    }
  }
  for (const std::string& key : {grant_key, client_key}) {
    int r = rbd_metadata_remove(handle.get(), key.c_str());
    if (r < 0 && r != -ENOENT) return CephError(r, "remove metadata of " + Spec(*image));
  }
  LogInfo("rbd volume unpublished", {{"volume", volume_id}, {"node", node}});
  return OkStatus();
}

}  // namespace blockcsi::rbd_internal
