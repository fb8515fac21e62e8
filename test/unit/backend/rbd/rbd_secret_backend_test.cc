// RbdSecretBackend without a cluster: what it does before it may connect —
// refusing calls that bring no credentials, naming (never echoing) a
// half-given secret, and being ready before its first secret.
#include "backend/rbd/rbd_secret_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace blockcsi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kKey[] = "AQDtop5ecretKeyThatMustNeverShowUp000000==";

std::shared_ptr<VolumeBackend> Make() {
  RbdBackendOptions options;
  options.ceph_conf = "/nonexistent/ceph.conf";
  options.pool = "kube";
  auto backend = MakeRbdSecretBackend(options);
  EXPECT_TRUE(backend.ok()) << backend.status().ToString();
  return backend.ok() ? *backend : nullptr;
}

TEST(RbdSecretBackendTest, RefusesOptionsWithAnIdentityOrWithoutPool) {
  RbdBackendOptions with_user;
  with_user.pool = "kube";
  with_user.ceph_user = "blockcsi";
  EXPECT_EQ(MakeRbdSecretBackend(with_user).status().code(), StatusCode::kInvalidArgument);
  RbdBackendOptions no_pool;
  EXPECT_THAT(MakeRbdSecretBackend(no_pool).status().message(), HasSubstr("--rbd-pool"));
}

TEST(RbdSecretBackendTest, ReadyBeforeItsFirstSecret) {
  auto backend = Make();
  ASSERT_NE(backend, nullptr);
  EXPECT_TRUE(backend->Healthy().ok());
  EXPECT_EQ(backend->Name(), "rbd");
  EXPECT_EQ(backend->AllocationGranularity(), uint64_t{1} << 20);
}

TEST(RbdSecretBackendTest, ACallWithoutCredentialsIsFailedPrecondition) {
  auto backend = Make();
  ASSERT_NE(backend, nullptr);
  // Not NOT_FOUND: the controller would take that for "no such volume" and
  // report a delete that never happened as done.
  EXPECT_EQ(backend->DeleteVolume("rbd.kube.csi-vol-00000000000000000000000000000000").code(),
            StatusCode::kFailedPrecondition);
  // A request without secrets is served by the backend itself.
  EXPECT_EQ(backend->WithSecrets({}), nullptr);
  auto call = backend->WithSecrets({{{"csi.storage.k8s.io/unrelated", "x"}}});
  ASSERT_NE(call, nullptr);
  auto created = call->CreateVolume({"v", 1 << 20, {}, {}});
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(created.status().message(), HasSubstr("provisioner-secret-name"));
  auto checks = call->CheckVolumes({"a", "b"});
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[1].status().code(), StatusCode::kFailedPrecondition);
}

TEST(RbdSecretBackendTest, HalfASecretIsNamedNeverEchoed) {
  auto backend = Make();
  ASSERT_NE(backend, nullptr);
  auto call = backend->WithSecrets({{{"userKey", kKey}}});
  ASSERT_NE(call, nullptr);
  auto created = call->CreateVolume({"v", 1 << 20, {}, {}});
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(created.status().message(), HasSubstr("userID"));
  EXPECT_THAT(created.status().message(), Not(HasSubstr(kKey)));
}

TEST(RbdSecretBackendTest, AnUnreachableClusterIsAnErrorWithoutTheKey) {
  auto backend = Make();
  ASSERT_NE(backend, nullptr);
  auto call = backend->WithSecrets({{{"userID", "blockcsi"}, {"userKey", kKey}}});
  ASSERT_NE(call, nullptr);
  auto created = call->CreateVolume({"v", 1 << 20, {}, {}});
  ASSERT_FALSE(created.ok());  // the ceph.conf does not exist
  EXPECT_THAT(created.status().message(), Not(HasSubstr(kKey)));
  EXPECT_THAT(created.status().message(), HasSubstr("secret"));
}

}  // namespace
}  // namespace blockcsi
