#include "controller/k8s_node_directory.h"

#include <openssl/evp.h>

#include <yaml-cpp/yaml.h>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "common/host.h"
#include "common/lazy_http.h"
#include "common/strings.h"

namespace blockcsi {
namespace {

std::string Quoted(const std::string& s) { return "\"" + s + "\""; }

StatusOr<std::string> Base64Decode(const std::string& text, const std::string& what) {
  std::string in;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) in.push_back(c);
  }
  if (in.empty() || in.size() % 4 != 0) return InvalidArgument(what + " is not base64");
  std::string out(in.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  if (n < 0) return InvalidArgument(what + " is not base64");
  // EVP_DecodeBlock counts the padding as zero bytes.
  size_t padding = (in.back() == '=') + (in.size() > 1 && in[in.size() - 2] == '=');
  out.resize(static_cast<size_t>(n) - padding);
  return out;
}

// The scheme-less host and port of an https URL ("[::1]:6443" → "::1", 6443).
Status SplitServer(const std::string& server, std::string* host, int* port) {
  const std::string prefix = "https://";
  if (server.rfind(prefix, 0) != 0) {
    return InvalidArgument("API server " + Quoted(server) + " is not an https:// URL");
  }
  std::string rest = server.substr(prefix.size());
  rest = rest.substr(0, rest.find('/'));
  *port = 443;
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos) return InvalidArgument("API server " + Quoted(server) + ": bad address");
    *host = rest.substr(1, close - 1);
    rest = rest.substr(close + 1);
    if (!rest.empty() && rest[0] == ':') *port = std::atoi(rest.c_str() + 1);
  } else {
    size_t colon = rest.find(':');
    *host = rest.substr(0, colon);
    if (colon != std::string::npos) *port = std::atoi(rest.c_str() + colon + 1);
  }
  if (host->empty() || *port <= 0 || *port > 65535) {
    return InvalidArgument("API server " + Quoted(server) + ": bad host or port");
  }
  return OkStatus();
}

class HttpsKubeApiClient final : public KubeApiClient {
 public:
  HttpsKubeApiClient(KubeApiAccess access, std::shared_ptr<const Host> files)
      : access_(std::move(access)), files_(std::move(files)) {}

  StatusOr<KubeApiResponse> Get(const std::string& path) override { return Send("GET", path, "", ""); }

  StatusOr<KubeApiResponse> Send(const std::string& method, const std::string& path, const std::string& content_type,
                                 const std::string& body) override {
    std::string host;
    int port = 0;
    BLOCKCSI_RETURN_IF_ERROR(SplitServer(access_.server, &host, &port));
    std::string token = access_.token;
    if (!access_.token_file.empty()) {
      auto read = files_->ReadFile(access_.token_file);
      if (!read.ok()) return Unavailable("cannot read the API token file " + Quoted(access_.token_file));
      token = std::string(TrimWhitespace(*read));
    }
    auto answer = HttpsRequest(method, host, port, access_.ca_pem, token, path, content_type, body);
    if (!answer.ok()) {
      return Unavailable("API server " + access_.server + ": " + method + " " + path + ": " +
                         answer.status().message());
    }
    return KubeApiResponse{answer->status, answer->body};
  }

 private:
  KubeApiAccess access_;
  std::shared_ptr<const Host> files_;
};

}  // namespace

StatusOr<KubeApiAccess> KubeAccessFromKubeconfig(const std::string& path, const Host& files) {
  const std::string what = "kubeconfig " + Quoted(path);
  auto text = files.ReadFile(path);
  if (!text.ok()) return InvalidArgument(what + ": cannot be read: " + text.status().message());
  // The few keys a controller's kubeconfig has (YAML, or JSON, which YAML
  // reads too): each cluster's server and CA, each user's token. A key given
  // twice with other values means several clusters or users, which this
  // reader does not choose between.
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(what + ": not YAML: line " + std::to_string(e.mark.line + 1));
  }
  std::map<std::string, std::string> values;
  auto collect = [&](const YAML::Node& list, const char* entry, std::initializer_list<const char*> keys) -> Status {
    // A key that is absent gives an invalid node: test it before asking its type.
    if (!list || !list.IsSequence()) return OkStatus();
    for (const auto& item : list) {
      const YAML::Node fields = item.IsMap() ? item[entry] : YAML::Node();
      if (!fields || !fields.IsMap()) continue;
      for (const char* key : keys) {
        const YAML::Node value = fields[key];
        if (!value || !value.IsScalar()) continue;
        auto [at, inserted] = values.emplace(key, value.Scalar());
        if (!inserted && at->second != value.Scalar()) {
          return InvalidArgument(what + ": several values of " + key +
                                 "; give the controller a kubeconfig with one cluster and one user");
        }
      }
    }
    return OkStatus();
  };
  if (!root.IsMap()) return InvalidArgument(what + ": no cluster server");  // nor anything else
  const YAML::Node& config = root;
  BLOCKCSI_RETURN_IF_ERROR(
      collect(config["clusters"], "cluster", {"server", "certificate-authority-data", "certificate-authority"}));
  BLOCKCSI_RETURN_IF_ERROR(collect(config["users"], "user", {"token", "tokenFile"}));
  KubeApiAccess access;
  access.server = values["server"];
  if (access.server.empty()) return InvalidArgument(what + ": no cluster server");
  std::string host;
  int port = 0;
  if (Status st = SplitServer(access.server, &host, &port); !st.ok())
    return InvalidArgument(what + ": " + st.message());
  // Relative paths in a kubeconfig are relative to its own directory.
  const std::string dir = path.substr(0, path.rfind('/') + 1);  // "" or ending in '/'
  auto relative = [&](const std::string& p) { return p.starts_with('/') ? p : dir + p; };
  if (!values["certificate-authority-data"].empty()) {
    BLOCKCSI_ASSIGN_OR_RETURN(
        access.ca_pem, Base64Decode(values["certificate-authority-data"], what + ": certificate-authority-data"));
  } else if (!values["certificate-authority"].empty()) {
    auto ca = files.ReadFile(relative(values["certificate-authority"]));
    if (!ca.ok()) return InvalidArgument(what + ": certificate-authority cannot be read: " + ca.status().message());
    access.ca_pem = *ca;
  }
  access.token = values["token"];
  if (!values["tokenFile"].empty()) access.token_file = relative(values["tokenFile"]);
  if (access.token.empty() && access.token_file.empty()) {
    return InvalidArgument(what + ": no token or tokenFile for its user (client certificates are not supported)");
  }
  return access;
}

StatusOr<KubeApiAccess> KubeAccessInCluster(const std::string& sa_dir, const Host& files) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0') return NotFound("not in a pod: KUBERNETES_SERVICE_HOST is not set");
  if (!files.Exists(sa_dir + "/token")) return NotFound("no service account token in " + sa_dir);
  KubeApiAccess access;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";
  access.server = "https://" + h + ":" + std::string(port != nullptr && *port != '\0' ? port : "443");
  access.token_file = sa_dir + "/token";
  auto ca = files.ReadFile(sa_dir + "/ca.crt");
  if (!ca.ok()) return InvalidArgument("service account CA " + Quoted(sa_dir + "/ca.crt") + " cannot be read");
  access.ca_pem = *ca;
  return access;
}

std::unique_ptr<KubeApiClient> MakeKubeApiClient(KubeApiAccess access, std::shared_ptr<const Host> files) {
  return std::make_unique<HttpsKubeApiClient>(std::move(access), std::move(files));
}

KubeNodeDirectory::KubeNodeDirectory(std::unique_ptr<KubeApiClient> client, std::string driver_name)
    : client_(std::move(client)), driver_name_(std::move(driver_name)) {}

StatusOr<bool> KubeNodeDirectory::Known(const std::string& node_id) {
  // A node name is a DNS subdomain; anything else is no node (and never
  // reaches the URL).
  if (node_id.empty() || node_id.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string::npos) {
    return false;
  }
  const std::string path = "/apis/storage.k8s.io/v1/csinodes/" + node_id;
  BLOCKCSI_ASSIGN_OR_RETURN(KubeApiResponse response, client_->Get(path));
  if (response.http_status == 404) return false;
  if (response.http_status != 200) {
    std::string hint = response.http_status == 403 ? " (the controller's RBAC needs get on csinodes)" : "";
    return Unavailable("API server: GET " + path + ": HTTP " + std::to_string(response.http_status) + hint);
  }
  auto csinode = nlohmann::json::parse(response.body, nullptr, false);
  if (csinode.is_discarded()) return Unavailable("API server: GET " + path + ": the answer is not JSON");
  for (const auto& driver : csinode.value("/spec/drivers"_json_pointer, nlohmann::json::array())) {
    if (driver.value("name", "") == driver_name_ && driver.value("nodeID", "") == node_id) return true;
  }
  return false;
}

}  // namespace blockcsi
