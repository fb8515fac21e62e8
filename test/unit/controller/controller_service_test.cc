// ControllerService against the in-memory FakeBackend: every CSI rule the
// controller owns (argument checks, codes, idempotency, access modes,
// publish_context, node limit, CHAP secrecy), called directly as the gRPC
// runtime would.
#include "controller/controller_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <set>
#include <tuple>

#include "common/logging.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "support/csi_capabilities.h"
#include "support/csi_requests.h"
#include "support/fake_backend.h"

namespace blockcsi {
namespace {

using ::blockcsi::testing::PublishRequest;

using ::testing::HasSubstr;
using ::testing::Not;
using Mode = csi::v1::VolumeCapability::AccessMode;
constexpr uint64_t kMiB = 1 << 20;
constexpr char kSecretPassword[] = "s3cr3t-Pa55word-xyz";
constexpr char kSecretMutual[] = "mutual-S3cret-abc";

class ControllerServiceTest : public ::testing::Test {
 protected:
  ControllerServiceTest() { Rebuild({}); }

  void Rebuild(ControllerOptions options) {
    service_ = std::make_unique<ControllerService>(backend_, std::move(options));
  }

  csi::v1::CreateVolumeRequest CreateRequest(const std::string& name, int64_t required = 0, int64_t limit = 0) {
    csi::v1::CreateVolumeRequest r;
    r.set_name(name);
    if (required || limit) {
      r.mutable_capacity_range()->set_required_bytes(required);
      r.mutable_capacity_range()->set_limit_bytes(limit);
    }
    *r.add_volume_capabilities() = testing::MountCapability();
    return r;
  }
  grpc::Status Create(const csi::v1::CreateVolumeRequest& r, csi::v1::CreateVolumeResponse* out = nullptr) {
    grpc::ServerContext ctx;
    csi::v1::CreateVolumeResponse local;
    return service_->CreateVolume(&ctx, &r, out ? out : &local);
  }
  // Creates a volume and returns its id (fails the test otherwise).
  std::string MakeVolume(const std::string& name, std::map<std::string, std::string> params = {}) {
    auto r = CreateRequest(name, 10 * kMiB);
    for (const auto& [k, v] : params) (*r.mutable_parameters())[k] = v;
    csi::v1::CreateVolumeResponse resp;
    grpc::Status st = Create(r, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.volume().volume_id();
  }
  grpc::Status Delete(const std::string& id) {
    grpc::ServerContext ctx;
    csi::v1::DeleteVolumeRequest r;
    r.set_volume_id(id);
    csi::v1::DeleteVolumeResponse resp;
    return service_->DeleteVolume(&ctx, &r, &resp);
  }
  grpc::Status Publish(const csi::v1::ControllerPublishVolumeRequest& r,
                       csi::v1::ControllerPublishVolumeResponse* out = nullptr) {
    grpc::ServerContext ctx;
    csi::v1::ControllerPublishVolumeResponse local;
    return service_->ControllerPublishVolume(&ctx, &r, out ? out : &local);
  }
  grpc::Status Publish(const std::string& id, const std::string& node,
                       const csi::v1::VolumeCapability& cap = testing::MountCapability(), bool readonly = false) {
    return Publish(PublishRequest(id, node, cap, readonly));
  }
  grpc::Status Unpublish(const std::string& id, const std::string& node) {
    grpc::ServerContext ctx;
    csi::v1::ControllerUnpublishVolumeRequest r;
    r.set_volume_id(id);
    r.set_node_id(node);
    csi::v1::ControllerUnpublishVolumeResponse resp;
    return service_->ControllerUnpublishVolume(&ctx, &r, &resp);
  }
  std::vector<std::string> GrantedNodes(const std::string& id) {
    auto record = backend_->GetVolume(id);
    EXPECT_TRUE(record.ok());
    std::vector<std::string> nodes;
    if (record.ok()) {
      for (const auto& g : record->grants) nodes.push_back(g.node_id);
    }
    return nodes;
  }
  grpc::Status Expand(const std::string& id, int64_t required, int64_t limit, const csi::v1::VolumeCapability* cap,
                      csi::v1::ControllerExpandVolumeResponse* out) {
    grpc::ServerContext ctx;
    csi::v1::ControllerExpandVolumeRequest r;
    r.set_volume_id(id);
    r.mutable_capacity_range()->set_required_bytes(required);
    r.mutable_capacity_range()->set_limit_bytes(limit);
    if (cap) *r.mutable_volume_capability() = *cap;
    return service_->ControllerExpandVolume(&ctx, &r, out);
  }
  grpc::Status CreateSnapshot(const std::string& source, const std::string& name,
                              csi::v1::CreateSnapshotResponse* out = nullptr) {
    grpc::ServerContext ctx;
    csi::v1::CreateSnapshotRequest r;
    r.set_source_volume_id(source);
    r.set_name(name);
    csi::v1::CreateSnapshotResponse local;
    return service_->CreateSnapshot(&ctx, &r, out ? out : &local);
  }

  std::shared_ptr<testing::FakeBackend> backend_ = std::make_shared<testing::FakeBackend>();
  std::unique_ptr<ControllerService> service_;
};

#define EXPECT_CODE(expr, code)                                                 \
  do {                                                                          \
    grpc::Status _st = (expr);                                                  \
    EXPECT_EQ(_st.error_code(), grpc::StatusCode::code) << _st.error_message(); \
  } while (0)

// ---- CreateVolume -------------------------------------------------------

TEST_F(ControllerServiceTest, CreateVolumeRoundsUpToTheBackendGranularity) {
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(CreateRequest("pvc-a", 1), &resp).ok());
  EXPECT_EQ(resp.volume().capacity_bytes(), static_cast<int64_t>(kMiB));
  ASSERT_TRUE(Create(CreateRequest("pvc-b", 3 * kMiB / 2, 4 * kMiB), &resp).ok());
  EXPECT_EQ(resp.volume().capacity_bytes(), static_cast<int64_t>(2 * kMiB));
  ASSERT_TRUE(Create(CreateRequest("pvc-c", 2 * kMiB, 2 * kMiB), &resp).ok());
  EXPECT_EQ(resp.volume().capacity_bytes(), static_cast<int64_t>(2 * kMiB));
}

TEST_F(ControllerServiceTest, CreateVolumeWithoutRangeGetsTheDefaultSizeOrTheLargestUnderTheLimit) {
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(CreateRequest("pvc-default"), &resp).ok());
  EXPECT_EQ(resp.volume().capacity_bytes(), int64_t{1} << 30);
  ASSERT_TRUE(Create(CreateRequest("pvc-limited", 0, 7 * kMiB / 2), &resp).ok());
  EXPECT_EQ(resp.volume().capacity_bytes(), static_cast<int64_t>(3 * kMiB));
  grpc::Status st = Create(CreateRequest("pvc-tiny", 0, 1000));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(st.error_message(), HasSubstr("pvc-tiny"));
}

TEST_F(ControllerServiceTest, CreateVolumeNeverRoundsPastTheLimit) {
  grpc::Status st = Create(CreateRequest("pvc-range", 3 * kMiB / 2, 19 * kMiB / 10));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(st.error_message(), HasSubstr("pvc-range"));
  EXPECT_EQ(backend_->Calls("CreateVolume"), 0);
  EXPECT_CODE(Create(CreateRequest("pvc-inverted", 4 * kMiB, 2 * kMiB)), OUT_OF_RANGE);
  EXPECT_CODE(Create(CreateRequest("pvc-negative", -1, 0)), INVALID_ARGUMENT);
}

TEST_F(ControllerServiceTest, CreateVolumeRequiresNameAndCapabilities) {
  EXPECT_CODE(Create(CreateRequest("")), INVALID_ARGUMENT);
  auto r = CreateRequest("pvc-nocaps");
  r.clear_volume_capabilities();
  grpc::Status st = Create(r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("pvc-nocaps"));
  auto no_mode = CreateRequest("pvc-nomode");
  no_mode.mutable_volume_capabilities(0)->clear_access_mode();
  EXPECT_CODE(Create(no_mode), INVALID_ARGUMENT);
  auto no_type = CreateRequest("pvc-notype");
  no_type.mutable_volume_capabilities(0)->clear_mount();
  EXPECT_CODE(Create(no_type), INVALID_ARGUMENT);
}

TEST_F(ControllerServiceTest, CreateVolumeRejectsMultiNodeWritersOnMountVolumesOnly) {
  auto mount = CreateRequest("pvc-rwx-mount");
  *mount.mutable_volume_capabilities(0) = testing::MountCapability("", Mode::MULTI_NODE_MULTI_WRITER);
  grpc::Status st = Create(mount);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("MULTI_NODE_MULTI_WRITER"));
  auto block = CreateRequest("pvc-rwx-block");
  *block.mutable_volume_capabilities(0) = testing::BlockCapability(Mode::MULTI_NODE_MULTI_WRITER);
  EXPECT_TRUE(Create(block).ok());
}

TEST_F(ControllerServiceTest, CreateVolumeNamesAnUnknownParameter) {
  auto r = CreateRequest("pvc-params");
  (*r.mutable_parameters())["fstpye"] = "ext4";
  grpc::Status st = Create(r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("fstpye"));
  EXPECT_EQ(backend_->Calls("CreateVolume"), 0);
}

TEST_F(ControllerServiceTest, CreateVolumeAcceptsSidecarAndBackendKeysAndKeepsSidecarKeysFromTheBackend) {
  auto r = CreateRequest("pvc-meta");
  (*r.mutable_parameters())["csi.storage.k8s.io/pvc/name"] = "data";
  (*r.mutable_parameters())["csi.storage.k8s.io/pvc/namespace"] = "default";
  (*r.mutable_parameters())["thin"] = "true";  // the fake backend's own key
  (*r.mutable_parameters())["backend"] = "default";
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(r, &resp).ok());
  auto record = backend_->GetVolume(resp.volume().volume_id());
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->parameters.count("thin"), 1u);
  EXPECT_EQ(record->parameters.count("csi.storage.k8s.io/pvc/name"), 0u);
}

// Issue #15: a volume its node could never format is refused or grown at
// CreateVolume, not left to fail at every NodeStageVolume.
TEST_F(ControllerServiceTest, CreateVolumeGrowsToTheFilesystemMinimumWithinTheLimit) {
  ControllerOptions options;
  options.fs_minimum_bytes = [](const std::string& fs) -> uint64_t { return fs == "xfs" ? 300 * kMiB : 0; };
  Rebuild(options);
  auto xfs = CreateRequest("pvc-small-xfs", 64 * kMiB);
  (*xfs.mutable_parameters())["fsType"] = "xfs";
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(xfs, &resp).ok());
  EXPECT_EQ(resp.volume().capacity_bytes(), 300 * kMiB) << "the real capacity is reported";
  ASSERT_TRUE(Create(xfs, &resp).ok()) << "a retry computes the same size";

  auto limited = CreateRequest("pvc-small-xfs-limited", 64 * kMiB, 128 * kMiB);
  (*limited.mutable_parameters())["fsType"] = "xfs";
  grpc::Status st = Create(limited);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("xfs needs at least " + std::to_string(300 * kMiB)));
  EXPECT_THAT(st.error_message(), HasSubstr("pvc-small-xfs-limited"));

  auto ext4 = CreateRequest("pvc-small-ext4", 64 * kMiB, 64 * kMiB);
  ASSERT_TRUE(Create(ext4, &resp).ok());
  EXPECT_EQ(resp.volume().capacity_bytes(), 64 * kMiB);
  auto block = CreateRequest("pvc-small-block", 64 * kMiB, 64 * kMiB);
  (*block.mutable_parameters())["fsType"] = "xfs";
  block.mutable_volume_capabilities(0)->clear_mount();
  block.mutable_volume_capabilities(0)->mutable_block();
  ASSERT_TRUE(Create(block, &resp).ok()) << "raw block is never formatted";
  EXPECT_EQ(resp.volume().capacity_bytes(), 64 * kMiB);
}

TEST_F(ControllerServiceTest, CreateVolumeChecksMkfsOptionsForItsFilesystem) {
  int before = backend_->Calls("CreateVolume");
  for (const auto& [fs, options, named] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"ext4", "-F; touch /x", "-F;"},
           {"ext4", "-b 4096 -f", "-f"},
           {"xfs", "-b size=4096 -d file=1,name=/etc/passwd", "file"},
           {"btrfs", "-N 100", "-N"}}) {
    auto r = CreateRequest("pvc-mkfs-" + fs);
    (*r.mutable_parameters())["fsType"] = fs;
    (*r.mutable_parameters())["mkfsOptions"] = options;
    grpc::Status st = Create(r);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << fs << " " << options;
    EXPECT_THAT(st.error_message(), HasSubstr(named)) << fs << " " << options;
    EXPECT_THAT(st.error_message(), HasSubstr("pvc-mkfs-" + fs));
  }
  EXPECT_EQ(backend_->Calls("CreateVolume"), before) << "nothing reached the backend";
  auto good = CreateRequest("pvc-mkfs-good");
  (*good.mutable_parameters())["mkfsOptions"] = "-N 100000 -L data";
  EXPECT_TRUE(Create(good).ok());
}

TEST_F(ControllerServiceTest, CreateVolumeCarriesFsTypeInVolumeContext) {
  auto r = CreateRequest("pvc-xfs");
  (*r.mutable_parameters())["fsType"] = "xfs";
  (*r.mutable_parameters())["mkfsOptions"] = "-m reflink=1";
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(r, &resp).ok());
  EXPECT_EQ(resp.volume().volume_context().at(volume_context::kFsType), "xfs");
  EXPECT_EQ(resp.volume().volume_context().at(volume_context::kMkfsOptions), "-m reflink=1");

  auto sidecar = CreateRequest("pvc-sidecar-fs");
  (*sidecar.mutable_parameters())["csi.storage.k8s.io/fstype"] = "ext4";
  ASSERT_TRUE(Create(sidecar, &resp).ok());
  EXPECT_EQ(resp.volume().volume_context().at(volume_context::kFsType), "ext4");

  auto from_cap = CreateRequest("pvc-cap-fs");
  *from_cap.mutable_volume_capabilities(0) = testing::MountCapability("xfs", Mode::SINGLE_NODE_WRITER);
  ASSERT_TRUE(Create(from_cap, &resp).ok());
  EXPECT_EQ(resp.volume().volume_context().at(volume_context::kFsType), "xfs");

  auto clash = CreateRequest("pvc-fs-clash");
  (*clash.mutable_parameters())["fsType"] = "xfs";
  (*clash.mutable_parameters())["csi.storage.k8s.io/fstype"] = "ext4";
  EXPECT_CODE(Create(clash), INVALID_ARGUMENT);
  auto ntfs = CreateRequest("pvc-ntfs");
  (*ntfs.mutable_parameters())["fsType"] = "ntfs";
  grpc::Status st = Create(ntfs);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("ntfs"));
  auto chap = CreateRequest("pvc-chap-bad");
  (*chap.mutable_parameters())["chap"] = "yes";
  EXPECT_CODE(Create(chap), INVALID_ARGUMENT);
}

// Idempotency by name is the backend's (one implementation: the local
// backend, served in-process or by the agent), so the fake has none and this
// checks only the controller's part: the CSI name reaches the backend as the
// volume's name, and the backend's ALREADY_EXISTS keeps its code and names
// the volume. Same name twice -> same volume, other size -> ALREADY_EXISTS is
// tested on the real local backend on tgtd: controller_conformance_tests
// CreateVolumeIsIdempotentByName (and csi-sanity).
TEST_F(ControllerServiceTest, CreateVolumePassesTheNameAndKeepsTheBackendsAlreadyExists) {
  csi::v1::CreateVolumeResponse first;
  ASSERT_TRUE(Create(CreateRequest("pvc-same", 5 * kMiB), &first).ok());
  auto record = backend_->GetVolume(first.volume().volume_id());
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->name, "pvc-same");
  backend_->FailNext("CreateVolume", AlreadyExists("volume name \"pvc-same\" exists with another size"));
  grpc::Status st = Create(CreateRequest("pvc-same", 50 * kMiB));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(st.error_message(), HasSubstr("pvc-same"));
}

// The controller's part: the backend's segments, all of them and nothing
// else, as one accessible topology; none when the backend has none (the
// values are set here, so the test does not just read back a fake default).
TEST_F(ControllerServiceTest, CreateVolumeReportsTheBackendTopology) {
  backend_->SetTopology({{"topology.blockcsi.io/storage-host", "array-7"}, {"example.com/rack", "r12"}});
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(CreateRequest("pvc-topo"), &resp).ok());
  ASSERT_EQ(resp.volume().accessible_topology_size(), 1);
  const auto& segments = resp.volume().accessible_topology(0).segments();
  EXPECT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments.at("topology.blockcsi.io/storage-host"), "array-7");
  EXPECT_EQ(segments.at("example.com/rack"), "r12");

  backend_->SetTopology({});
  resp.Clear();
  ASSERT_TRUE(Create(CreateRequest("pvc-anywhere"), &resp).ok());
  EXPECT_EQ(resp.volume().accessible_topology_size(), 0) << "a topology the backend does not have";
}

TEST_F(ControllerServiceTest, CreateVolumeFromSnapshotAndClone) {
  std::string source = MakeVolume("pvc-source");
  csi::v1::CreateSnapshotResponse snap;
  ASSERT_TRUE(CreateSnapshot(source, "snap-1", &snap).ok());

  auto restore = CreateRequest("pvc-restore");
  restore.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(snap.snapshot().snapshot_id());
  csi::v1::CreateVolumeResponse resp;
  ASSERT_TRUE(Create(restore, &resp).ok());
  EXPECT_EQ(resp.volume().content_source().snapshot().snapshot_id(), snap.snapshot().snapshot_id());
  EXPECT_EQ(resp.volume().capacity_bytes(), static_cast<int64_t>(10 * kMiB)) << "no range: the source's size";

  auto clone = CreateRequest("pvc-clone", 20 * kMiB);
  clone.mutable_volume_content_source()->mutable_volume()->set_volume_id(source);
  ASSERT_TRUE(Create(clone, &resp).ok());
  EXPECT_EQ(resp.volume().content_source().volume().volume_id(), source);
  EXPECT_EQ(resp.volume().capacity_bytes(), static_cast<int64_t>(20 * kMiB));

  auto smaller = CreateRequest("pvc-smaller", 2 * kMiB);
  smaller.mutable_volume_content_source()->mutable_volume()->set_volume_id(source);
  EXPECT_CODE(Create(smaller), OUT_OF_RANGE);

  auto missing_snap = CreateRequest("pvc-missing-snap");
  missing_snap.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id("snap-nope");
  grpc::Status st = Create(missing_snap);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("snap-nope"));

  auto missing_vol = CreateRequest("pvc-missing-vol");
  missing_vol.mutable_volume_content_source()->mutable_volume()->set_volume_id("vol-nope");
  st = Create(missing_vol);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("vol-nope"));

  auto empty_source = CreateRequest("pvc-empty-source");
  empty_source.mutable_volume_content_source()->mutable_volume();
  EXPECT_CODE(Create(empty_source), INVALID_ARGUMENT);
}

TEST_F(ControllerServiceTest, ConcurrentCreateOfOneNameIsAbortedButBadInputStillInvalid) {
  backend_->CloseGate("CreateVolume");
  auto first = std::async(std::launch::async, [&] { return Create(CreateRequest("pvc-race", kMiB)); });
  backend_->WaitEntered("CreateVolume");
  grpc::Status st = Create(CreateRequest("pvc-race", kMiB));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(st.error_message(), HasSubstr("pvc-race"));
  // Arguments are checked before the lock: bad input is never ABORTED.
  EXPECT_CODE(Create(CreateRequest("pvc-race", -5)), INVALID_ARGUMENT);
  // Another name is not held up.
  backend_->OpenGate();
  EXPECT_TRUE(first.get().ok());
  EXPECT_TRUE(Create(CreateRequest("pvc-race", kMiB)).ok()) << "the name is free again once the first returns";
}

TEST_F(ControllerServiceTest, BackendFailureKeepsItsCodeAndNamesTheVolume) {
  backend_->FailNext("CreateVolume", Unavailable("tgtd is not answering"));
  grpc::Status st = Create(CreateRequest("pvc-unavailable"));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(st.error_message(), HasSubstr("pvc-unavailable"));
}

// ---- DeleteVolume -------------------------------------------------------

TEST_F(ControllerServiceTest, DeleteVolumeUnknownIsOkAndMissingIdIsInvalid) {
  EXPECT_TRUE(Delete("vol-never-made").ok());
  EXPECT_CODE(Delete(""), INVALID_ARGUMENT);
  std::string id = MakeVolume("pvc-del");
  EXPECT_TRUE(Delete(id).ok());
  EXPECT_TRUE(Delete(id).ok()) << "second delete is idempotent";
  EXPECT_FALSE(backend_->GetVolume(id).ok());
}

TEST_F(ControllerServiceTest, DeleteVolumeStillPublishedIsFailedPrecondition) {
  std::string id = MakeVolume("pvc-busy");
  ASSERT_TRUE(Publish(id, "n1").ok());
  grpc::Status st = Delete(id);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr(id));
  EXPECT_THAT(st.error_message(), HasSubstr("n1"));
  ASSERT_TRUE(Unpublish(id, "n1").ok());
  EXPECT_TRUE(Delete(id).ok());
}

TEST_F(ControllerServiceTest, ConcurrentOperationsOnOneVolumeAreAborted) {
  std::string id = MakeVolume("pvc-inflight");
  backend_->CloseGate("GrantAccess");
  auto publish = std::async(std::launch::async, [&] { return Publish(id, "n1"); });
  backend_->WaitEntered("GrantAccess");
  grpc::Status st = Delete(id);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(st.error_message(), HasSubstr(id));
  EXPECT_CODE(Unpublish(id, "n1"), ABORTED);
  csi::v1::ControllerExpandVolumeResponse expand;
  EXPECT_CODE(Expand(id, 20 * kMiB, 0, nullptr, &expand), ABORTED);
  // Bad input is refused before the lock.
  EXPECT_CODE(Publish(id, "N1_bad"), INVALID_ARGUMENT);
  backend_->OpenGate();
  EXPECT_TRUE(publish.get().ok());
}

// ---- ControllerPublishVolume --------------------------------------------

TEST_F(ControllerServiceTest, PublishGrantsTheNodeInitiatorAndReturnsTheContext) {
  std::string id = MakeVolume("pvc-pub");
  csi::v1::ControllerPublishVolumeResponse resp;
  ASSERT_TRUE(Publish(PublishRequest(id, "node-1.example"), &resp).ok());
  auto record = backend_->GetVolume(id);
  ASSERT_TRUE(record.ok());
  ASSERT_EQ(record->grants.size(), 1u);
  EXPECT_EQ(record->grants[0].initiator_iqn, "iqn.2026-11.io.blockcsi:node:node-1.example");
  EXPECT_EQ(record->grants[0].node_id, "node-1.example");
  EXPECT_FALSE(record->grants[0].read_only);

  const auto& ctx = resp.publish_context();
  EXPECT_EQ(ctx.at(publish_context::kPortals), "192.0.2.10:3260,192.0.2.11:3260");
  EXPECT_EQ(ctx.at(publish_context::kTargetIqn), record->target_iqn);
  EXPECT_EQ(ctx.at(publish_context::kLun), "1");
  EXPECT_EQ(ctx.at(publish_context::kSerial), record->serial);
  EXPECT_EQ(ctx.at(publish_context::kWwn), record->wwn);
  EXPECT_EQ(ctx.at(publish_context::kChapRequired), "false");
  EXPECT_EQ(ctx.at(publish_context::kTransport), "iscsi");
  EXPECT_EQ(ctx.at(publish_context::kReadOnly), "false");
}

TEST_F(ControllerServiceTest, TransportParamsTravelButCannotOverrideTheIscsiKeys) {
  std::string id = MakeVolume("pvc-transport");
  backend_->SetTransportParams(id, {{"rbdPool", "kube"}, {publish_context::kLun, "99"}});
  csi::v1::ControllerPublishVolumeResponse resp;
  ASSERT_TRUE(Publish(PublishRequest(id, "n1"), &resp).ok());
  EXPECT_EQ(resp.publish_context().at("rbdPool"), "kube");
  EXPECT_EQ(resp.publish_context().at(publish_context::kLun), "1");
}

TEST_F(ControllerServiceTest, SamePublishAgainIsOkWithTheSameContext) {
  std::string id = MakeVolume("pvc-again");
  csi::v1::ControllerPublishVolumeResponse first, second;
  ASSERT_TRUE(Publish(PublishRequest(id, "n1"), &first).ok());
  ASSERT_TRUE(Publish(PublishRequest(id, "n1"), &second).ok());
  using Context = std::map<std::string, std::string>;
  EXPECT_EQ(Context(first.publish_context().begin(), first.publish_context().end()),
            Context(second.publish_context().begin(), second.publish_context().end()));
  EXPECT_EQ(GrantedNodes(id), std::vector<std::string>{"n1"});
}

TEST_F(ControllerServiceTest, IncompatiblePublishOnTheSameNodeIsAlreadyExists) {
  std::string id = MakeVolume("pvc-incompat");
  ASSERT_TRUE(Publish(id, "n1", testing::MountCapability("", Mode::SINGLE_NODE_WRITER)).ok());
  grpc::Status st = Publish(id, "n1", testing::BlockCapability(Mode::SINGLE_NODE_WRITER));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(st.error_message(), HasSubstr(id));
  EXPECT_THAT(st.error_message(), HasSubstr("n1"));
  EXPECT_CODE(Publish(id, "n1", testing::MountCapability("", Mode::SINGLE_NODE_WRITER), /*readonly=*/true),
              ALREADY_EXISTS);
  EXPECT_CODE(Publish(id, "n1", testing::MountCapability("", Mode::SINGLE_NODE_READER_ONLY)), ALREADY_EXISTS);
  // Mount flags and fs_type are the node's business: still the same attachment.
  EXPECT_TRUE(Publish(id, "n1", testing::MountCapability("ext4", Mode::SINGLE_NODE_WRITER)).ok());
}

TEST_F(ControllerServiceTest, SingleNodeModePublishedElsewhereIsFailedPrecondition) {
  for (auto mode : {Mode::SINGLE_NODE_WRITER, Mode::SINGLE_NODE_READER_ONLY, Mode::SINGLE_NODE_SINGLE_WRITER,
                    Mode::SINGLE_NODE_MULTI_WRITER}) {
    std::string id = MakeVolume("pvc-single-" + std::to_string(mode));
    ASSERT_TRUE(Publish(id, "n1", testing::MountCapability("", mode)).ok());
    grpc::Status st = Publish(id, "n2", testing::MountCapability("", mode));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << mode;
    EXPECT_THAT(st.error_message(), HasSubstr(id));
    EXPECT_THAT(st.error_message(), HasSubstr("n1"));
    EXPECT_THAT(st.error_message(), HasSubstr("n2"));
    EXPECT_EQ(GrantedNodes(id), std::vector<std::string>{"n1"});
  }
  // A multi-node request does not get around a single-node grant elsewhere.
  std::string id = MakeVolume("pvc-single-then-multi", {});
  ASSERT_TRUE(Publish(id, "n1", testing::BlockCapability(Mode::SINGLE_NODE_WRITER)).ok());
  EXPECT_CODE(Publish(id, "n2", testing::BlockCapability(Mode::MULTI_NODE_MULTI_WRITER)), FAILED_PRECONDITION);
}

TEST_F(ControllerServiceTest, AGrantOfUnknownModeIsTakenAsExclusive) {
  std::string id = MakeVolume("pvc-handmade");
  backend_->AddRawGrant(id, {InitiatorIqnForNode("legacy-node"), "legacy-node", false, "", false});
  grpc::Status st = Publish(id, "n2", testing::BlockCapability(Mode::MULTI_NODE_MULTI_WRITER));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("legacy-node"));
}

TEST_F(ControllerServiceTest, MultiNodeWritersOnlyForRawBlock) {
  std::string id = MakeVolume("pvc-rwx");
  ASSERT_TRUE(Publish(id, "n1", testing::BlockCapability(Mode::MULTI_NODE_MULTI_WRITER)).ok());
  ASSERT_TRUE(Publish(id, "n2", testing::BlockCapability(Mode::MULTI_NODE_MULTI_WRITER)).ok());
  EXPECT_EQ(GrantedNodes(id).size(), 2u);
  grpc::Status st = Publish(id, "n3", testing::MountCapability("", Mode::MULTI_NODE_MULTI_WRITER));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr(id));
  EXPECT_CODE(Publish(id, "n3", testing::MountCapability("", Mode::MULTI_NODE_SINGLE_WRITER)), INVALID_ARGUMENT);
}

TEST_F(ControllerServiceTest, MultiNodeSingleWriterAdmitsOneWriter) {
  std::string id = MakeVolume("pvc-one-writer");
  ASSERT_TRUE(Publish(id, "n1", testing::BlockCapability(Mode::MULTI_NODE_SINGLE_WRITER)).ok());
  grpc::Status st = Publish(id, "n2", testing::BlockCapability(Mode::MULTI_NODE_SINGLE_WRITER));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("n1"));
  EXPECT_TRUE(Publish(id, "n2", testing::BlockCapability(Mode::MULTI_NODE_SINGLE_WRITER), /*readonly=*/true).ok());
}

TEST_F(ControllerServiceTest, ReadOnlyIsHonoured) {
  std::string id = MakeVolume("pvc-ro");
  csi::v1::ControllerPublishVolumeResponse resp;
  ASSERT_TRUE(Publish(PublishRequest(id, "n1", testing::MountCapability(), /*readonly=*/true), &resp).ok());
  EXPECT_EQ(resp.publish_context().at(publish_context::kReadOnly), "true");
  auto record = backend_->GetVolume(id);
  ASSERT_TRUE(record.ok());
  EXPECT_TRUE(record->grants.at(0).read_only);

  // Reader-only modes publish read-only even when the CO leaves readonly unset.
  std::string rox = MakeVolume("pvc-rox");
  ASSERT_TRUE(
      Publish(PublishRequest(rox, "n1", testing::MountCapability("", Mode::MULTI_NODE_READER_ONLY)), &resp).ok());
  EXPECT_EQ(resp.publish_context().at(publish_context::kReadOnly), "true");
  ASSERT_TRUE(
      Publish(PublishRequest(rox, "n2", testing::MountCapability("", Mode::MULTI_NODE_READER_ONLY)), &resp).ok());
  EXPECT_EQ(GrantedNodes(rox).size(), 2u);
}

TEST_F(ControllerServiceTest, PublishArgumentErrors) {
  std::string id = MakeVolume("pvc-args");
  EXPECT_CODE(Publish("", "n1"), INVALID_ARGUMENT);
  grpc::Status st = Publish(id, "");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr(id));
  st = Publish(id, "Node_1");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("Node_1"));
  auto no_cap = PublishRequest(id, "n1");
  no_cap.clear_volume_capability();
  EXPECT_CODE(Publish(no_cap), INVALID_ARGUMENT);
  EXPECT_EQ(backend_->Calls("GrantAccess"), 0);
}

TEST_F(ControllerServiceTest, PublishUnknownVolumeIsNotFound) {
  grpc::Status st = Publish("vol-ghost", "n1");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("vol-ghost"));
}

TEST_F(ControllerServiceTest, PublishToAnUnknownNodeIsNotFoundWhenTheDriverCanTell) {
  ControllerOptions options;
  options.node_exists = [](const std::string& node) -> StatusOr<bool> { return node == "n1"; };
  Rebuild(options);
  std::string id = MakeVolume("pvc-nodes");
  EXPECT_TRUE(Publish(id, "n1").ok());
  ASSERT_TRUE(Unpublish(id, "n1").ok());
  grpc::Status st = Publish(id, "n9");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("n9"));
  EXPECT_TRUE(GrantedNodes(id).empty());
}

TEST_F(ControllerServiceTest, MoreVolumesThanTheNodeMaximumIsResourceExhausted) {
  ControllerOptions options;
  options.max_volumes_per_node = 2;
  Rebuild(options);
  std::string a = MakeVolume("pvc-max-a"), b = MakeVolume("pvc-max-b"), c = MakeVolume("pvc-max-c");
  ASSERT_TRUE(Publish(a, "n1").ok());
  ASSERT_TRUE(Publish(b, "n1").ok());
  grpc::Status st = Publish(c, "n1");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), HasSubstr("n1"));
  EXPECT_THAT(st.error_message(), HasSubstr(c));
  EXPECT_TRUE(Publish(a, "n1").ok()) << "re-publishing a counted volume is not a new one";
  EXPECT_TRUE(Publish(c, "n2").ok()) << "the limit is per node";
  ASSERT_TRUE(Unpublish(c, "n2").ok());
  ASSERT_TRUE(Unpublish(b, "n1").ok());
  EXPECT_TRUE(Publish(c, "n1").ok()) << "an unpublish frees a slot";
}

TEST_F(ControllerServiceTest, ChapVolumeNeedsSecretsAndNeverLeaksThem) {
  // Every level, debug included: a secret logged only at debug would
  // otherwise pass unseen (the default level is info).
  InitLogging("blockcsi", LogFormat::kText, LogLevel::kDebug);
  ASSERT_TRUE(LogEnabled(LogLevel::kDebug));
  std::string log;
  SetLogCaptureForTest(&log);
  std::string id = MakeVolume("pvc-chap", {{"chap", "true"}});

  auto without = PublishRequest(id, "n1");
  grpc::Status st = Publish(without);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("chap-username"));
  EXPECT_THAT(st.error_message(), HasSubstr(id));

  auto half = PublishRequest(id, "n1");
  (*half.mutable_secrets())["chap-username"] = "user1";
  (*half.mutable_secrets())["chap-password"] = kSecretPassword;
  (*half.mutable_secrets())["chap-mutual-username"] = "target1";
  st = Publish(half);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("chap-mutual-password"));
  EXPECT_THAT(st.error_message(), Not(HasSubstr(kSecretPassword)));

  auto with = half;
  (*with.mutable_secrets())["chap-mutual-password"] = kSecretMutual;
  csi::v1::ControllerPublishVolumeResponse resp;
  ASSERT_TRUE(Publish(with, &resp).ok());
  EXPECT_EQ(resp.publish_context().at(publish_context::kChapRequired), "true");
  for (const auto& [k, v] : resp.publish_context()) {
    EXPECT_THAT(v, Not(HasSubstr(kSecretPassword))) << k;
    EXPECT_THAT(v, Not(HasSubstr(kSecretMutual))) << k;
  }
  ChapCredentials given = backend_->LastChap(id);
  EXPECT_EQ(given.username, "user1");
  EXPECT_EQ(given.password, kSecretPassword);
  EXPECT_EQ(given.mutual_password, kSecretMutual);
  auto record = backend_->GetVolume(id);
  ASSERT_TRUE(record.ok());
  EXPECT_TRUE(record->grants.at(0).chap);

  // An error after the secrets were parsed must not carry them either.
  ASSERT_TRUE(Unpublish(id, "n1").ok());
  backend_->FailNext("GrantAccess", Internal("boom"));
  st = Publish(with);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(st.error_message(), Not(HasSubstr(kSecretPassword)));

  SetLogCaptureForTest(nullptr);
  InitLogging("blockcsi", LogFormat::kText, LogLevel::kInfo);
  EXPECT_THAT(log, HasSubstr(id)) << "the capture saw the publish";
  EXPECT_THAT(log, Not(HasSubstr(kSecretPassword)));
  EXPECT_THAT(log, Not(HasSubstr(kSecretMutual)));
}

// Issue #21: the controller applies the same CHAP rules as the agent and the
// node (chap_rules.h) before anything reaches the backend.
TEST_F(ControllerServiceTest, ChapSecretsThatTgtdWouldMisreadAreRefusedBeforeTheBackend) {
  std::string id = MakeVolume("pvc-chap-rules", {{"chap", "true"}});
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"a,b", kSecretPassword},                                            // tgtadm's parameter separator
      {"evil\nTarget 3: iqn.2026-11.io.blockcsi:vol-x", kSecretPassword},  // forged output line
      {"user1", "6bytes"},                                                 // shorter than 12 bytes
      {"user1", std::string(10 * 1024, 'p')},                              // longer than tgtd's 255
      {std::string(10 * 1024, 'u'), kSecretPassword},
  };
  for (const auto& [user, password] : bad) {
    auto r = PublishRequest(id, "n1");
    (*r.mutable_secrets())["chap-username"] = user;
    (*r.mutable_secrets())["chap-password"] = password;
    grpc::Status st = Publish(r);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << user.substr(0, 20);
    EXPECT_THAT(st.error_message(), HasSubstr(id));
    EXPECT_LT(st.error_message().size(), 400u);
    EXPECT_THAT(st.error_message(), Not(HasSubstr(password)));
    EXPECT_TRUE(backend_->GetVolume(id)->grants.empty()) << "the backend was asked anyway";
  }
  auto same = PublishRequest(id, "n1");
  (*same.mutable_secrets())["chap-username"] = "user1";
  (*same.mutable_secrets())["chap-password"] = kSecretPassword;
  (*same.mutable_secrets())["chap-mutual-username"] = "target1";
  (*same.mutable_secrets())["chap-mutual-password"] = kSecretPassword;
  EXPECT_EQ(Publish(same).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "one secret for both directions";
}

TEST_F(ControllerServiceTest, StaticVolumeContextCanAskForChap) {
  std::string id = MakeVolume("pvc-static");
  auto r = PublishRequest(id, "n1");
  (*r.mutable_volume_context())["chap"] = "true";
  EXPECT_CODE(Publish(r), INVALID_ARGUMENT);
}

// ---- ControllerUnpublishVolume ------------------------------------------

TEST_F(ControllerServiceTest, UnpublishIsIdempotentAndRevokes) {
  std::string id = MakeVolume("pvc-unpub");
  ASSERT_TRUE(Publish(id, "n1", testing::BlockCapability(Mode::MULTI_NODE_MULTI_WRITER)).ok());
  ASSERT_TRUE(Publish(id, "n2", testing::BlockCapability(Mode::MULTI_NODE_MULTI_WRITER)).ok());
  EXPECT_TRUE(Unpublish(id, "n1").ok());
  EXPECT_EQ(GrantedNodes(id), std::vector<std::string>{"n2"});
  EXPECT_TRUE(Unpublish(id, "n1").ok()) << "second unpublish";
  EXPECT_TRUE(Unpublish(id, "never-seen").ok()) << "unknown node";
  EXPECT_TRUE(Unpublish("vol-ghost", "n1").ok()) << "unknown volume";
  EXPECT_TRUE(Unpublish(id, "Not_A_Node").ok()) << "a malformed node id could never have been granted";
  EXPECT_CODE(Unpublish("", "n1"), INVALID_ARGUMENT);
  EXPECT_EQ(GrantedNodes(id), std::vector<std::string>{"n2"});
  EXPECT_TRUE(Unpublish(id, "").ok()) << "no node id: unpublish from every node";
  EXPECT_TRUE(GrantedNodes(id).empty());
}

TEST_F(ControllerServiceTest, UnpublishBackendErrorIsReported) {
  std::string id = MakeVolume("pvc-unpub-err");
  ASSERT_TRUE(Publish(id, "n1").ok());
  backend_->FailNext("RevokeAccess", Unavailable("tgtd down"));
  grpc::Status st = Unpublish(id, "n1");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(st.error_message(), HasSubstr(id));
}

// ---- ValidateVolumeCapabilities -----------------------------------------

TEST_F(ControllerServiceTest, ValidateVolumeCapabilities) {
  std::string id = MakeVolume("pvc-validate", {{"fsType", "ext4"}});
  auto call = [&](std::vector<csi::v1::VolumeCapability> caps, csi::v1::ValidateVolumeCapabilitiesResponse* resp,
                  std::string volume = "") {
    grpc::ServerContext ctx;
    csi::v1::ValidateVolumeCapabilitiesRequest r;
    r.set_volume_id(volume.empty() ? id : volume);
    for (auto& c : caps) *r.add_volume_capabilities() = c;
    return service_->ValidateVolumeCapabilities(&ctx, &r, resp);
  };
  csi::v1::ValidateVolumeCapabilitiesResponse resp;
  ASSERT_TRUE(call({testing::MountCapability(), testing::BlockCapability(Mode::MULTI_NODE_MULTI_WRITER)}, &resp).ok());
  EXPECT_TRUE(resp.has_confirmed());
  EXPECT_EQ(resp.confirmed().volume_capabilities_size(), 2);

  resp.Clear();
  ASSERT_TRUE(call({testing::MountCapability("", Mode::MULTI_NODE_MULTI_WRITER)}, &resp).ok());
  EXPECT_FALSE(resp.has_confirmed());
  EXPECT_FALSE(resp.message().empty());

  resp.Clear();
  ASSERT_TRUE(call({testing::MountCapability("xfs", Mode::SINGLE_NODE_WRITER)}, &resp).ok());
  EXPECT_FALSE(resp.has_confirmed()) << "the volume carries ext4";

  grpc::Status st = call({testing::MountCapability()}, &resp, "vol-ghost");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("vol-ghost"));
  EXPECT_CODE(call({}, &resp), INVALID_ARGUMENT);
  csi::v1::VolumeCapability no_mode;
  no_mode.mutable_block();
  EXPECT_CODE(call({no_mode}, &resp), INVALID_ARGUMENT);
}

// ---- ListVolumes --------------------------------------------------------

TEST_F(ControllerServiceTest, ListVolumesPagesAndReportsPublishedNodesAndCondition) {
  std::set<std::string> made;
  for (int i = 0; i < 5; ++i) made.insert(MakeVolume("pvc-list-" + std::to_string(i)));
  std::string published = *made.begin();
  ASSERT_TRUE(Publish(published, "n7").ok());
  backend_->SetHealth(published, {true, "export missing on the target"});

  std::set<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    grpc::ServerContext ctx;
    csi::v1::ListVolumesRequest r;
    r.set_max_entries(2);
    r.set_starting_token(token);
    csi::v1::ListVolumesResponse resp;
    ASSERT_TRUE(service_->ListVolumes(&ctx, &r, &resp).ok());
    EXPECT_LE(resp.entries_size(), 2);
    for (const auto& e : resp.entries()) {
      seen.insert(e.volume().volume_id());
      ASSERT_TRUE(e.status().has_volume_condition());
      if (e.volume().volume_id() == published) {
        EXPECT_EQ(
            std::vector<std::string>(e.status().published_node_ids().begin(), e.status().published_node_ids().end()),
            std::vector<std::string>{"n7"});
        EXPECT_TRUE(e.status().volume_condition().abnormal());
        EXPECT_THAT(e.status().volume_condition().message(), HasSubstr("export missing"));
      } else {
        EXPECT_EQ(e.status().published_node_ids_size(), 0);
        EXPECT_FALSE(e.status().volume_condition().abnormal());
      }
    }
    token = resp.next_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, made);

  // Which tokens are stale is the backend's call (the real one: controller
  // conformance); the controller hands the token over and keeps ABORTED.
  grpc::ServerContext ctx;
  csi::v1::ListVolumesRequest bad;
  bad.set_starting_token("bogus-token");
  csi::v1::ListVolumesResponse resp;
  backend_->FailNext("ListVolumes", Aborted("the backend does not know this token"));
  const int calls_before = backend_->Calls("ListVolumes");
  grpc::Status st = service_->ListVolumes(&ctx, &bad, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(backend_->Calls("ListVolumes"), calls_before + 1) << "the token did not reach the backend";
  grpc::ServerContext ctx2;
  csi::v1::ListVolumesRequest negative;
  negative.set_max_entries(-1);
  EXPECT_CODE(service_->ListVolumes(&ctx2, &negative, &resp), INVALID_ARGUMENT);
}

// ---- GetCapacity / capabilities -----------------------------------------

TEST_F(ControllerServiceTest, GetCapacity) {
  backend_->SetAvailableBytes(10 * kMiB + 123);
  grpc::ServerContext ctx;
  csi::v1::GetCapacityRequest r;
  *r.add_volume_capabilities() = testing::MountCapability();
  csi::v1::GetCapacityResponse resp;
  ASSERT_TRUE(service_->GetCapacity(&ctx, &r, &resp).ok());
  EXPECT_EQ(resp.available_capacity(), static_cast<int64_t>(10 * kMiB)) << "whole allocation units only";
  EXPECT_EQ(resp.minimum_volume_size().value(), static_cast<int64_t>(kMiB));

  csi::v1::GetCapacityRequest unsupported;
  *unsupported.add_volume_capabilities() = testing::MountCapability("", Mode::MULTI_NODE_MULTI_WRITER);
  ASSERT_TRUE(service_->GetCapacity(&ctx, &unsupported, &resp).ok());
  EXPECT_EQ(resp.available_capacity(), 0);

  csi::v1::GetCapacityRequest bad_param;
  (*bad_param.mutable_parameters())["color"] = "blue";
  grpc::Status st = service_->GetCapacity(&ctx, &bad_param, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("color"));
}

// external-provisioner v3.x asks with `mount {}` and access mode UNKNOWN
// (issue #20): what the CO leaves out is "not specified", never "cannot be
// made"; what it does specify still counts.
TEST_F(ControllerServiceTest, GetCapacityTreatsUnspecifiedPartsAsAnyValue) {
  backend_->SetAvailableBytes(10 * kMiB);
  grpc::ServerContext ctx;
  csi::v1::GetCapacityResponse resp;

  csi::v1::GetCapacityRequest old_provisioner;
  auto* cap = old_provisioner.add_volume_capabilities();
  cap->mutable_mount();
  cap->mutable_access_mode()->set_mode(Mode::UNKNOWN);
  ASSERT_TRUE(service_->GetCapacity(&ctx, &old_provisioner, &resp).ok());
  EXPECT_EQ(resp.available_capacity(), static_cast<int64_t>(10 * kMiB)) << "mount {} with mode UNKNOWN";

  csi::v1::GetCapacityRequest no_mode;
  no_mode.add_volume_capabilities()->mutable_block();
  ASSERT_TRUE(service_->GetCapacity(&ctx, &no_mode, &resp).ok());
  EXPECT_EQ(resp.available_capacity(), static_cast<int64_t>(10 * kMiB)) << "block, no access mode";

  csi::v1::GetCapacityRequest no_type;
  no_type.add_volume_capabilities()->mutable_access_mode()->set_mode(Mode::MULTI_NODE_MULTI_WRITER);
  ASSERT_TRUE(service_->GetCapacity(&ctx, &no_type, &resp).ok());
  EXPECT_EQ(resp.available_capacity(), static_cast<int64_t>(10 * kMiB))
      << "no access type: a raw block volume can be shared by several writers";

  csi::v1::GetCapacityRequest empty_capability;
  empty_capability.add_volume_capabilities();
  ASSERT_TRUE(service_->GetCapacity(&ctx, &empty_capability, &resp).ok());
  EXPECT_EQ(resp.available_capacity(), static_cast<int64_t>(10 * kMiB));

  // What is specified still decides: an unsupported filesystem with an
  // unspecified mode cannot be made.
  csi::v1::GetCapacityRequest bad_fs;
  bad_fs.add_volume_capabilities()->mutable_mount()->set_fs_type("ntfs");
  ASSERT_TRUE(service_->GetCapacity(&ctx, &bad_fs, &resp).ok());
  EXPECT_EQ(resp.available_capacity(), 0);
}

TEST_F(ControllerServiceTest, ControllerCapabilitiesAreExactlyTheAdvertisedSet) {
  using Rpc = csi::v1::ControllerServiceCapability::RPC;
  grpc::ServerContext ctx;
  csi::v1::ControllerGetCapabilitiesRequest r;
  csi::v1::ControllerGetCapabilitiesResponse resp;
  ASSERT_TRUE(service_->ControllerGetCapabilities(&ctx, &r, &resp).ok());
  std::set<int> got;
  for (const auto& c : resp.capabilities()) got.insert(c.rpc().type());
  std::set<int> want{Rpc::CREATE_DELETE_VOLUME,
                     Rpc::PUBLISH_UNPUBLISH_VOLUME,
                     Rpc::LIST_VOLUMES,
                     Rpc::LIST_VOLUMES_PUBLISHED_NODES,
                     Rpc::GET_CAPACITY,
                     Rpc::CREATE_DELETE_SNAPSHOT,
                     Rpc::LIST_SNAPSHOTS,
                     Rpc::CLONE_VOLUME,
                     Rpc::EXPAND_VOLUME,
                     Rpc::PUBLISH_READONLY,
                     Rpc::GET_VOLUME,
                     Rpc::VOLUME_CONDITION,
                     Rpc::SINGLE_NODE_MULTI_WRITER};
  EXPECT_EQ(got, want);
}

// ---- Snapshots ----------------------------------------------------------

// The controller's part of CreateSnapshot: the backend's record mapped into
// the response, the backend's ALREADY_EXISTS kept and named, a missing
// source NOT_FOUND naming it, bad input refused before any backend call.
// Idempotency by name is the backend's (on the real local backend:
// controller conformance SnapshotRules), so the fake has none to lend.
TEST_F(ControllerServiceTest, CreateSnapshotMapsTheBackendsAnswers) {
  std::string a = MakeVolume("pvc-snap-a");
  csi::v1::CreateSnapshotResponse first;
  ASSERT_TRUE(CreateSnapshot(a, "snap-x", &first).ok());
  EXPECT_TRUE(first.snapshot().ready_to_use());
  EXPECT_EQ(first.snapshot().size_bytes(), static_cast<int64_t>(10 * kMiB));
  EXPECT_EQ(first.snapshot().source_volume_id(), a);
  EXPECT_EQ(first.snapshot().creation_time().seconds(), 1700000100) << "the backend's creation time";
  backend_->FailNext("CreateSnapshot", AlreadyExists("taken by another source volume"));
  grpc::Status st = CreateSnapshot(a, "snap-x");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(st.error_message(), HasSubstr("snap-x"));
  st = CreateSnapshot("vol-ghost", "snap-y");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("vol-ghost"));
  const int calls = backend_->Calls("CreateSnapshot");
  EXPECT_CODE(CreateSnapshot(a, ""), INVALID_ARGUMENT);
  EXPECT_CODE(CreateSnapshot("", "snap-z"), INVALID_ARGUMENT);
  EXPECT_EQ(backend_->Calls("CreateSnapshot"), calls) << "bad input reached the backend";

  grpc::ServerContext ctx;
  csi::v1::CreateSnapshotRequest with_params;
  with_params.set_source_volume_id(a);
  with_params.set_name("snap-p");
  (*with_params.mutable_parameters())["csi.storage.k8s.io/volumesnapshot/name"] = "s";
  csi::v1::CreateSnapshotResponse resp;
  EXPECT_TRUE(service_->CreateSnapshot(&ctx, &with_params, &resp).ok());
  (*with_params.mutable_parameters())["speed"] = "fast";
  st = service_->CreateSnapshot(&ctx, &with_params, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("speed"));
}

TEST_F(ControllerServiceTest, DeleteSnapshotUnknownIsOk) {
  std::string a = MakeVolume("pvc-snapdel");
  csi::v1::CreateSnapshotResponse snap;
  ASSERT_TRUE(CreateSnapshot(a, "snap-del", &snap).ok());
  auto del = [&](const std::string& id) {
    grpc::ServerContext ctx;
    csi::v1::DeleteSnapshotRequest r;
    r.set_snapshot_id(id);
    csi::v1::DeleteSnapshotResponse resp;
    return service_->DeleteSnapshot(&ctx, &r, &resp);
  };
  EXPECT_TRUE(del(snap.snapshot().snapshot_id()).ok());
  EXPECT_TRUE(del(snap.snapshot().snapshot_id()).ok());
  EXPECT_TRUE(del("snap-ghost").ok());
  EXPECT_CODE(del(""), INVALID_ARGUMENT);
  EXPECT_FALSE(backend_->GetSnapshot(snap.snapshot().snapshot_id()).ok());
}

TEST_F(ControllerServiceTest, ListSnapshotsByIdBySourceAndPaged) {
  std::string a = MakeVolume("pvc-ls-a"), b = MakeVolume("pvc-ls-b");
  std::vector<std::string> of_a;
  for (int i = 0; i < 3; ++i) {
    csi::v1::CreateSnapshotResponse s;
    ASSERT_TRUE(CreateSnapshot(a, "snap-a" + std::to_string(i), &s).ok());
    of_a.push_back(s.snapshot().snapshot_id());
  }
  csi::v1::CreateSnapshotResponse of_b;
  ASSERT_TRUE(CreateSnapshot(b, "snap-b", &of_b).ok());
  auto list = [&](const std::string& id, const std::string& source, int max, const std::string& token,
                  csi::v1::ListSnapshotsResponse* resp) {
    grpc::ServerContext ctx;
    csi::v1::ListSnapshotsRequest r;
    r.set_snapshot_id(id);
    r.set_source_volume_id(source);
    r.set_max_entries(max);
    r.set_starting_token(token);
    return service_->ListSnapshots(&ctx, &r, resp);
  };
  csi::v1::ListSnapshotsResponse resp;
  ASSERT_TRUE(list(of_b.snapshot().snapshot_id(), "", 0, "", &resp).ok());
  ASSERT_EQ(resp.entries_size(), 1);
  EXPECT_EQ(resp.entries(0).snapshot().source_volume_id(), b);

  resp.Clear();
  ASSERT_TRUE(list("snap-ghost", "", 0, "", &resp).ok()) << "an unknown id is an empty list, not NOT_FOUND";
  EXPECT_EQ(resp.entries_size(), 0);
  resp.Clear();
  ASSERT_TRUE(list(of_b.snapshot().snapshot_id(), a, 0, "", &resp).ok());
  EXPECT_EQ(resp.entries_size(), 0) << "id and source must both match";

  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    resp.Clear();
    ASSERT_TRUE(list("", a, 2, token, &resp).ok());
    for (const auto& e : resp.entries()) seen.push_back(e.snapshot().snapshot_id());
    token = resp.next_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 2);
  std::sort(seen.begin(), seen.end());
  std::sort(of_a.begin(), of_a.end());
  EXPECT_EQ(seen, of_a);

  resp.Clear();
  ASSERT_TRUE(list("", "", 0, "", &resp).ok());
  EXPECT_EQ(resp.entries_size(), 4);
  backend_->FailNext("ListSnapshots", Aborted("the backend does not know this token"));
  EXPECT_CODE(list("", "", 0, "zzz", &resp), ABORTED);
  EXPECT_CODE(list("", "", -3, "", &resp), INVALID_ARGUMENT);
}

// ---- ControllerExpandVolume ---------------------------------------------

TEST_F(ControllerServiceTest, ExpandGrowsRoundsAndSaysWhetherTheNodeMustGrow) {
  std::string id = MakeVolume("pvc-grow");
  csi::v1::ControllerExpandVolumeResponse resp;
  auto mount = testing::MountCapability();
  ASSERT_TRUE(Expand(id, 20 * kMiB + 1, 0, &mount, &resp).ok());
  EXPECT_EQ(resp.capacity_bytes(), static_cast<int64_t>(21 * kMiB));
  EXPECT_TRUE(resp.node_expansion_required());
  auto record = backend_->GetVolume(id);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->size_bytes, 21 * kMiB);

  auto block = testing::BlockCapability();
  ASSERT_TRUE(Expand(id, 30 * kMiB, 0, &block, &resp).ok());
  EXPECT_FALSE(resp.node_expansion_required());
  EXPECT_EQ(resp.capacity_bytes(), static_cast<int64_t>(30 * kMiB));

  int calls = backend_->Calls("ExpandVolume");
  ASSERT_TRUE(Expand(id, 30 * kMiB, 0, &block, &resp).ok()) << "same size again";
  EXPECT_EQ(resp.capacity_bytes(), static_cast<int64_t>(30 * kMiB));
  ASSERT_TRUE(Expand(id, 5 * kMiB, 0, &block, &resp).ok()) << "already larger than required";
  EXPECT_EQ(resp.capacity_bytes(), static_cast<int64_t>(30 * kMiB));
  EXPECT_EQ(backend_->Calls("ExpandVolume"), calls);
}

TEST_F(ControllerServiceTest, ExpandErrors) {
  std::string id = MakeVolume("pvc-grow-err");
  csi::v1::ControllerExpandVolumeResponse resp;
  grpc::Status st = Expand(id, 2 * kMiB, 4 * kMiB, nullptr, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE) << "10 MiB cannot shrink under a 4 MiB limit";
  EXPECT_THAT(st.error_message(), HasSubstr(id));
  EXPECT_CODE(Expand(id, 21 * kMiB - 1, 20 * kMiB + 1, nullptr, &resp), OUT_OF_RANGE);
  st = Expand("vol-ghost", 20 * kMiB, 0, nullptr, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("vol-ghost"));
  EXPECT_CODE(Expand("", 20 * kMiB, 0, nullptr, &resp), INVALID_ARGUMENT);
  EXPECT_CODE(Expand(id, 0, 0, nullptr, &resp), INVALID_ARGUMENT);
  grpc::ServerContext ctx;
  csi::v1::ControllerExpandVolumeRequest no_range;
  no_range.set_volume_id(id);
  EXPECT_CODE(service_->ControllerExpandVolume(&ctx, &no_range, &resp), INVALID_ARGUMENT);
  auto rwx_mount = testing::MountCapability("", Mode::MULTI_NODE_MULTI_WRITER);
  EXPECT_CODE(Expand(id, 20 * kMiB, 0, &rwx_mount, &resp), INVALID_ARGUMENT);
}

TEST_F(ControllerServiceTest, IdsTheBackendCallsMalformedAreMissingVolumesAndSnapshots) {
  // csi-sanity and hand-written PVs send ids of any shape.
  EXPECT_TRUE(Delete("some-foreign-id").ok());
  EXPECT_TRUE(Unpublish("some-foreign-id", "n1").ok());
  grpc::Status st = Publish("some-foreign-id", "n1");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("some-foreign-id"));
  // ControllerExpand cannot tell such an id from a static PV's handle (the
  // call carries no attributes): it leaves the size check to the node,
  // which knows the volume or answers NOT_FOUND.
  csi::v1::ControllerExpandVolumeResponse expand;
  ASSERT_TRUE(Expand("some-foreign-id", kMiB, 0, nullptr, &expand).ok());
  EXPECT_TRUE(expand.node_expansion_required());
  EXPECT_CODE(CreateSnapshot("some-foreign-id", "snap-n"), NOT_FOUND);
  auto restore = CreateRequest("pvc-foreign-snap");
  restore.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id("foreign-snap");
  EXPECT_CODE(Create(restore), NOT_FOUND);
  grpc::ServerContext ctx;
  csi::v1::DeleteSnapshotRequest del;
  del.set_snapshot_id("foreign-snap");
  csi::v1::DeleteSnapshotResponse del_resp;
  EXPECT_TRUE(service_->DeleteSnapshot(&ctx, &del, &del_resp).ok());
  csi::v1::ListSnapshotsRequest list;
  list.set_snapshot_id("foreign-snap");
  csi::v1::ListSnapshotsResponse list_resp;
  EXPECT_TRUE(service_->ListSnapshots(&ctx, &list, &list_resp).ok());
  EXPECT_EQ(list_resp.entries_size(), 0);
}

TEST_F(ControllerServiceTest, OnlyNotFoundFromTheBackendMeansMissing) {
  // Any other code is a failure to report, never "already gone": a delete
  // the backend refused (here: a half-given cephx secret) must not be
  // answered OK, or the CO forgets a volume that still exists.
  const std::string id = MakeVolume("pvc-refused");
  backend_->FailNext("GetVolume", InvalidArgument("ceph secret has no \"userID\""));
  grpc::Status st = Delete(id);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr(id));
  backend_->FailNext("DeleteVolume", InvalidArgument("refused"));
  EXPECT_EQ(Delete(id).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  backend_->FailNext("GetVolume", InvalidArgument("refused"));
  EXPECT_EQ(Publish(id, "n1").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Delete(id).ok());
  EXPECT_EQ(backend_->Calls("DeleteVolume"), 2) << "the refused delete, then the real one";
}

TEST_F(ControllerServiceTest, EachRequestsSecretsReachTheBackendWithThatRequest) {
  const std::string id = MakeVolume("pvc-secrets");
  const size_t before = backend_->SecretsSeen().size();
  auto publish = PublishRequest(id, "n1", testing::MountCapability(), false);
  (*publish.mutable_secrets())["userID"] = "publisher";
  ASSERT_TRUE(Publish(publish).ok());
  grpc::ServerContext ctx;
  csi::v1::DeleteVolumeRequest del;
  del.set_volume_id("vol-999");
  (*del.mutable_secrets())["userID"] = "provisioner";
  csi::v1::DeleteVolumeResponse deleted;
  ASSERT_TRUE(service_->DeleteVolume(&ctx, &del, &deleted).ok());
  auto seen = backend_->SecretsSeen();
  ASSERT_EQ(seen.size(), before + 2);
  EXPECT_EQ(seen[before].at("userID"), "publisher");
  EXPECT_EQ(seen[before + 1].at("userID"), "provisioner");
}

TEST_F(ControllerServiceTest, ARequestWithSecretsIsServedByTheBackendBoundToThem) {
  auto view = std::make_shared<testing::FakeBackend>();
  backend_->ServeSecretsWith(view);
  auto create = CreateRequest("pvc-bound", 10 * kMiB);
  (*create.mutable_secrets())["userID"] = "provisioner";
  csi::v1::CreateVolumeResponse created;
  ASSERT_TRUE(Create(create, &created).ok());
  EXPECT_EQ(view->Calls("CreateVolume"), 1);
  EXPECT_EQ(backend_->Calls("CreateVolume"), 0);
  // Without secrets, the shared backend: it has no such volume.
  EXPECT_EQ(Publish(created.volume().volume_id(), "n1").error_code(), grpc::StatusCode::NOT_FOUND);
  auto publish = PublishRequest(created.volume().volume_id(), "n1", testing::MountCapability(), false);
  (*publish.mutable_secrets())["userID"] = "publisher";
  ASSERT_TRUE(Publish(publish).ok());
  EXPECT_EQ(view->Calls("GrantAccess"), 1);
}

// ---- ControllerGetVolume ------------------------------------------------

TEST_F(ControllerServiceTest, GetVolumeReportsPublishedNodesAndCondition) {
  std::string id = MakeVolume("pvc-get", {{"fsType", "xfs"}});
  ASSERT_TRUE(Publish(id, "n1").ok());
  auto get = [&](const std::string& vid, csi::v1::ControllerGetVolumeResponse* resp) {
    grpc::ServerContext ctx;
    csi::v1::ControllerGetVolumeRequest r;
    r.set_volume_id(vid);
    return service_->ControllerGetVolume(&ctx, &r, resp);
  };
  csi::v1::ControllerGetVolumeResponse resp;
  ASSERT_TRUE(get(id, &resp).ok());
  EXPECT_EQ(resp.volume().volume_id(), id);
  EXPECT_EQ(resp.volume().volume_context().at("fsType"), "xfs");
  ASSERT_EQ(resp.status().published_node_ids_size(), 1);
  EXPECT_EQ(resp.status().published_node_ids(0), "n1");
  EXPECT_FALSE(resp.status().volume_condition().abnormal());

  // The controller's part of the node list, from grants it did not make: a
  // grant naming only our initiator IQN is that node's, a second grant of n1
  // lists n1 once, a foreign initiator is no node of ours.
  backend_->AddRawGrant(id, {InitiatorIqnForNode("n2"), "", false, "", false});
  backend_->AddRawGrant(id, {InitiatorIqnForNode("n1"), "", true, "", false});
  backend_->AddRawGrant(id, {"iqn.1994-05.com.example:someone-else", "", false, "", false});
  resp.Clear();
  ASSERT_TRUE(get(id, &resp).ok());
  EXPECT_EQ(
      std::vector<std::string>(resp.status().published_node_ids().begin(), resp.status().published_node_ids().end()),
      (std::vector<std::string>{"n1", "n2"}));

  backend_->SetHealth(id, {true, "image missing from the pool"});
  resp.Clear();
  ASSERT_TRUE(get(id, &resp).ok());
  EXPECT_TRUE(resp.status().volume_condition().abnormal());
  EXPECT_EQ(resp.status().volume_condition().message(), "image missing from the pool");

  grpc::Status st = get("vol-ghost", &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("vol-ghost"));
  EXPECT_CODE(get("", &resp), INVALID_ARGUMENT);
}

}  // namespace
}  // namespace blockcsi
