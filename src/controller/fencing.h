// NodeFencer: the controller's side of fencing — cutting a node off from
// every storage host so that it can never write again, recorded on each
// host (VolumeBackend::FenceNode) and mirrored here for the CSI calls:
// ControllerPublish to a fenced node is FAILED_PRECONDITION naming the
// fence, ControllerUnpublish from it succeeds at once (its grants are gone,
// or are being taken by the fence). A fence is complete when every host
// answered OK; until then it is retried (RetryPending) and the hosts that
// are missing are named with their reason.
//
// Unfencing needs the node's plugin to have reported that it cleaned up
// after this fence (ReportCleanedUp, naming the fence's id, or the report
// read back through the FenceChannel), never a timer; `force` skips that for
// an admin who knows the node is gone for good.
//
// Whoever fences (the watcher, blockctl fence), the node is told through
// the FenceChannel when there is one (the Kubernetes API: FenceLeases), and
// Unfence reads its report there and withdraws the notice.
//
// Durability: the records live on the storage hosts; Load() rebuilds this
// mirror from them at start, and a node fenced on any host is fenced again
// on all (a controller killed mid-fence converges). The cleanup report is
// kept in memory only: the node's report lives where it wrote it (the
// watcher reads it again after a restart).
//
// Thread-safe: calls for one node are serialised; different nodes run at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/keyed_lock.h"
#include "common/mutex.h"
#include "common/status.h"

namespace blockcsi {

struct HeldVolume {
  std::string host;
  FencedGrant grant;
};

struct NodeFence {
  std::string node_id;
  int64_t since_unix_seconds = 0;  // the earliest of the hosts' records
  std::vector<HeldVolume> held;
  // Host → why the node is not fenced there yet. Empty: fenced everywhere.
  std::map<std::string, std::string> pending;
  bool cleaned_up = false;
  bool complete() const { return pending.empty(); }
  // What the node names in its cleanup report: RFC 3339 of `since`.
  std::string id() const { return FenceTime(since_unix_seconds); }
};

// Where a fenced node hears of its fence and reports its cleanup. Thread-safe.
class FenceChannel {
 public:
  virtual ~FenceChannel() = default;
  virtual Status Publish(const std::string& node_id, const std::string& fence_id) = 0;
  // The fence id the node last reported cleaning up after, or "".
  virtual StatusOr<std::string> CleanupReport(const std::string& node_id) = 0;
  virtual Status Withdraw(const std::string& node_id) = 0;
};

class NodeFencer {
 public:
  // `channel` may be null (no Kubernetes API): the node is then not told,
  // and only ReportCleanedUp or force can unfence.
  explicit NodeFencer(std::shared_ptr<VolumeBackend> backend, std::shared_ptr<FenceChannel> channel = nullptr);
  NodeFencer(const NodeFencer&) = delete;
  NodeFencer& operator=(const NodeFencer&) = delete;

  // Reads every host's fences and fences each node found on every host that
  // lacks it. Hosts that cannot be read are returned (host → reason); their
  // records are read again by the next Load().
  std::map<std::string, std::string> Load();

  // One round of fencing on every host, then the node is told (a channel
  // that fails is logged: the fence stands, Tell retries). Idempotent.
  // INVALID_ARGUMENT for a node id that is not one (nothing is fenced).
  StatusOr<NodeFence> Fence(const std::string& node_id);
  // Tells the node of its fence again (e.g. a notice someone deleted). OK
  // without a channel or without a fence.
  Status Tell(const std::string& node_id);
  // Reads the channel's report of every fenced node not reported yet.
  void RefreshReports();
  // Fences again every node whose fence is not complete; their states after.
  std::vector<NodeFence> RetryPending();

  // The node's plugin says it cleaned up after the fence `fence_id`
  // (NodeFence::id()). A report for another fence (an older one) is
  // ignored: false.
  bool ReportCleanedUp(const std::string& node_id, const std::string& fence_id);

  // Lifts the fence on every host, then withdraws the node's notice.
  // FAILED_PRECONDITION when the node has not reported its cleanup (unless
  // `force`; the channel's report is read first); a host or a channel that
  // fails leaves the node fenced here (retry). Not fenced → OK.
  Status Unfence(const std::string& node_id, bool force);

  std::optional<NodeFence> Get(const std::string& node_id) const;
  std::vector<NodeFence> List() const;

  // The message ControllerPublish refuses a fenced node with, or nullopt.
  std::optional<std::string> PublishRefusal(const std::string& node_id, const std::string& volume_id) const;

 private:
  // Merges the hosts' answers to a fence into the mirror.
  NodeFence Merge(const std::string& node_id, const std::vector<HostFences>& answers);

  const std::shared_ptr<VolumeBackend> backend_;
  const std::shared_ptr<FenceChannel> channel_;
  KeyedLock node_locks_;  // one fence/unfence per node at a time
  mutable Mutex mu_;
  std::map<std::string, NodeFence> fences_ GUARDED_BY(mu_);
};

}  // namespace blockcsi
