// The Ceph cluster an RBD test binary runs against: the one ctest's
// `rbd_cluster` fixture started and shares (BLOCKCSI_CEPH_DIR), or — when
// the binary runs on its own — one of its own from hack/ceph-cluster.sh,
// stopped when released and, should the binary die first, by a reaper
// process waiting on a pipe only this process holds. One per test suite
// (SetUpTestSuite / TearDownTestSuite). Not thread-safe.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <map>
#include <memory>
#include <string>

#include "support/leak_check.h"
#include "support/test_util.h"

namespace blockcsi::testing {

class CephTestCluster {
 public:
  // Why RBD tests cannot run on this machine (not root, Ceph packages
  // missing), or "" when they can.
  static std::string SkipReason();
  // nullptr with *error set when no cluster can be had.
  static std::unique_ptr<CephTestCluster> Acquire(std::string* error);
  ~CephTestCluster();  // stops a cluster of our own
  CephTestCluster(const CephTestCluster&) = delete;
  CephTestCluster& operator=(const CephTestCluster&) = delete;

  // hack/ceph-cluster.sh's KEY=VALUE lines: CEPH_CONF, CEPH_KEYRING (admin),
  // BLOCKCSI_CEPH_USER, BLOCKCSI_CEPH_KEYRING, RBD_POOL, CEPH_MON_HOST.
  const std::map<std::string, std::string>& env() const { return env_; }
  bool owned() const { return !own_dir_.empty(); }

 private:
  CephTestCluster() = default;
  void StartReaper();

  TempDir tmp_;
  std::string own_dir_;  // set when this process started the cluster
  std::map<std::string, std::string> env_;
  pid_t reaper_ = -1;
  int reaper_pipe_ = -1;
};

// Base of every test suite on Ceph: one cluster per suite, acquired in
// SetUpTestSuite; each test skips with the reason when the machine cannot
// run Ceph (or lacks what the suite needs besides) and fails when the
// cluster could not be had. A derived SetUp calls CephSuiteTest::SetUp()
// first and returns when IsSkipped() or HasFatalFailure().
class CephSuiteTest : public ::testing::Test {
 public:
  enum class Needs {
    kCeph,
    kCephAndBridge,  // also /dev/fuse and loop devices: the userspace connector's bridge
  };

 protected:
  // A derived suite whose tests run bridges defines its own SetUpTestSuite
  // calling AcquireCluster(Needs::kCephAndBridge).
  static void AcquireCluster(Needs needs);
  static void SetUpTestSuite() { AcquireCluster(Needs::kCeph); }
  static void TearDownTestSuite() { cluster_.reset(); }
  void SetUp() override;
  // The whole RBD pool (its images and snapshots) in the leak checker's
  // terms, read as the CSI user. Reads what every test on the cluster
  // changes: a suite that asserts on it runs its tests alone (RUN_SERIAL).
  static LeakScope PoolLeakScope();

  static inline std::string skip_;         // why this machine cannot run the suite
  static inline std::string setup_error_;  // why the cluster could not be had
  static inline std::unique_ptr<CephTestCluster> cluster_;
  // hack/ceph-cluster.sh's KEY=VALUE lines (CephTestCluster::env()).
  static inline std::map<std::string, std::string> env_;
};

// The whole RBD pool of the cluster `env` describes (CephTestCluster::env()),
// read as the CSI user, in the leak checker's terms.
LeakScope RbdPoolLeakScope(const std::map<std::string, std::string>& env);

// The KEY=VALUE lines of hack/ceph-cluster.sh's output (progress ignored).
std::map<std::string, std::string> ParseCephClusterEnv(const std::string& text);
// The key of a keyring file ("key = AQ..."): the secret tests look for.
std::string KeyFromKeyring(const std::string& keyring_path);

}  // namespace blockcsi::testing
