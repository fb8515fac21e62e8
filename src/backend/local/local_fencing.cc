#include "backend/local/local_backend.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "backend/volume_id.h"
#include "common/keyed_lock.h"
#include "common/logging.h"
#include "contract/initiator.h"
#include "contract/iscsi_names.h"

// The local backend's fencing of a node: FenceNode, UnfenceNode, ListFences
// over the pool's fence records (pool_fences.cc).
namespace blockcsi {

namespace {

int64_t NowUnix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// The record first, durably: from then on GrantAccess refuses the node and
// DesiredFor leaves it out of every ACL, so a crash anywhere below leaves a
// fence that a retry completes and that nothing undoes meanwhile. Then
// every volume, each under its lock (so a grant racing the fence either
// sees the record or is revoked here): the node's grants are added to the
// record's `held` (durably, before they go) and revoked; a target where it
// holds none still has its sessions closed, in case one outlived an ACL.
std::vector<HostFences> LocalBackend::FenceNode(const std::string& node_id, const std::string& initiator_iqn) {
  HostFences out{Name(), OkStatus(), {}};
  auto answer = [&](Status status) {
    out.status = std::move(status);
    return std::vector<HostFences>{out};
  };
  if (Status st = ValidateNodeId(node_id); !st.ok()) return answer(st);
  if (Status st = ValidateIscsiName(initiator_iqn); !st.ok()) {
    return answer(st.WithContext("initiator of node " + QuoteId(node_id)));
  }
  ReaderMutexLock op(reconcile_mu_);
  MutexLock fencing(fence_mu_);
  FenceRecord record = pool_->GetFence(node_id).value_or(FenceRecord{node_id, initiator_iqn, NowUnix(), {}});
  record.initiator_iqn = initiator_iqn;
  if (Status st = pool_->PutFence(record); !st.ok()) return answer(st.WithContext("record the fence"));
  if (Status st = Fault("controller.fence.after-record"); !st.ok()) return answer(st);
  for (const auto& listed : pool_->ListVolumes()) {
    auto id_lock = locks_->Lock(listed.id);
    auto volume = pool_->GetVolume(listed.id);
    if (!volume) continue;  // deleted meanwhile
    std::set<std::string> iqns{initiator_iqn};
    bool held_here = false;
    for (const auto& grant : volume->grants) {
      if (grant.initiator_iqn != initiator_iqn && grant.node_id != node_id) continue;
      iqns.insert(grant.initiator_iqn);
      held_here = true;
      const bool known = std::any_of(record.held.begin(), record.held.end(), [&](const FencedGrant& h) {
        return h.volume_id == volume->id && h.grant.initiator_iqn == grant.initiator_iqn;
      });
      if (!known) record.held.push_back({volume->id, grant});
    }
    if (held_here) {
      if (Status st = pool_->PutFence(record); !st.ok()) return answer(st.WithContext("record the fence"));
      if (Status st = RevokeLocked(*volume, iqns); !st.ok()) {
        return answer(st.WithContext("fence node " + QuoteId(node_id) + " on volume " + volume->id));
      }
      LogInfo("fence: access revoked", {{"node", node_id}, {"volume", volume->id}});
    } else if (Status st = exporter_->CloseSessions(volume->target_iqn, initiator_iqn); !st.ok()) {
      return answer(st.WithContext("fence node " + QuoteId(node_id) + ": close sessions on volume " + volume->id));
    }
  }
  out.fences.push_back(record);
  LogInfo("node fenced", {{"node", node_id}, {"held", std::to_string(record.held.size())}});
  return answer(OkStatus());
}

std::vector<HostFences> LocalBackend::UnfenceNode(const std::string& node_id) {
  HostFences out{Name(), OkStatus(), {}};
  ReaderMutexLock op(reconcile_mu_);
  MutexLock fencing(fence_mu_);
  if (pool_->GetFence(node_id)) {
    out.status = pool_->RemoveFence(node_id).WithContext("remove the fence of node " + QuoteId(node_id));
    if (out.status.ok()) LogInfo("node unfenced", {{"node", node_id}});
  }
  return {out};
}

std::vector<HostFences> LocalBackend::ListFences() { return {HostFences{Name(), OkStatus(), pool_->ListFences()}}; }

}  // namespace blockcsi
