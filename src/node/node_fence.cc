#include <algorithm>

#include "common/logging.h"
#include "node/node_internal.h"
#include "node/node_service.h"
#include "node/staged_facts.h"

// What a fenced node does with what it holds: it lets go of all of it at
// once, without waiting for kubelet (whose pods the control plane is
// deleting anyway), and refuses to stage anything new until unfenced.
namespace blockcsi {

using namespace node_internal;  // NOLINT(google-build-using-namespace): the node_*.cc files share these helpers

void NodeService::SetFenced(const std::string& fence_id) {
  MutexLock lock(fence_mu_);
  if (fence_id != fence_id_) {
    if (fence_id.empty()) {
      LogInfo("node unfenced: NodeStage allowed again", {{"node", options_.node_id}});
    } else {
      LogWarn("node fenced: releasing every volume, refusing NodeStage",
              {{"node", options_.node_id}, {"fence", fence_id}});
    }
  }
  fence_id_ = fence_id;
}

std::string NodeService::Fenced() const {
  MutexLock lock(fence_mu_);
  return fence_id_;
}

Status NodeService::ReleaseAll(std::vector<std::string>* lazily_unmounted) {
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<AttachRecord> records, options_.attacher->List());
  Status first;
  for (const auto& record : records) {
    auto lease = in_flight_.Acquire(record.volume_id, "fence cleanup");
    Status st = lease.ok() ? ReleaseOne(record, lazily_unmounted) : lease.status();
    if (!st.ok()) {
      LogWarn("fence cleanup: volume not released yet", {{"volume_id", record.volume_id}, {"error", st.ToString()}});
      if (first.ok()) first = st;
    }
  }
  return first;
}

Status NodeService::ReleaseOne(const AttachRecord& record, std::vector<std::string>* lazily_unmounted) {
  const std::string& volume_id = record.volume_id;
  const std::string staging = StagedFacts::Of(record).staging_path;
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<MountEntry> table, options_.mounter->List());
  const std::string device = VolumeDevice(*options_.host, record);
  StatusOr<std::string> devnum = NotFound("no device");
  if (!device.empty()) devnum = options_.host->DeviceNumber(device);
  // The pods' mounts first (binds of the staging mount or of the device),
  // the staging mount last; each layer of a path in turn.
  std::vector<std::string> targets;
  for (const auto& e : table) {
    if (e.target == staging) continue;
    const bool of_device =
        (devnum.ok() && e.major_minor == *devnum) ||
        (!device.empty() && (IsBindOfDeviceNode(e, device) || IsReadOnlyLayerOf(*options_.host, e, device)));
    if (of_device) targets.push_back(e.target);
  }
  if (!staging.empty()) targets.push_back(staging);
  bool any_lazy = false;
  for (const auto& target : targets) {
    for (int layer = 0; FindMountAt(table, target) != nullptr && layer < kMaxMountLayers; ++layer) {
      Status st = options_.mounter->Unmount(target);
      if (!st.ok() && st.code() != StatusCode::kNotFound) {
        // The device is cut off: a filesystem with dirty data may refuse a
        // clean unmount. Detached lazily, it is out of every path now and
        // the kernel drops it when its last user goes; reported.
        Status lazy = options_.mounter->UnmountLazily(target);
        if (!lazy.ok() && lazy.code() != StatusCode::kNotFound) {
          return lazy.WithContext("volume " + volume_id + ": fence cleanup (after: " + st.message() + ")");
        }
        LogWarn("fence cleanup: filesystem detached lazily",
                {{"volume_id", volume_id}, {"path", target}, {"error", st.message()}});
        if (lazily_unmounted != nullptr) lazily_unmounted->push_back(target);
        any_lazy = true;
      }
      BLOCKCSI_ASSIGN_OR_RETURN(table, options_.mounter->List());
    }
  }
  // A filesystem detached lazily still holds the mapping: the kernel
  // removes it when that filesystem lets go.
  BLOCKCSI_RETURN_IF_ERROR(CloseMapping(record, any_lazy).WithContext("fence cleanup"));
  Status detached = options_.attacher->Detach(volume_id);
  if (!detached.ok()) return detached.WithContext("volume " + volume_id + ": fence cleanup: detach");
  LogInfo("fence cleanup: volume released", {{"volume_id", volume_id}});
  return OkStatus();
}

}  // namespace blockcsi
