// TransportRouter: each call reaches the connector of its transport and
// only that one; an unserved transport is INVALID_ARGUMENT naming the
// volume; Reconcile hands each connector only its records. Plus the
// factory's wiring: `--connector iscsi` serves rbd volumes through krbd.
#include "attach/transport_router.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "attach/attacher_factory.h"
#include "attach/volume_attacher_impl.h"
#include "contract/publish_context.h"
#include "support/fake_executor.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

// Records what it was asked, tagged with its own name.
class RecordingConnector final : public Connector {
 public:
  RecordingConnector(std::string name, std::vector<std::string>* log) : name_(std::move(name)), log_(log) {}
  std::string family() const override { return name_; }
  void Prepare(const AttachSpec& spec, AttachRecord* record) override {
    log_->push_back(name_ + " prepare " + spec.volume_id);
    record->connector_state["prepared_by"] = name_;
  }
  StatusOr<ConnectResult> Connect(const AttachSpec& spec, AttachRecord*) override {
    log_->push_back(name_ + " connect " + spec.volume_id);
    ConnectResult r;
    r.device_path = "/dev/" + name_;
    r.size_bytes = 4096;
    r.identity.serial = spec.expected_serial;
    return r;
  }
  Status Disconnect(const AttachRecord& record) override {
    log_->push_back(name_ + " disconnect " + record.volume_id);
    return OkStatus();
  }
  StatusOr<LunIdentity> ReadIdentity(const AttachRecord& record) override {
    log_->push_back(name_ + " identity " + record.volume_id);
    LunIdentity id;
    id.serial = record.expected_serial;
    return id;
  }
  StatusOr<uint64_t> Rescan(AttachRecord* record) override {
    log_->push_back(name_ + " rescan " + record->volume_id);
    return 8192;
  }
  AttachHealth Check(const AttachRecord& record) override {
    log_->push_back(name_ + " check " + record.volume_id);
    return {};
  }
  Status Reconcile(std::vector<AttachRecord>* records) override {
    std::string ids;
    for (auto& r : *records) {
      ids += " " + r.volume_id;
      r.annotations["reconciled_by"] = name_;
    }
    log_->push_back(name_ + " reconcile" + ids);
    return OkStatus();
  }

 private:
  std::string name_;
  std::vector<std::string>* log_;
};

std::unique_ptr<Connector> Router(std::vector<std::string>* log) {
  std::map<std::string, std::unique_ptr<Connector>> routes;
  routes["iscsi"] = std::make_unique<RecordingConnector>("iscsi", log);
  routes["rbd"] = std::make_unique<RecordingConnector>("krbd", log);
  return MakeTransportRouter("iscsi", std::move(routes));
}

// An AttachSpec or AttachRecord of `volume_id` over `transport`: the fields
// the router looks at, which both have.
template <typename SpecOrRecord>
SpecOrRecord Of(const std::string& volume_id, const std::string& transport) {
  SpecOrRecord out;
  out.volume_id = volume_id;
  out.transport = transport;
  out.expected_serial = "serial-" + volume_id;
  return out;
}
AttachSpec SpecOf(const std::string& volume_id, const std::string& transport) {
  return Of<AttachSpec>(volume_id, transport);
}
AttachRecord RecordOf(const std::string& volume_id, const std::string& transport) {
  return Of<AttachRecord>(volume_id, transport);
}

TEST(TransportRouterTest, RoutesEveryCallByTransport) {
  std::vector<std::string> log;
  auto router = Router(&log);
  EXPECT_EQ(router->family(), "iscsi") << "records of both transports name the kernel family";

  AttachRecord rbd = RecordOf("vol-r", "rbd");
  router->Prepare(SpecOf("vol-r", "rbd"), &rbd);
  EXPECT_EQ(rbd.connector_state.at("prepared_by"), "krbd");
  auto connected = router->Connect(SpecOf("vol-r", "rbd"), &rbd);
  ASSERT_TRUE(connected.ok());
  EXPECT_EQ(connected->device_path, "/dev/krbd");
  ASSERT_TRUE(router->ReadIdentity(rbd).ok());
  ASSERT_TRUE(router->Rescan(&rbd).ok());
  EXPECT_FALSE(router->Check(rbd).abnormal);
  ASSERT_TRUE(router->Disconnect(rbd).ok());

  AttachRecord iscsi = RecordOf("vol-i", "iscsi");
  router->Prepare(SpecOf("vol-i", "iscsi"), &iscsi);
  ASSERT_TRUE(router->Connect(SpecOf("vol-i", "iscsi"), &iscsi).ok());
  ASSERT_TRUE(router->Disconnect(iscsi).ok());
  // A record written before transports existed is iSCSI.
  ASSERT_TRUE(router->Disconnect(RecordOf("vol-old", "")).ok());

  EXPECT_EQ(log, (std::vector<std::string>{"krbd prepare vol-r", "krbd connect vol-r", "krbd identity vol-r",
                                           "krbd rescan vol-r", "krbd check vol-r", "krbd disconnect vol-r",
                                           "iscsi prepare vol-i", "iscsi connect vol-i", "iscsi disconnect vol-i",
                                           "iscsi disconnect vol-old"}));
}

TEST(TransportRouterTest, UnservedTransportIsInvalidArgumentNamingTheVolume) {
  std::vector<std::string> log;
  auto router = Router(&log);
  AttachRecord record = RecordOf("vol-n", "nvme");
  router->Prepare(SpecOf("vol-n", "nvme"), &record);
  auto connected = router->Connect(SpecOf("vol-n", "nvme"), &record);
  ASSERT_FALSE(connected.ok());
  EXPECT_EQ(connected.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(connected.status().message().find("vol-n"), std::string::npos) << connected.status().message();
  EXPECT_NE(connected.status().message().find("nvme"), std::string::npos);
  EXPECT_EQ(router->ReadIdentity(record).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(router->Rescan(&record).status().code(), StatusCode::kInvalidArgument);
  AttachHealth health = router->Check(record);
  EXPECT_TRUE(health.abnormal);
  EXPECT_NE(health.message.find("vol-n"), std::string::npos);
  // Nothing of that transport can exist, so its failed attempt's record can go.
  EXPECT_TRUE(router->Disconnect(record).ok());
  EXPECT_TRUE(log.empty());
}

TEST(TransportRouterTest, ReconcileGivesEachConnectorOnlyItsRecords) {
  std::vector<std::string> log;
  auto router = Router(&log);
  std::vector<AttachRecord> records = {RecordOf("a", "iscsi"), RecordOf("b", "rbd"), RecordOf("c", "nvme"),
                                       RecordOf("d", "rbd"), RecordOf("e", "")};
  ASSERT_TRUE(router->Reconcile(&records).ok());
  EXPECT_EQ(log, (std::vector<std::string>{"iscsi reconcile a e", "krbd reconcile b d"}));
  // Refreshed records come back in their places.
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(records[0].annotations["reconciled_by"], "iscsi");
  EXPECT_EQ(records[1].annotations["reconciled_by"], "krbd");
  EXPECT_EQ(records[2].annotations.count("reconciled_by"), 0u);
  EXPECT_EQ(records[3].volume_id, "d");
  EXPECT_EQ(records[3].annotations["reconciled_by"], "krbd");
  EXPECT_EQ(records[4].annotations["reconciled_by"], "iscsi");
}

TEST(TransportRouterTest, FacadeReattachesThroughTheRouterByItsStableName) {
  testing::TempDir dir;
  std::vector<std::string> log;
  VolumeAttacherImpl attacher(dir.Join("state"), MachineHost(), Router(&log));
  ASSERT_TRUE(attacher.Start().ok());
  auto first = attacher.Attach(SpecOf("vol-r", "rbd"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->connector, "iscsi");
  EXPECT_EQ(first->transport, "rbd");
  EXPECT_EQ(first->device_path, "/dev/krbd");
  log.clear();
  auto again = attacher.Attach(SpecOf("vol-r", "rbd"));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(log, (std::vector<std::string>{"krbd check vol-r", "krbd identity vol-r"}));
}

// "kernel" is the connector's name; "iscsi" its older name, kept as an alias
// (deployed manifests say --connector=iscsi). Records say "iscsi" either way.
class AttacherFactoryTest : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(KernelAndAlias, AttacherFactoryTest, ::testing::Values("kernel", "iscsi"));

TEST_P(AttacherFactoryTest, KernelConnectorServesRbdVolumesThroughKrbd) {
  testing::TempDir dir;
  std::string root = dir.Join("root");
  // An rbd mapping of the volume's image already exists (the krbd sysfs
  // scenario), so the attach is a reuse and runs no command.
  namespace fs = std::filesystem;
  fs::path from = testing::TestDataPath("krbd/sysfs/rbd0");
  fs::create_directories(root);
  fs::copy(from, root, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  auto executor = std::make_shared<testing::FakeExecutor>();

  AttacherOptions options;
  options.connector = GetParam();
  options.state_dir = dir.Join("state");
  options.node_id = "worker-1";
  options.executor = executor;
  options.host_fs = HostRootedAt(root);
  options.state_files = MachineHost();
  auto attacher = MakeVolumeAttacher(options);
  ASSERT_TRUE(attacher.ok()) << attacher.status().ToString();

  auto spec = ParseAttachSpec("vol-1",
                              {{publish_context::kTransport, "rbd"},
                               {publish_context::kRbdPool, "rbd"},
                               {publish_context::kRbdImage, "csi-vol-7f3a9c2e41d04b8e9a512c6e1f0b3d47"},
                               {publish_context::kRbdImageId, "1037e80f98be"}},
                              {}, "");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto record = (*attacher)->Attach(*spec);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->connector, "iscsi");
  EXPECT_EQ(record->transport, "rbd");
  EXPECT_EQ(record->device_path, "/dev/rbd0");
  EXPECT_EQ(record->connector_state.at("rbd_dev_id"), "0");
  EXPECT_TRUE(executor->RedactedLog().empty());
  EXPECT_TRUE(executor->Pending().empty());
}

}  // namespace
}  // namespace blockcsi
