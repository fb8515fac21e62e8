// Whole rollback of an RBD CreateVolume (issue #15 item 3): the real plugin
// (`blockcsi --mode controller --backend rbd`) on the throw-away Ceph is made
// to fail with a final code at each step after the image exists —
// BLOCKCSI_FAULT_FAIL=rbd.create_volume.<step>, the one fault seam — for an
// empty volume, a restore from a snapshot and a clone of a volume. Right
// after the failed call, before any cleanup, the shared leak checker reads
// the pool: no new image, no temporary snapshot, no metadata changed on the
// source. Needs root and the ceph packages; skipped with the reason otherwise.
// Reads the whole pool, so each case runs alone (RUN_SERIAL).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "backend/rbd/rbd_backend.h"
#include "common/executor.h"
#include "csi.grpc.pb.h"
#include "support/ceph_test_cluster.h"
#include "support/leak_check.h"
#include "support/plugin_under_test.h"
#include "support/rbd_backend_env.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using ::blockcsi::testing::PluginUnderTest;
using ::blockcsi::testing::TempDir;

constexpr int64_t kMiB = 1LL << 20;

enum class Source { kNone, kSnapshot, kVolume };

struct Case {
  Source source;
  std::string point;  // the fault point failed: rbd.create_volume.<step>
};

// gtest prints a parameter with this (not as raw bytes) in test names.
void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.source == Source::kNone       ? "empty"
          : c.source == Source::kSnapshot ? "from snapshot"
                                          : "from volume")
      << ", " << c.point;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.source == Source::kNone       ? "Empty_"
                     : info.param.source == Source::kSnapshot ? "FromSnapshot_"
                                                              : "FromVolume_";
  const std::string prefix = "rbd.create_volume.";
  for (char c : info.param.point.substr(prefix.size())) name += (c == '-' ? '_' : c);
  return name;
}

class RbdCreateRollbackTest : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    skip_ = testing::CephTestCluster::SkipReason();
    if (!skip_.empty()) return;
    cluster_ = testing::CephTestCluster::Acquire(&setup_error_);
    if (cluster_) env_ = cluster_->env();
  }
  static void TearDownTestSuite() { cluster_.reset(); }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    auto backend = MakeRbdBackend(testing::RbdBackendOptionsFor(env_));
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = *backend;
    // The source of a clone is made in-process (no fault armed here), with
    // parameters so that the clone inherits metadata it must drop.
    if (GetParam().source != Source::kNone) {
      CreateVolumeSpec spec;
      spec.name = Unique("source");
      spec.size_bytes = 64 * kMiB;
      spec.parameters = {{"fsType", "ext4"}};
      auto source = backend_->CreateVolume(spec);
      ASSERT_TRUE(source.ok()) << source.status().ToString();
      source_id_ = source->id;
      if (GetParam().source == Source::kSnapshot) {
        auto snap = backend_->CreateSnapshot(source_id_, Unique("snap"));
        ASSERT_TRUE(snap.ok()) << snap.status().ToString();
        snapshot_id_ = snap->id;
      }
    }
    plugin_ = std::make_unique<PluginUnderTest>(dir_.Join("controller"), nullptr);
    testing::PluginOptions p;
    p.mode = "controller";
    p.backend = "rbd";
    p.extra_args = {"--ceph-conf",    env_.at("CEPH_CONF"),
                    "--ceph-user",    env_.at("BLOCKCSI_CEPH_USER"),
                    "--ceph-keyring", env_.at("BLOCKCSI_CEPH_KEYRING"),
                    "--rbd-pool",     env_.at("RBD_POOL")};
    p.env = {{"BLOCKCSI_FAULT_FAIL", GetParam().point}};
    std::string error;
    ASSERT_TRUE(plugin_->Start(p, &error)) << error;
  }

  void TearDown() override {
    if (!skip_.empty() || !setup_error_.empty()) return;
    if (plugin_) plugin_->Stop();
    // What a failed rollback left (the test has failed by then), then the source.
    if (have_baseline_) {
      for (const auto& item : testing::NewItems(baseline_, testing::TakeLeakSnapshot(Scope()))) {
        const std::string image_prefix = "rbd image ";
        const std::string snap_prefix = "rbd snapshot ";
        if (item.starts_with(snap_prefix)) {
          std::string snap = item.substr(snap_prefix.size());
          (void)Rbd({"snap", "unprotect", snap});
          (void)Rbd({"snap", "rm", "--no-progress", snap});
        }
        if (item.starts_with(image_prefix)) (void)Rbd({"rm", "--no-progress", item.substr(image_prefix.size())});
      }
    }
    if (!snapshot_id_.empty()) {
      EXPECT_TRUE(backend_->DeleteSnapshot(snapshot_id_).ok());
    }
    if (!source_id_.empty()) {
      Status st = backend_->DeleteVolume(source_id_);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    testing::CleanUpUnder(dir_.path());
  }

  // The whole pool, and the metadata of the clone's source image.
  testing::LeakScope Scope() const {
    testing::LeakScope scope = testing::RbdPoolLeakScope(env_);
    if (!source_id_.empty()) {
      scope.rbd_metadata_images.push_back(env_.at("RBD_POOL") + "/" + source_id_.substr(source_id_.rfind('.') + 1));
    }
    return scope;
  }

  int Rbd(std::vector<std::string> args) const {
    Command cmd("rbd");
    for (const auto& a : Scope().rbd_command) {
      if (a != "rbd") cmd.Arg(a);
    }
    for (const auto& a : args) cmd.Arg(a);
    cmd.Timeout(std::chrono::seconds(60));
    auto r = MakeProcessExecutor()->Run(cmd);
    return r.ok() ? r->exit_code : -1;
  }

  std::string Unique(const std::string& what) const {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name) {
      if (c == '/') c = '-';
    }
    return name + "-" + what + "-" + std::to_string(::getpid());
  }

  static inline std::string skip_;
  static inline std::string setup_error_;
  static inline std::unique_ptr<testing::CephTestCluster> cluster_;
  static inline std::map<std::string, std::string> env_;

  TempDir dir_;
  std::shared_ptr<VolumeBackend> backend_;
  std::unique_ptr<PluginUnderTest> plugin_;
  std::string source_id_;
  std::string snapshot_id_;
  testing::LeakSnapshot baseline_;
  bool have_baseline_ = false;
};

TEST_P(RbdCreateRollbackTest, FinalFailureAfterTheImageExistsLeavesThePoolAsBefore) {
  baseline_ = testing::TakeLeakSnapshot(Scope());
  have_baseline_ = true;

  csi::v1::CreateVolumeRequest req;
  req.set_name(Unique("new"));
  // Bigger than the source, so that a clone is resized.
  req.mutable_capacity_range()->set_required_bytes(128 * kMiB);
  *req.add_volume_capabilities() = testing::MountCapability("ext4");
  (*req.mutable_parameters())["fsType"] = "ext4";
  if (GetParam().source == Source::kSnapshot) {
    req.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(snapshot_id_);
  } else if (GetParam().source == Source::kVolume) {
    req.mutable_volume_content_source()->mutable_volume()->set_volume_id(source_id_);
  }
  csi::v1::CreateVolumeResponse resp;
  grpc::Status st = plugin_->controller().CreateVolume(testing::Deadline().get(), req, &resp);

  // The step was reached and failed the call with a final code.
  const std::string& armed = GetParam().point;
  ASSERT_EQ(st.error_code(), grpc::StatusCode::INTERNAL) << st.error_message() << "\n" << plugin_->LogTail();
  EXPECT_NE(st.error_message().find("injected failure at " + armed), std::string::npos) << st.error_message();
  // Right after the call, before anything is cleaned.
  auto left = testing::NewItems(baseline_, testing::TakeLeakSnapshot(Scope()));
  EXPECT_TRUE(left.empty()) << "left behind after the failed CreateVolume:" << testing::DescribeItems(left) << "\n"
                            << plugin_->LogTail();
  // Before the clone exists there is no image to take back, only the snapshot.
  if (armed != "rbd.create_volume.after-temp-snapshot") {
    EXPECT_NE(plugin_->LogTail(20000).find("rbd image taken back"), std::string::npos) << plugin_->LogTail();
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, RbdCreateRollbackTest,
                         ::testing::Values(Case{Source::kNone, "rbd.create_volume.after-create"},
                                           Case{Source::kNone, "rbd.create_volume.after-metadata"},
                                           Case{Source::kNone, "rbd.create_volume.after-name"},
                                           Case{Source::kSnapshot, "rbd.create_volume.after-create"},
                                           Case{Source::kSnapshot,
                                                "rbd.create_volume.after-inherited-metadata-removed"},
                                           Case{Source::kSnapshot, "rbd.create_volume.after-resize"},
                                           Case{Source::kSnapshot, "rbd.create_volume.after-metadata"},
                                           Case{Source::kSnapshot, "rbd.create_volume.after-name"},
                                           Case{Source::kVolume, "rbd.create_volume.after-temp-snapshot"},
                                           Case{Source::kVolume, "rbd.create_volume.after-create"},
                                           Case{Source::kVolume, "rbd.create_volume.after-inherited-metadata-removed"},
                                           Case{Source::kVolume, "rbd.create_volume.after-flatten"},
                                           Case{Source::kVolume, "rbd.create_volume.after-resize"},
                                           Case{Source::kVolume, "rbd.create_volume.after-metadata"},
                                           Case{Source::kVolume, "rbd.create_volume.after-name"}),
                         CaseName);

}  // namespace
}  // namespace blockcsi
