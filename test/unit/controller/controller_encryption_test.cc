// The controller's half of encryption at rest against the in-memory
// FakeBackend: the class's key from the provisioner secret, the data key made,
// wrapped with the volume's id and stored only wrapped, volume_context and
// publish_context, clones and restores keeping their source's key, and the
// KEK and data key kept out of every answer and log line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/logging.h"
#include "contract/volume_key.h"
#include "controller/controller_service.h"
#include "support/csi_capabilities.h"
#include "support/csi_requests.h"
#include "support/fake_backend.h"

namespace blockcsi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
constexpr int64_t kMiB = 1 << 20;
// base64 of the 32 bytes 0x00..0x1f, and of 0x20..0x3f.
constexpr char kKek[] = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
constexpr char kOtherKek[] = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

SecretBytes Kek(const char* text) {
  auto kek = ParseKeyEncryptionKey(text, "test");
  EXPECT_TRUE(kek.ok());
  return std::move(kek).value();
}

class ControllerEncryptionTest : public ::testing::Test {
 protected:
  ControllerEncryptionTest() : service_(backend_, ControllerOptions{}) { SetLogCaptureForTest(&logs_); }
  ~ControllerEncryptionTest() override { SetLogCaptureForTest(nullptr); }

  // A CreateVolume of `name` in a class with `encrypted`, carrying `kek` (if
  // any) in the provisioner secret.
  static csi::v1::CreateVolumeRequest Request(const std::string& name, const char* encrypted, const char* kek) {
    auto r = testing::CreateRequest(name, 10 * kMiB);
    if (encrypted != nullptr) (*r.mutable_parameters())["encrypted"] = encrypted;
    if (kek != nullptr) (*r.mutable_secrets())["encryptionKey"] = kek;
    return r;
  }
  grpc::Status Create(const csi::v1::CreateVolumeRequest& r, csi::v1::CreateVolumeResponse* out) {
    grpc::ServerContext ctx;
    return service_.CreateVolume(&ctx, &r, out);
  }
  std::string MustCreate(const csi::v1::CreateVolumeRequest& r) {
    csi::v1::CreateVolumeResponse out;
    grpc::Status st = Create(r, &out);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out.volume().volume_id();
  }
  grpc::Status Publish(const std::string& id, csi::v1::ControllerPublishVolumeResponse* out) {
    grpc::ServerContext ctx;
    auto r = testing::PublishRequest(id, "node-1");
    return service_.ControllerPublishVolume(&ctx, &r, out);
  }
  std::string Snapshot(const std::string& volume_id) {
    grpc::ServerContext ctx;
    csi::v1::CreateSnapshotRequest r;
    r.set_source_volume_id(volume_id);
    r.set_name("snap-of-" + volume_id);
    csi::v1::CreateSnapshotResponse out;
    EXPECT_TRUE(service_.CreateSnapshot(&ctx, &r, &out).ok());
    return out.snapshot().snapshot_id();
  }
  std::string WrappedKeyOf(const std::string& id) {
    auto record = backend_->GetVolume(id);
    EXPECT_TRUE(record.ok());
    return record.ok() ? record->wrapped_data_key : "";
  }
  std::string DataKeyOf(const std::string& id, const char* kek = kKek) {
    auto key = UnwrapDataKey(Kek(kek), WrappedKeyOf(id), id);
    EXPECT_TRUE(key.ok()) << key.status().ToString();
    return key.ok() ? key->bytes() : "";
  }

  std::shared_ptr<testing::FakeBackend> backend_ = std::make_shared<testing::FakeBackend>();
  std::string logs_;
  ControllerService service_;
};

TEST_F(ControllerEncryptionTest, AnEncryptedClassWithoutAUsableKeyIsRefusedBeforeTheBackend) {
  for (const char* kek : {static_cast<const char*>(nullptr), "", "bm90LTMyLWJ5dGVz", "AAECAwQFBgcICQoLDA0O*"}) {
    csi::v1::CreateVolumeResponse out;
    grpc::Status st = Create(Request("pvc-1", "true", kek), &out);
    ASSERT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << (kek ? kek : "(none)");
    EXPECT_THAT(st.error_message(), HasSubstr("encryptionKey"));
    EXPECT_THAT(st.error_message(), HasSubstr("pvc-1"));
    if (kek != nullptr && *kek != '\0') {
      EXPECT_THAT(st.error_message(), Not(HasSubstr(kek)));
    }
  }
  csi::v1::CreateVolumeResponse out;
  EXPECT_THAT(Create(Request("pvc-1", "true", nullptr), &out).error_message(), HasSubstr("encrypted"));
  EXPECT_EQ(Create(Request("pvc-1", "yes", kKek), &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(backend_->Calls("CreateVolume"), 0);
}

TEST_F(ControllerEncryptionTest, AnEncryptedVolumeCarriesOnlyItsWrappedKeyToTheNode) {
  csi::v1::CreateVolumeResponse created;
  ASSERT_TRUE(Create(Request("pvc-1", "true", kKek), &created).ok());
  const std::string id = created.volume().volume_id();
  EXPECT_EQ(created.volume().volume_context().at("encryption"), "luks2");
  const std::string wrapped = WrappedKeyOf(id);
  ASSERT_EQ(wrapped.rfind("v1.", 0), 0u) << wrapped;
  const std::string data_key = DataKeyOf(id);
  ASSERT_EQ(data_key.size(), kDataKeyBytes);
  // Bound to its volume: another id does not open it.
  EXPECT_EQ(UnwrapDataKey(Kek(kKek), wrapped, id + "x").status().code(), StatusCode::kPermissionDenied);

  csi::v1::ControllerPublishVolumeResponse published;
  ASSERT_TRUE(Publish(id, &published).ok());
  EXPECT_EQ(published.publish_context().at("wrappedDataKey"), wrapped);
  for (const auto& [k, v] : published.publish_context()) EXPECT_THAT(v, Not(HasSubstr(data_key))) << k;
  EXPECT_THAT(logs_, Not(HasSubstr(kKek)));
  EXPECT_THAT(logs_, Not(HasSubstr(data_key)));
  EXPECT_THAT(logs_, Not(HasSubstr(wrapped)));

  // Each volume has its own data key.
  EXPECT_NE(DataKeyOf(MustCreate(Request("pvc-2", "true", kKek))), data_key);
}

TEST_F(ControllerEncryptionTest, AnUnencryptedClassHasNoKeyAnywhere) {
  for (const char* encrypted : {static_cast<const char*>(nullptr), "false"}) {
    csi::v1::CreateVolumeResponse created;
    ASSERT_TRUE(
        Create(Request(std::string("pvc-") + (encrypted ? encrypted : "none"), encrypted, kKek), &created).ok());
    EXPECT_FALSE(created.volume().volume_context().contains("encryption"));
    EXPECT_EQ(WrappedKeyOf(created.volume().volume_id()), "");
    csi::v1::ControllerPublishVolumeResponse published;
    ASSERT_TRUE(Publish(created.volume().volume_id(), &published).ok());
    EXPECT_FALSE(published.publish_context().contains("wrappedDataKey"));
  }
  EXPECT_EQ(backend_->Calls("SetWrappedDataKey"), 0);
}

TEST_F(ControllerEncryptionTest, AVolumeWhoseKeyWasNotStoredIsNotPublished) {
  backend_->FailNext("SetWrappedDataKey", Unavailable("agent restarting"));
  csi::v1::CreateVolumeResponse created;
  EXPECT_EQ(Create(Request("pvc-1", "true", kKek), &created).error_code(), grpc::StatusCode::UNAVAILABLE);
  // The fake made vol-1 and then could not key it (a crash between the steps).
  csi::v1::ControllerPublishVolumeResponse published;
  grpc::Status st = Publish("vol-1", &published);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("no data key"));
  EXPECT_EQ(backend_->Calls("GrantAccess"), 0);
}

TEST_F(ControllerEncryptionTest, AKeyThatCannotBeStoredForGoodLeavesNoVolume) {
  backend_->FailNext("SetWrappedDataKey", Internal("pool record not written"));
  csi::v1::CreateVolumeResponse created;
  EXPECT_EQ(Create(Request("pvc-1", "true", kKek), &created).error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_FALSE(backend_->GetVolume("vol-1").ok()) << "the keyless volume survived a final failure";
  EXPECT_EQ(backend_->Calls("DeleteVolume"), 1);
}

TEST_F(ControllerEncryptionTest, ClonesAndRestoresKeepTheirSourcesDataKeyRewrappedForTheirId) {
  const std::string source = MustCreate(Request("pvc-src", "true", kKek));
  const std::string snapshot = Snapshot(source);
  auto clone = Request("pvc-clone", "true", kKek);
  clone.mutable_volume_content_source()->mutable_volume()->set_volume_id(source);
  auto restore = Request("pvc-restore", "true", kKek);
  restore.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(snapshot);
  for (const auto& request : {clone, restore}) {
    const std::string id = MustCreate(request);
    EXPECT_NE(WrappedKeyOf(id), WrappedKeyOf(source)) << request.name();
    EXPECT_EQ(DataKeyOf(id), DataKeyOf(source)) << request.name();
  }
}

TEST_F(ControllerEncryptionTest, AClonesClassMustMatchItsSourcesEncryptionAndKey) {
  const std::string encrypted = MustCreate(Request("pvc-enc", "true", kKek));
  const std::string plain = MustCreate(Request("pvc-plain", nullptr, nullptr));
  struct Case {
    std::string source;
    const char* encrypted;
    const char* kek;
  };
  for (const Case& c : {Case{encrypted, nullptr, nullptr}, Case{encrypted, "false", nullptr}, Case{plain, "true", kKek},
                        Case{encrypted, "true", kOtherKek}}) {
    auto r = Request("pvc-new", c.encrypted, c.kek);
    r.mutable_volume_content_source()->mutable_volume()->set_volume_id(c.source);
    csi::v1::CreateVolumeResponse out;
    grpc::Status st = Create(r, &out);
    ASSERT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.source << " " << (c.kek ? c.kek : "-");
    EXPECT_THAT(st.error_message(), HasSubstr("pvc-new"));
    EXPECT_THAT(st.error_message(), HasSubstr(c.source));
  }
  EXPECT_EQ(backend_->Calls("CreateVolume"), 2);  // only the two sources
  EXPECT_THAT(logs_, Not(HasSubstr(kOtherKek)));
}

// Sizes: the CSI range and every size reported count what the pod gets
// (the opened mapping); the device is made and grown 16 MiB bigger for the
// LUKS2 header, and limit_bytes bounds the mapping.
constexpr int64_t kHeader = 16 * kMiB;

TEST_F(ControllerEncryptionTest, AnEncryptedVolumesDeviceHoldsTheRequestedBytesPlusItsHeader) {
  auto r = Request("pvc-1", "true", kKek);
  r.mutable_capacity_range()->set_required_bytes(128 * kMiB);
  csi::v1::CreateVolumeResponse out;
  ASSERT_TRUE(Create(r, &out).ok());
  EXPECT_EQ(out.volume().capacity_bytes(), 128 * kMiB);
  auto record = backend_->GetVolume(out.volume().volume_id());
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->size_bytes, static_cast<uint64_t>(128 * kMiB + kHeader));

  auto plain = Request("pvc-plain", nullptr, nullptr);
  plain.mutable_capacity_range()->set_required_bytes(128 * kMiB);
  csi::v1::CreateVolumeResponse plain_out;
  ASSERT_TRUE(Create(plain, &plain_out).ok());
  EXPECT_EQ(backend_->GetVolume(plain_out.volume().volume_id())->size_bytes, static_cast<uint64_t>(128 * kMiB));
}

TEST_F(ControllerEncryptionTest, LimitBytesBoundsWhatThePodGetsNotTheDevice) {
  auto exact = Request("pvc-exact", "true", kKek);
  exact.mutable_capacity_range()->set_required_bytes(128 * kMiB);
  exact.mutable_capacity_range()->set_limit_bytes(128 * kMiB);
  csi::v1::CreateVolumeResponse out;
  ASSERT_TRUE(Create(exact, &out).ok());
  EXPECT_EQ(out.volume().capacity_bytes(), 128 * kMiB);

  // Only a limit: the most the limit allows, header added below it.
  auto limited = Request("pvc-limit", "true", kKek);
  limited.mutable_capacity_range()->set_required_bytes(0);
  limited.mutable_capacity_range()->set_limit_bytes(kMiB + kMiB / 2);
  ASSERT_TRUE(Create(limited, &out).ok());
  EXPECT_EQ(out.volume().capacity_bytes(), kMiB);
  EXPECT_EQ(backend_->GetVolume(out.volume().volume_id())->size_bytes, static_cast<uint64_t>(kMiB + kHeader));

  // No whole granule fits under the limit: refused, the header named.
  limited.set_name("pvc-tiny");
  limited.mutable_capacity_range()->set_limit_bytes(kMiB / 2);
  grpc::Status st = Create(limited, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(st.error_message(), HasSubstr("LUKS2 header"));
}

TEST_F(ControllerEncryptionTest, ExpandGrowsTheDeviceByTheHeaderAndReportsTheMapping) {
  const std::string id = MustCreate(Request("pvc-1", "true", kKek));  // 10 MiB
  grpc::ServerContext ctx;
  csi::v1::ControllerExpandVolumeRequest r;
  r.set_volume_id(id);
  r.mutable_capacity_range()->set_required_bytes(256 * kMiB);
  csi::v1::ControllerExpandVolumeResponse out;
  ASSERT_TRUE(service_.ControllerExpandVolume(&ctx, &r, &out).ok());
  EXPECT_EQ(out.capacity_bytes(), 256 * kMiB);
  EXPECT_TRUE(out.node_expansion_required());
  EXPECT_EQ(backend_->GetVolume(id)->size_bytes, static_cast<uint64_t>(256 * kMiB + kHeader));
  // Again at the size it has: nothing grows (the header is not counted twice).
  ASSERT_TRUE(service_.ControllerExpandVolume(&ctx, &r, &out).ok());
  EXPECT_EQ(out.capacity_bytes(), 256 * kMiB);
  EXPECT_EQ(backend_->Calls("ExpandVolume"), 1);
  // A limit at what the pod has is no shrink; one below it is.
  r.mutable_capacity_range()->set_limit_bytes(256 * kMiB);
  EXPECT_TRUE(service_.ControllerExpandVolume(&ctx, &r, &out).ok());
  r.mutable_capacity_range()->set_required_bytes(200 * kMiB);
  r.mutable_capacity_range()->set_limit_bytes(200 * kMiB);
  EXPECT_EQ(service_.ControllerExpandVolume(&ctx, &r, &out).error_code(), grpc::StatusCode::OUT_OF_RANGE);
}

TEST_F(ControllerEncryptionTest, SnapshotsReportWhatARestoreMustGiveThePod) {
  auto r = Request("pvc-src", "true", kKek);
  r.mutable_capacity_range()->set_required_bytes(64 * kMiB);
  const std::string source = MustCreate(r);
  grpc::ServerContext ctx;
  csi::v1::CreateSnapshotRequest snap;
  snap.set_source_volume_id(source);
  snap.set_name("snap-1");
  csi::v1::CreateSnapshotResponse snapped;
  ASSERT_TRUE(service_.CreateSnapshot(&ctx, &snap, &snapped).ok());
  EXPECT_EQ(snapped.snapshot().size_bytes(), 64 * kMiB);
  // A restore asking for the snapshot's size gets the source's device size,
  // not one more header each generation.
  auto restore = Request("pvc-restore", "true", kKek);
  restore.mutable_capacity_range()->set_required_bytes(snapped.snapshot().size_bytes());
  restore.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(snapped.snapshot().snapshot_id());
  const std::string restored = MustCreate(restore);
  EXPECT_EQ(backend_->GetVolume(restored)->size_bytes, backend_->GetVolume(source)->size_bytes);
}

TEST_F(ControllerEncryptionTest, GetCapacityOfAnEncryptedClassLeavesRoomForTheHeader) {
  backend_->SetAvailableBytes(100 * kMiB);
  grpc::ServerContext ctx;
  csi::v1::GetCapacityRequest r;
  (*r.mutable_parameters())["encrypted"] = "true";
  csi::v1::GetCapacityResponse resp;
  ASSERT_TRUE(service_.GetCapacity(&ctx, &r, &resp).ok());
  EXPECT_EQ(resp.available_capacity(), 100 * kMiB - kHeader);
  backend_->SetAvailableBytes(kHeader / 2);
  ASSERT_TRUE(service_.GetCapacity(&ctx, &r, &resp).ok());
  EXPECT_EQ(resp.available_capacity(), 0);
}

}  // namespace
}  // namespace blockcsi
