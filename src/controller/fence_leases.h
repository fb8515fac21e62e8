// FenceLeases: how a fence is told to its node and how the node's cleanup
// report comes back, over the Kubernetes API: one Lease per fenced node,
// "blockcsi-fence-<node>" in the fences' namespace. The controller creates
// it with the annotation fencing.blockcsi.io/fence-id; the node plugin reads
// it (404: not fenced) and, once it has cleaned up, sets
// fencing.blockcsi.io/cleaned-up to the same id; the controller deletes it
// when it unfences. Only the controller creates and deletes it. Every fence
// goes through it, whoever made it (the watcher, blockctl fence), so that
// every fenced node hears of its fence and every unfence can read the report.
// Thread-safe (each call its own requests).
#pragma once

#include <memory>
#include <string>

#include "controller/fencing.h"
#include "controller/k8s_node_directory.h"

namespace blockcsi {

namespace fence_annotations {
inline constexpr char kFenceId[] = "fencing.blockcsi.io/fence-id";
inline constexpr char kCleanedUp[] = "fencing.blockcsi.io/cleaned-up";
inline constexpr char kLazilyUnmounted[] = "fencing.blockcsi.io/lazily-unmounted";
// On the Node: the fence id whose taint the watcher added (it removes only those).
inline constexpr char kTainted[] = "fencing.blockcsi.io/tainted";
}  // namespace fence_annotations

// The Lease a fenced node's plugin reads and reports on.
std::string FenceLeaseName(const std::string& node_id);

class FenceLeases final : public FenceChannel {
 public:
  FenceLeases(std::shared_ptr<KubeApiClient> api, std::string lease_namespace);

  // Creates the Lease, or sets its fence id when it names another fence.
  Status Publish(const std::string& node_id, const std::string& fence_id) override;
  // The Lease's cleaned-up annotation, or "" (no Lease, or not reported).
  StatusOr<std::string> CleanupReport(const std::string& node_id) override;
  // Deletes the Lease; none → OK.
  Status Withdraw(const std::string& node_id) override;

 private:
  std::string Path(const std::string& node_id) const;

  const std::shared_ptr<KubeApiClient> api_;
  const std::string lease_namespace_;
};

// An API answer that is not the one expected, as a status: UNAVAILABLE (the
// caller retries), with a hint at the RBAC for HTTP 403.
Status KubeApiFailure(const std::string& what, const KubeApiResponse& response);

}  // namespace blockcsi
