// The RBD backend's options for the throw-away cluster a CephSuiteTest holds
// (CephTestCluster::env(): hack/ceph-cluster.sh's KEY=VALUE lines), as the
// CSI user with its keyring on the test pool: what every RBD suite builds
// its in-process backend from. Header-only on purpose: only suites that link
// the RBD backend include it (blockcsi_test_support does not link it).
#pragma once

#include <map>
#include <string>

#include "backend/rbd/rbd_backend.h"

namespace blockcsi::testing {

inline RbdBackendOptions RbdBackendOptionsFor(const std::map<std::string, std::string>& env) {
  auto get = [&env](const char* key) {
    auto it = env.find(key);
    return it == env.end() ? std::string() : it->second;
  };
  RbdBackendOptions o;
  o.ceph_conf = get("CEPH_CONF");
  o.ceph_user = get("BLOCKCSI_CEPH_USER");
  o.keyring = get("BLOCKCSI_CEPH_KEYRING");
  o.pool = get("RBD_POOL");
  return o;
}

}  // namespace blockcsi::testing
