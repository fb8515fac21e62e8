// The --backend-config parser: an INI file (read by inih) of named backends.
// Pure text in, BackendConfig or an error naming the file, line and key out.
#include "backend/backend_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace blockcsi {
namespace {

using ::testing::HasSubstr;

constexpr char kTwoBackends[] = R"(# two backends
[backend fast]
kind = local
pool = /var/lib/blockcsi/pool
portal = 10.0.0.5:3260
portal = 10.0.0.6:3260
tgt-control-port = 7777
reconcile-interval = 5s
default = true

; an rbd one, credentials from the CSI secrets
[backend ceph]
kind = rbd
ceph-conf = /etc/ceph/ceph.conf
rbd-pool = kube

[backend far]
kind = remote
target-agent = storage-1:9811
insecure = true
)";

TEST(BackendConfigTest, ParsesEveryKindInFileOrder) {
  auto config = ParseBackendConfig(kTwoBackends, "b.conf");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->backends.size(), 3u);
  EXPECT_EQ(config->default_name, "fast");
  const auto& fast = config->backends[0];
  EXPECT_EQ(fast.name, "fast");
  EXPECT_EQ(fast.options.kind, "local");
  EXPECT_EQ(fast.options.pool_dir, "/var/lib/blockcsi/pool");
  EXPECT_EQ(fast.options.portals, (std::vector<std::string>{"10.0.0.5:3260", "10.0.0.6:3260"}));
  EXPECT_EQ(fast.options.tgt_control_port, 7777);
  EXPECT_EQ(fast.options.reconcile_interval, std::chrono::seconds(5));
  const auto& ceph = config->backends[1];
  EXPECT_EQ(ceph.options.kind, "rbd");
  EXPECT_EQ(ceph.options.ceph_conf, "/etc/ceph/ceph.conf");
  EXPECT_EQ(ceph.options.rbd_pool, "kube");
  EXPECT_TRUE(ceph.options.ceph_user.empty());
  const auto& far = config->backends[2];
  EXPECT_EQ(far.options.kind, "remote");
  EXPECT_EQ(far.options.target_agent, "storage-1:9811");
  EXPECT_TRUE(far.options.insecure);
}

TEST(BackendConfigTest, ASingleBackendIsTheDefaultWithoutSaying) {
  auto config = ParseBackendConfig("[backend only]\nkind = rbd\nrbd-pool = p\nceph-user = u\n", "x");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->default_name, "only");
  EXPECT_EQ(config->backends[0].options.ceph_user, "u");
}

// Issue #21: the local backend's tgtd control and thin-provisioning keys.
TEST(BackendConfigTest, LocalBackendTakesTgtControlAndOvercommitKeys) {
  auto config = ParseBackendConfig(
      "[backend l]\nkind = local\npool = /p\ntgtadm = /opt/tgt/sbin/tgtadm\ntgt-control = tgtadm\n"
      "overcommit-ratio = 2.5\n",
      "x");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->backends[0].options.tgtadm, "/opt/tgt/sbin/tgtadm");
  EXPECT_EQ(config->backends[0].options.tgt_control, "tgtadm");
  EXPECT_EQ(config->backends[0].options.overcommit_ratio, 2.5);
  auto bad = ParseBackendConfig("[backend l]\nkind = local\npool = /p\novercommit-ratio = 0\n", "x");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

struct BadCase {
  const char* text;
  const char* expected;  // a part of the message
};

class BackendConfigErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BackendConfigErrorTest, IsInvalidArgumentNamingFileLineAndKey) {
  auto config = ParseBackendConfig(GetParam().text, "b.conf");
  ASSERT_FALSE(config.ok()) << GetParam().text;
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("b.conf"));
  EXPECT_THAT(config.status().message(), HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BackendConfigErrorTest,
    ::testing::Values(BadCase{"", "no [backend NAME] section"},
                      BadCase{"kind = local\n", "b.conf:1: key \"kind\" before the first"},
                      BadCase{"[backend a]\nkind = nfs\n", "b.conf:2: kind must be local, remote or rbd"},
                      BadCase{"[backend a]\npool = /p\n", "backend \"a\" has no \"kind\""},
                      BadCase{"[backend a]\nkind = rbd\npool = /p\n",
                              "b.conf:3: key \"pool\" is not an option of kind rbd"},
                      BadCase{"[backend a]\nkind = local\nbogus = 1\n", "key \"bogus\""},
                      BadCase{"[backend A_b]\nkind = local\n", "backend name \"A_b\""},
                      BadCase{"[backend a~b]\nkind = local\n", "backend name \"a~b\""},
                      BadCase{"[backend a]\nkind = local\n[backend a]\nkind = rbd\n", "defined twice"},
                      BadCase{"[pool a]\nkind = local\n", "want a section \"[backend NAME]\""},
                      BadCase{"[backend a\nkind = local\n", "without \"]\""},
                      BadCase{"[backend a]\nkind = local\njust words\n", "b.conf:3: want \"key = value\""},
                      BadCase{"[backend a]\nkind = local\ntgt-control-port = 70000\n", "b.conf:3: tgt-control-port"},
                      BadCase{"[backend a]\nkind = local\nreconcile-interval = soon\n", "reconcile-interval"},
                      BadCase{"[backend a]\nkind = remote\ninsecure = yes\n", "insecure"},
                      BadCase{"[backend a]\nkind = local\npool = /a\npool = /b\n", "key \"pool\" given twice"},
                      BadCase{"[backend a]\nkind = local\n[backend b]\nkind = local\n", "exactly one must"},
                      BadCase{"[backend a]\nkind = local\ndefault = true\n[backend b]\nkind = local\ndefault = true\n",
                              "a second default"},
                      BadCase{"[backend a]\nkind = local\ndefault = maybe\n", "default"},
                      BadCase{"[backend ceph-cluster-one]\nkind = rbd\nrbd-pool = a-rather-long-pool-name-xy\n",
                              "ids would not fit"}));

// inih's own rules, which the documented format now states (docs/deploy.md).
TEST(BackendConfigTest, CommentsAndLongLinesFollowInih) {
  auto config = ParseBackendConfig("[backend a]\nkind = local\npool = /p#1 ; the pool\n", "b.conf");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->backends[0].options.pool_dir, "/p#1");
  auto too_long = ParseBackendConfig("[backend a]\nkind = local\npool = /" + std::string(250, 'x') + "\n", "b.conf");
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.status().message(), HasSubstr("b.conf:3: line longer than 199 characters"));
}

TEST(BackendConfigTest, BackendNames) {
  EXPECT_TRUE(IsValidBackendName("a"));
  EXPECT_TRUE(IsValidBackendName("ceph-1"));
  EXPECT_FALSE(IsValidBackendName(""));
  EXPECT_FALSE(IsValidBackendName("-a"));
  EXPECT_FALSE(IsValidBackendName("a-"));
  EXPECT_FALSE(IsValidBackendName("Upper"));
  EXPECT_FALSE(IsValidBackendName(std::string(33, 'a')));
}

TEST(BackendConfigTest, LoadNamesAMissingFileAsTheFlag) {
  auto config = LoadBackendConfig("/nonexistent/backends.conf");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("--backend-config /nonexistent/backends.conf"));
}

TEST(BackendConfigTest, RbdWithAKeyringButNoUserIsRefusedNamingTheFlags) {
  BackendOptions options;
  options.kind = "rbd";
  options.rbd_pool = "p";
  options.ceph_keyring = "/k";
  auto backend = MakeControllerBackend(options, MachineHost());
  ASSERT_FALSE(backend.ok());
  EXPECT_THAT(backend.status().message(), HasSubstr("--ceph-keyring needs --ceph-user"));
}

TEST(BackendConfigTest, ZoneOfAnyKindPutsTheBackendInATopologyZone) {
  auto config = ParseBackendConfig(
      "[backend a]\nkind = remote\ntarget-agent = 10.0.0.1:7443\nzone = eu-1a\ndefault = true\n"
      "[backend b]\nkind = local\npool = /p\nportal = 10.0.0.2:3260\nzone = eu-1b\n"
      "[backend c]\nkind = rbd\nrbd-pool = p\nceph-user = u\n",
      "z.conf");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->backends[0].zone, "eu-1a");
  EXPECT_EQ(config->backends[1].zone, "eu-1b");
  EXPECT_EQ(config->backends[2].zone, "");
  for (const char* bad : {"[backend a]\nkind = local\nzone = eu 1a\n", "[backend a]\nkind = local\nzone = -a\n",
                          "[backend a]\nkind = local\nzone = a\nzone = b\n"}) {
    auto refused = ParseBackendConfig(bad, "z.conf");
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.status().message(), HasSubstr("z.conf:"));
    EXPECT_THAT(refused.status().message(), HasSubstr("zone"));
  }
}

}  // namespace
}  // namespace blockcsi
