// The controller's answer to "is this node in the cluster" from the
// Kubernetes API: a node id is known when the CSINode of that
// name lists this driver with that node id (kubelet writes it when the node
// plugin registers; blockcsi's node id is the Kubernetes node name). One
// HTTPS GET of /apis/storage.k8s.io/v1/csinodes/<node> per question, with
// the token and CA of a kubeconfig or of the pod's service account; the
// token is never logged nor put in an error. 404 → unknown node (the
// controller answers NOT_FOUND); any other failure → UNAVAILABLE, so that
// the external-attacher retries. Thread-safe (each call its own request).
#pragma once

#include <memory>
#include <string>

#include "common/host.h"
#include "common/status.h"

namespace blockcsi {

// Where the API server is and how to prove who we are. `token_file`, when
// set, is read at each request (a projected service-account token rotates).
struct KubeApiAccess {
  std::string server;  // https://host:port
  std::string ca_pem;  // the CA bundle that signs the server's certificate
  std::string token;
  std::string token_file;
};

// From a kubeconfig with one cluster and one user (what a controller's own
// kubeconfig is): server, certificate-authority(-data), token or tokenFile.
// Block or flow YAML, or JSON. INVALID_ARGUMENT naming the file when it
// cannot be read, has none of these, or names several clusters or users.
// Both readers read through `files` (tests pass a rooted host).
StatusOr<KubeApiAccess> KubeAccessFromKubeconfig(const std::string& path, const Host& files);
// From the pod's service account: KUBERNETES_SERVICE_HOST/_PORT and the
// files under `sa_dir` (/var/run/secrets/kubernetes.io/serviceaccount).
// NOT_FOUND when not in a pod (no env or no token file).
StatusOr<KubeApiAccess> KubeAccessInCluster(const std::string& sa_dir, const Host& files);

// The network effect: a GET of an API path. A fake in unit tests.
struct KubeApiResponse {
  int http_status = 0;
  std::string body;
};
class KubeApiClient {
 public:
  virtual ~KubeApiClient() = default;
  // UNAVAILABLE when no HTTP answer came (connect, TLS, timeout).
  virtual StatusOr<KubeApiResponse> Get(const std::string& path) = 0;
  // Any other method (POST, PUT, PATCH, DELETE) with a JSON body of
  // `content_type` (e.g. application/merge-patch+json). The default, for
  // clients that only read: UNIMPLEMENTED.
  virtual StatusOr<KubeApiResponse> Send(const std::string& method, const std::string& path,
                                         const std::string& content_type, const std::string& body) {
    (void)path, (void)content_type, (void)body;
    return Status(StatusCode::kUnimplemented, "this API client cannot " + method);
  }
};
// `files` reads the token file at each request.
std::unique_ptr<KubeApiClient> MakeKubeApiClient(KubeApiAccess access, std::shared_ptr<const Host> files);

class KubeNodeDirectory {
 public:
  KubeNodeDirectory(std::unique_ptr<KubeApiClient> client, std::string driver_name);
  // true: the CSINode lists this driver with this node id; false: no such
  // CSINode, or it does not list us with this id; UNAVAILABLE otherwise.
  StatusOr<bool> Known(const std::string& node_id);

 private:
  std::unique_ptr<KubeApiClient> client_;
  std::string driver_name_;
};

}  // namespace blockcsi
