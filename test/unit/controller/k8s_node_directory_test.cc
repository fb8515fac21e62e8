// KubeNodeDirectory (issue #20 item 4): which CSINode answers make a node
// known, unknown or "try again", and what a kubeconfig must hold. The HTTP
// GET is a fake; the real one is exercised by the k8s label.
#include "controller/k8s_node_directory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "support/test_util.h"

namespace blockcsi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class FakeKubeApi final : public KubeApiClient {
 public:
  StatusOr<KubeApiResponse> Get(const std::string& path) override {
    paths.push_back(path);
    if (!reachable) return Unavailable("connection refused");
    return response;
  }
  bool reachable = true;
  KubeApiResponse response;
  std::vector<std::string> paths;
};

constexpr char kCsiNode[] = R"({"kind":"CSINode","metadata":{"name":"n1"},
  "spec":{"drivers":[{"name":"other.io","nodeID":"n1"},{"name":"blockcsi.io","nodeID":"n1"}]}})";

struct Directory {
  FakeKubeApi* api;
  std::unique_ptr<KubeNodeDirectory> directory;
};
Directory Make(int status, std::string body) {
  auto api = std::make_unique<FakeKubeApi>();
  api->response = {status, std::move(body)};
  FakeKubeApi* raw = api.get();
  return {raw, std::make_unique<KubeNodeDirectory>(std::move(api), "blockcsi.io")};
}

TEST(KubeNodeDirectoryTest, KnownWhenTheCsiNodeListsThisDriverWithThisId) {
  auto d = Make(200, kCsiNode);
  auto known = d.directory->Known("n1");
  ASSERT_TRUE(known.ok()) << known.status().message();
  EXPECT_TRUE(*known);
  EXPECT_EQ(d.api->paths, std::vector<std::string>{"/apis/storage.k8s.io/v1/csinodes/n1"});
}

TEST(KubeNodeDirectoryTest, UnknownWhenNoCsiNodeOrNotOurDriver) {
  auto missing = Make(404, R"({"kind":"Status","reason":"NotFound"})");
  auto known = missing.directory->Known("ghost");
  ASSERT_TRUE(known.ok());
  EXPECT_FALSE(*known) << "404: no such node";

  auto other_driver = Make(200, R"({"spec":{"drivers":[{"name":"other.io","nodeID":"n2"}]}})");
  known = other_driver.directory->Known("n2");
  ASSERT_TRUE(known.ok());
  EXPECT_FALSE(*known) << "a node whose plugin never registered with this driver";

  auto no_drivers = Make(200, R"({"spec":{"drivers":null}})");
  known = no_drivers.directory->Known("n3");
  ASSERT_TRUE(known.ok());
  EXPECT_FALSE(*known);
}

TEST(KubeNodeDirectoryTest, OtherFailuresAreUnavailableSoTheAttacherRetries) {
  auto forbidden = Make(403, "{}");
  auto known = forbidden.directory->Known("n1");
  ASSERT_FALSE(known.ok());
  EXPECT_EQ(known.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(known.status().message(), HasSubstr("csinodes"));

  auto server_error = Make(500, "oops");
  EXPECT_EQ(server_error.directory->Known("n1").status().code(), StatusCode::kUnavailable);
  auto garbled = Make(200, "not json");
  EXPECT_EQ(garbled.directory->Known("n1").status().code(), StatusCode::kUnavailable);
  auto down = Make(200, kCsiNode);
  down.api->reachable = false;
  EXPECT_EQ(down.directory->Known("n1").status().code(), StatusCode::kUnavailable);
}

TEST(KubeNodeDirectoryTest, AnIdThatIsNoNodeNameNeverReachesTheUrl) {
  auto d = Make(200, kCsiNode);
  for (const char* id : {"", "../nodes/n1", "n1?watch=1", "N1", "n1/x"}) {
    auto known = d.directory->Known(id);
    ASSERT_TRUE(known.ok()) << id;
    EXPECT_FALSE(*known) << id;
  }
  EXPECT_TRUE(d.api->paths.empty());
}

class KubeconfigTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_.Join(name);
    std::ofstream(path) << text;
    return path;
  }
  testing::TempDir dir_;
};

TEST_F(KubeconfigTest, BlockYamlWithCaFileAndToken) {
  Write("ca.crt", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
  std::string path = Write("kc", R"(apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority: ca.crt
users:
- name: u
  user:
    token: s3cret-token
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
)");
  auto access = KubeAccessFromKubeconfig(path, *MachineHost());
  ASSERT_TRUE(access.ok()) << access.status().message();
  EXPECT_EQ(access->server, "https://10.0.0.1:6443");
  EXPECT_THAT(access->ca_pem, HasSubstr("BEGIN CERTIFICATE")) << "a relative CA path is the kubeconfig's dir's";
  EXPECT_EQ(access->token, "s3cret-token");
}

TEST_F(KubeconfigTest, FlowYamlJsonAndBase64Ca) {
  // "hello" in base64; the CA bundle's bytes are passed on as they are.
  std::string flow = Write("flow", R"(clusters:
- cluster: {server: "https://[fd00::1]:443", certificate-authority-data: aGVsbG8=}
users:
- user: {tokenFile: /var/run/token}
)");
  auto access = KubeAccessFromKubeconfig(flow, *MachineHost());
  ASSERT_TRUE(access.ok()) << access.status().message();
  EXPECT_EQ(access->server, "https://[fd00::1]:443");
  EXPECT_EQ(access->ca_pem, "hello");
  EXPECT_EQ(access->token_file, "/var/run/token");

  std::string json = Write("json", R"({"clusters":[{"cluster":{"server":"https://h:1"}}],
    "users":[{"user":{"token":"t"}}]})");
  access = KubeAccessFromKubeconfig(json, *MachineHost());
  ASSERT_TRUE(access.ok()) << access.status().message();
  EXPECT_EQ(access->server, "https://h:1");
  EXPECT_EQ(access->token, "t");
}

TEST_F(KubeconfigTest, RefusedKubeconfigsNameTheFileAndNeverTheToken) {
  struct Case {
    const char* text;
    const char* why;
  } cases[] = {
      {"users:\n- user: {token: s3cret-token}\n", "no cluster server"},
      {"clusters:\n- cluster: {server: http://h:80}\nusers:\n- user: {token: s3cret-token}\n", "https"},
      {"clusters:\n- cluster: {server: https://h:1}\n", "no token"},
      {"clusters:\n- cluster: {server: https://a:1}\n- cluster: {server: https://b:1}\n"
       "users:\n- user: {token: s3cret-token}\n",
       "several values of server"},
  };
  for (const auto& c : cases) {
    std::string path = Write("bad", c.text);
    auto access = KubeAccessFromKubeconfig(path, *MachineHost());
    ASSERT_FALSE(access.ok()) << c.text;
    EXPECT_EQ(access.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(access.status().message(), HasSubstr(c.why));
    EXPECT_THAT(access.status().message(), HasSubstr(path));
    EXPECT_THAT(access.status().message(), Not(HasSubstr("s3cret")));
  }
  EXPECT_EQ(KubeAccessFromKubeconfig(dir_.Join("absent"), *MachineHost()).status().code(),
            StatusCode::kInvalidArgument);
}

// The service account's files are read through the host seam: a rooted
// host finds them under its root, at the paths a pod has them.
TEST_F(KubeconfigTest, InClusterAccessReadsTheServiceAccountThroughTheHost) {
  const char* sa = "/var/run/secrets/kubernetes.io/serviceaccount";
  auto host = HostRootedAt(dir_.path());
  ASSERT_TRUE(host->MakeDirectory(sa, 0755).ok());
  ::setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
  EXPECT_EQ(KubeAccessInCluster(sa, *host).status().code(), StatusCode::kNotFound) << "no token yet";
  ASSERT_TRUE(host->OverwriteFile(std::string(sa) + "/token", "s3cret-token\n").ok());
  ASSERT_TRUE(host->OverwriteFile(std::string(sa) + "/ca.crt", "-----BEGIN CERTIFICATE-----\n").ok());
  auto access = KubeAccessInCluster(sa, *host);
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(access.ok()) << access.status().ToString();
  EXPECT_EQ(access->server, "https://[fd00::1]:6443");
  EXPECT_EQ(access->token_file, std::string(sa) + "/token") << "the token is read at each request, not kept";
  EXPECT_THAT(access->ca_pem, HasSubstr("BEGIN CERTIFICATE"));

  // A kubeconfig under the root, its CA relative to its own directory.
  ASSERT_TRUE(host->MakeDirectory("/etc", 0755).ok());
  ASSERT_TRUE(host->OverwriteFile("/etc/kc",
                                  "clusters:\n- cluster: {server: https://h:1, certificate-authority: "
                                  "ca.pem}\nusers:\n- user: {tokenFile: t}\n")
                  .ok());
  ASSERT_TRUE(host->OverwriteFile("/etc/ca.pem", "CA").ok());
  auto config = KubeAccessFromKubeconfig("/etc/kc", *host);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->ca_pem, "CA");
  EXPECT_EQ(config->token_file, "/etc/t");
}

}  // namespace
}  // namespace blockcsi
