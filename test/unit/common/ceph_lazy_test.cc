// The Ceph client libraries are loaded on first use (issue #18): the plugin
// program does not link them, and a call through common/ceph_lazy.h reaches
// the real library once it is loaded.
#include "common/ceph_lazy.h"

#include <gtest/gtest.h>

#include "common/executor.h"
#include "support/linkage.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

TEST(CephLazyTest, PluginProgramDoesNotLinkTheCephLibraries) {
  if (!testing::HaveProgram("readelf")) GTEST_SKIP() << "readelf (binutils) is not installed";
  EXPECT_TRUE(testing::LinksNoneOf(testing::BinDir() + "/blockcsi", {"librbd", "librados"}));
}

TEST(CephLazyTest, CallsReachTheLibraryOnceLoaded) {
  Status loaded = LoadCephLibraries();
  if (!loaded.ok()) GTEST_SKIP() << "no Ceph client libraries on this machine: " << loaded.message();
  EXPECT_TRUE(LoadCephLibraries().ok());  // loads once, answers the same after
  // A cluster handle needs no running cluster: the library answers alone.
  rados_t cluster = nullptr;
  ASSERT_EQ(rados_create2(&cluster, "ceph", "client.admin", 0), 0);
  ASSERT_NE(cluster, nullptr);
  char value[64] = {};
  ASSERT_EQ(rados_conf_get(cluster, "auth_client_required", value, sizeof value), 0);
  rados_shutdown(cluster);
}

}  // namespace
}  // namespace blockcsi
