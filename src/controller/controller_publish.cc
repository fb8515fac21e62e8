#include "controller/controller_service.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <limits>
#include <set>

#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/mkfs_mount_options.h"
#include "contract/chap_rules.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "contract/static_volume.h"
#include "controller/capabilities.h"
#include "controller/controller_internal.h"
#include "controller/parameters.h"

// ControllerPublishVolume and ControllerUnpublishVolume.
namespace blockcsi {

using namespace controller_internal;  // NOLINT(google-build-using-namespace): the controller_*.cc files share these
                                      // helpers

// ---- ControllerPublishVolume --------------------------------------------
// Idempotent per (volume, node): the same capability and readonly again →
// OK with the same publish_context (the grant is confirmed again, which also
// heals an ACL lost on the target); another capability or readonly on the
// same node → ALREADY_EXISTS. The node's initiator IQN is derived from
// node_id alone (contract/initiator.h).
grpc::Status ControllerService::ControllerPublishVolume(grpc::ServerContext*,
                                                        const csi::v1::ControllerPublishVolumeRequest* request,
                                                        csi::v1::ControllerPublishVolumeResponse* response) {
  return ToGrpcStatus(Publish(*request, response));
}

namespace {

// Whether `node_id` may have the volume in `mode` beside the grants it
// already has; *mine is this node's own grant, if any (an incompatible one
// is ALREADY_EXISTS).
Status CheckAccessModes(const VolumeRecord& record, const std::string& id, const std::string& node_id,
                        const std::string& iqn, AccessMode mode, const std::string& fingerprint, bool read_only,
                        const GrantRecord** mine) {
  *mine = nullptr;
  int other_writers = 0;
  for (const auto& grant : record.grants) {
    if (GrantIsForNode(grant, node_id, iqn)) {
      *mine = &grant;
      continue;
    }
    AccessMode other_mode = ModeFromFingerprint(grant.capability);
    // A grant whose mode we cannot read (made by hand, or by another tool)
    // is taken as exclusive: sharing a LUN by mistake corrupts it.
    const bool other_exclusive =
        IsSingleNodeMode(other_mode) || other_mode == AccessMode::VolumeCapability_AccessMode_Mode_UNKNOWN;
    if (IsSingleNodeMode(mode) || other_exclusive) {
      return FailedPrecondition("volume " + Quoted(id) + " is already published to node " +
                                Quoted(GrantNodeName(grant)) + " (" + grant.capability +
                                "), a single-node access mode; unpublish it there before publishing to node " +
                                Quoted(node_id));
    }
    if (!grant.read_only) ++other_writers;
  }
  if (*mine != nullptr && ((*mine)->capability != fingerprint || (*mine)->read_only != read_only)) {
    return AlreadyExists("volume " + Quoted(id) + " is already published to node " + Quoted(node_id) + " as " +
                         (*mine)->capability + ((*mine)->read_only ? " read-only" : " read-write") +
                         ", incompatible with " + fingerprint + (read_only ? " read-only" : " read-write"));
  }
  bool single_writer = mode == AccessMode::VolumeCapability_AccessMode_Mode_MULTI_NODE_SINGLE_WRITER;
  for (const auto& grant : record.grants) {
    single_writer |=
        ModeFromFingerprint(grant.capability) == AccessMode::VolumeCapability_AccessMode_Mode_MULTI_NODE_SINGLE_WRITER;
  }
  if (*mine == nullptr && single_writer && !read_only && other_writers > 0) {
    for (const auto& grant : record.grants) {
      if (!grant.read_only && !GrantIsForNode(grant, node_id, iqn)) {
        return FailedPrecondition("volume " + Quoted(id) + " (MULTI_NODE_SINGLE_WRITER) already has a writer on node " +
                                  Quoted(GrantNodeName(grant)) + "; node " + Quoted(node_id) +
                                  " may only publish it read-only");
      }
    }
  }
  return OkStatus();
}

}  // namespace

Status ControllerService::Publish(const csi::v1::ControllerPublishVolumeRequest& request,
                                  csi::v1::ControllerPublishVolumeResponse* response) {
  const std::shared_ptr<VolumeBackend> backend = BackendFor(request.secrets());
  const std::string& id = request.volume_id();
  const std::string& node_id = request.node_id();
  if (id.empty()) return InvalidArgument("ControllerPublishVolume: volume_id is required");
  if (node_id.empty())
    return InvalidArgument("ControllerPublishVolume: volume " + Quoted(id) + ": node_id is required");
  BLOCKCSI_RETURN_IF_ERROR(ValidateNodeId(node_id));
  const std::string what = "volume " + Quoted(id) + " on node " + Quoted(node_id);
  if (!request.has_volume_capability()) return InvalidArgument(what + ": volume_capability is required");
  const auto& capability = request.volume_capability();
  BLOCKCSI_RETURN_IF_ERROR(ValidateCapabilityAndFsType(capability, what));
  const AccessMode mode = capability.access_mode().mode();
  const bool read_only = request.readonly() || IsReadOnlyMode(mode);
  const std::string fingerprint = CapabilityFingerprint(capability);
  const std::string iqn = InitiatorIqnForNode(node_id);
  const std::map<std::string, std::string> volume_context(request.volume_context().begin(),
                                                          request.volume_context().end());
  // A fenced node gets nothing, a static volume included: the fence's
  // promise is that the node does not write until it has cleaned up.
  if (options_.fencer) {
    if (auto refusal = options_.fencer->PublishRefusal(node_id, id)) return FailedPrecondition(*refusal);
  }
  if (IsStaticVolume(volume_context)) return PublishStatic(request, volume_context, read_only, response);

  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, volume_ops_.Acquire(id, "ControllerPublishVolume"));
  BLOCKCSI_ASSIGN_OR_RETURN(VolumeRecord record, GetVolumeRecord(*backend, id));
  if (options_.node_exists) {
    auto exists = options_.node_exists(node_id);
    if (!exists.ok()) return Named(exists.status(), "node", node_id);
    if (!*exists) return NotFound("node " + Quoted(node_id) + " does not exist (publishing volume " + Quoted(id) + ")");
  }

  const GrantRecord* mine = nullptr;
  BLOCKCSI_RETURN_IF_ERROR(CheckAccessModes(record, id, node_id, iqn, mode, fingerprint, read_only, &mine));

  VolumeParameters params = VolumeParametersFromRecord(record.parameters);
  auto ctx_chap = request.volume_context().find(storage_class::kChap);
  // The record is the authority; the volume_context is a second opinion so
  // that a statically provisioned PV can ask for CHAP too.
  const bool chap_required = params.chap || (ctx_chap != request.volume_context().end() && ctx_chap->second == "true");
  BLOCKCSI_RETURN_IF_ERROR(CheckKeyed(params, record));
  AccessGrant grant{iqn, node_id, read_only, fingerprint, {}};
  if (chap_required) {
    BLOCKCSI_ASSIGN_OR_RETURN(grant.chap, ChapFromSecrets(request.secrets(), id));
  }

  KeyedLock::Guard node_lock;
  if (mine == nullptr && options_.max_volumes_per_node > 0) {
    node_lock = node_limit_locks_.Lock(node_id);
    BLOCKCSI_ASSIGN_OR_RETURN(int64_t on_node, CountGrantsOnNode(*backend, node_id, id));
    if (on_node >= options_.max_volumes_per_node) {
      return ResourceExhausted(
          "node " + Quoted(node_id) + " already has " + std::to_string(on_node) +
          " volumes published, its maximum (--max-volumes-per-node=" + std::to_string(options_.max_volumes_per_node) +
          "); cannot publish volume " + Quoted(id));
    }
  }
  auto granted = backend->GrantAccess(id, grant);
  if (!granted.ok()) {
    if (granted.status().code() == StatusCode::kNotFound) {
      return NotFound("volume " + Quoted(id) + " does not exist");
    }
    return Named(granted.status(), "volume", id);
  }
  for (const auto& [k, v] : PublishContextFor(*granted, read_only, chap_required)) {
    (*response->mutable_publish_context())[k] = v;
  }
  LogInfo("volume published", {{"volume", id},
                               {"node", node_id},
                               {"capability", fingerprint},
                               {"readonly", read_only ? "true" : "false"},
                               {"chap", chap_required ? "true" : "false"}});
  return OkStatus();
}

// A static volume: the PV's attributes name a LUN no backend
// made. Nothing is granted (the array's admin owns its ACLs) and no backend
// is asked; the publish_context comes from the attributes alone, so the
// call is idempotent by construction. Access-mode conflicts between nodes
// are the CO's to enforce here (there is no grant record to check), and the
// LUN does not count against --max-volumes-per-node (it holds no grant).
Status ControllerService::PublishStatic(const csi::v1::ControllerPublishVolumeRequest& request,
                                        const std::map<std::string, std::string>& volume_context, bool read_only,
                                        csi::v1::ControllerPublishVolumeResponse* response) {
  const std::string& id = request.volume_id();
  // A handle a backend could have made would route DeleteVolume,
  // ControllerUnpublish and ControllerExpand of this PV to that backend's
  // volume of the same id: refuse it so that a static PV can never reach one.
  if (backend_->MayHoldVolume(id)) {
    return InvalidArgument("volume " + Quoted(id) + ": volumeHandle has the form of a blockcsi-made volume id (" +
                           backend_->Name() + "); a static PV needs a handle of another form, e.g. \"static-" +
                           "<array>-<lun>\"");
  }
  BLOCKCSI_ASSIGN_OR_RETURN(auto context, StaticPublishContext(id, volume_context, read_only));
  // The spec's NOT_FOUND for an unknown node holds for static volumes too.
  if (options_.node_exists) {
    auto exists = options_.node_exists(request.node_id());
    if (!exists.ok()) return Named(exists.status(), "node", request.node_id());
    if (!*exists) {
      return NotFound("node " + Quoted(request.node_id()) + " does not exist (publishing volume " + Quoted(id) + ")");
    }
  }
  for (const auto& [k, v] : context) (*response->mutable_publish_context())[k] = v;
  LogInfo("static volume published (nothing granted)", {{"volume", id},
                                                        {"node", request.node_id()},
                                                        {"target", context[publish_context::kTargetIqn]},
                                                        {"lun", context[publish_context::kLun]}});
  return OkStatus();
}

StatusOr<int64_t> ControllerService::CountGrantsOnNode(VolumeBackend& backend, const std::string& node_id,
                                                       const std::string& except_volume_id) {
  const std::string iqn = InitiatorIqnForNode(node_id);
  int64_t count = 0;
  std::string token;
  do {
    auto page = backend.ListVolumes(token, 0);
    if (!page.ok()) return page.status().WithContext("counting the volumes on node " + Quoted(node_id));
    for (const auto& volume : page->items) {
      if (volume.id == except_volume_id) continue;
      for (const auto& grant : volume.grants) {
        if (GrantIsForNode(grant, node_id, iqn)) {
          ++count;
          break;
        }
      }
    }
    token = page->next_token;
  } while (!token.empty());
  return count;
}

// ---- ControllerUnpublishVolume ------------------------------------------
// Idempotent: an unknown volume, a node without a grant, or a node id that
// could never have been granted (malformed) → OK, so that a VolumeAttachment
// of a deleted node or volume can always be finalized. An empty node_id
// unpublishes from every node, as the spec asks.
grpc::Status ControllerService::ControllerUnpublishVolume(grpc::ServerContext*,
                                                          const csi::v1::ControllerUnpublishVolumeRequest* request,
                                                          csi::v1::ControllerUnpublishVolumeResponse*) {
  return ToGrpcStatus(Unpublish(*request));
}

Status ControllerService::Unpublish(const csi::v1::ControllerUnpublishVolumeRequest& request) {
  const std::shared_ptr<VolumeBackend> backend = BackendFor(request.secrets());
  const std::string& id = request.volume_id();
  const std::string& node_id = request.node_id();
  if (id.empty()) return InvalidArgument("ControllerUnpublishVolume: volume_id is required");
  if (!node_id.empty() && !ValidateNodeId(node_id).ok()) return OkStatus();
  // A fenced node's grants are gone, or are the fence's to take (it retries
  // a host that was down): its VolumeAttachments are finalized at once.
  if (!node_id.empty() && options_.fencer && options_.fencer->Get(node_id)) {
    LogInfo("volume unpublished from a fenced node (the fence revoked its access)",
            {{"volume", id}, {"node", node_id}});
    return OkStatus();
  }
  // A static PV's handle (or any id no backend makes): nothing was granted.
  if (!backend_->MayHoldVolume(id)) return OkStatus();
  BLOCKCSI_ASSIGN_OR_RETURN(InFlightLease lease, volume_ops_.Acquire(id, "ControllerUnpublishVolume"));
  std::vector<std::string> iqns;
  if (!node_id.empty()) {
    iqns.push_back(InitiatorIqnForNode(node_id));
  } else {
    auto record = backend->GetVolume(id);
    if (!record.ok()) {
      if (IsMissing(record.status())) return OkStatus();
      return Named(record.status(), "volume", id);
    }
    for (const auto& grant : record->grants) iqns.push_back(grant.initiator_iqn);
  }
  for (const auto& iqn : iqns) {
    Status st = backend->RevokeAccess(id, iqn);
    if (IsMissing(st)) continue;
    BLOCKCSI_RETURN_IF_ERROR(Named(st, "volume", id));
  }
  LogInfo("volume unpublished", {{"volume", id}, {"node", node_id.empty() ? "(all)" : node_id}});
  return OkStatus();
}

}  // namespace blockcsi
