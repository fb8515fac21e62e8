#include "controller/fence_leases.h"

#include <nlohmann/json.hpp>

namespace blockcsi {

using nlohmann::json;

std::string FenceLeaseName(const std::string& node_id) { return "blockcsi-fence-" + node_id; }

Status KubeApiFailure(const std::string& what, const KubeApiResponse& response) {
  std::string hint;
  if (response.http_status == 403) hint = " (the controller's RBAC lacks this permission: docs/deploy.md, Fencing)";
  std::string body = response.body.substr(0, 200);
  return Unavailable("API server: " + what + ": HTTP " + std::to_string(response.http_status) + hint + ": " + body);
}

FenceLeases::FenceLeases(std::shared_ptr<KubeApiClient> api, std::string lease_namespace)
    : api_(std::move(api)), lease_namespace_(std::move(lease_namespace)) {}

std::string FenceLeases::Path(const std::string& node_id) const {
  return "/apis/coordination.k8s.io/v1/namespaces/" + lease_namespace_ + "/leases/" + FenceLeaseName(node_id);
}

Status FenceLeases::Publish(const std::string& node_id, const std::string& fence_id) {
  const std::string base = "/apis/coordination.k8s.io/v1/namespaces/" + lease_namespace_ + "/leases";
  const std::string path = Path(node_id);
  BLOCKCSI_ASSIGN_OR_RETURN(KubeApiResponse got, api_->Get(path));
  if (got.http_status == 200) {
    json lease = json::parse(got.body, nullptr, false);
    const std::string id =
        lease.is_discarded()
            ? ""
            : lease.value("/metadata/annotations"_json_pointer, json::object()).value(fence_annotations::kFenceId, "");
    if (id == fence_id) return OkStatus();
    json patch = {{"metadata", {{"annotations", {{fence_annotations::kFenceId, fence_id}}}}}};
    BLOCKCSI_ASSIGN_OR_RETURN(KubeApiResponse patched,
                              api_->Send("PATCH", path, "application/merge-patch+json", patch.dump()));
    if (patched.http_status != 200) return KubeApiFailure("patch lease " + FenceLeaseName(node_id), patched);
    return OkStatus();
  }
  if (got.http_status != 404) return KubeApiFailure("get lease " + FenceLeaseName(node_id), got);
  json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata",
                 {{"name", FenceLeaseName(node_id)},
                  {"namespace", lease_namespace_},
                  {"labels", {{"app.kubernetes.io/managed-by", "blockcsi"}}},
                  {"annotations", {{fence_annotations::kFenceId, fence_id}}}}},
                {"spec", {{"holderIdentity", node_id}}}};
  BLOCKCSI_ASSIGN_OR_RETURN(KubeApiResponse created, api_->Send("POST", base, "application/json", lease.dump()));
  // 409: made meanwhile (another controller); the next Publish checks its id.
  if (created.http_status != 201 && created.http_status != 200 && created.http_status != 409) {
    return KubeApiFailure("create lease " + FenceLeaseName(node_id), created);
  }
  return OkStatus();
}

StatusOr<std::string> FenceLeases::CleanupReport(const std::string& node_id) {
  BLOCKCSI_ASSIGN_OR_RETURN(KubeApiResponse got, api_->Get(Path(node_id)));
  if (got.http_status == 404) return std::string();
  if (got.http_status != 200) return KubeApiFailure("get lease " + FenceLeaseName(node_id), got);
  json lease = json::parse(got.body, nullptr, false);
  if (lease.is_discarded()) return std::string();
  return lease.value("/metadata/annotations"_json_pointer, json::object()).value(fence_annotations::kCleanedUp, "");
}

Status FenceLeases::Withdraw(const std::string& node_id) {
  BLOCKCSI_ASSIGN_OR_RETURN(KubeApiResponse deleted, api_->Send("DELETE", Path(node_id), "", ""));
  if (deleted.http_status != 200 && deleted.http_status != 202 && deleted.http_status != 404) {
    return KubeApiFailure("delete lease " + FenceLeaseName(node_id), deleted);
  }
  return OkStatus();
}

}  // namespace blockcsi
