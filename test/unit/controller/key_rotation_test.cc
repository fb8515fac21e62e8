// Key rotation (controller/key_rotation.h and the VolumeKeys service) against
// the in-memory FakeBackend: volumes made through the controller under one
// class's KEK are rewrapped under a new one with the same data key; another
// class's volume and a failed store are left as they are and reported; a dry
// run stores nothing; a second run finds everything new.
#include "controller/key_rotation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "controller/controller_service.h"
#include "controller/volume_keys_service.h"
#include "support/csi_requests.h"
#include "support/fake_backend.h"

namespace blockcsi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Kind = RewrapOutcome::Kind;
constexpr char kOld[] = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
constexpr char kOtherClass[] = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
constexpr char kNew[] = "QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=";

SecretBytes Kek(const char* text) { return std::move(ParseKeyEncryptionKey(text, "test")).value(); }

class KeyRotationTest : public ::testing::Test {
 protected:
  KeyRotationTest() {
    a1_ = Create("pvc-a1", kOld);
    a2_ = Create("pvc-a2", kOld);
    other_ = Create("pvc-b", kOtherClass);
    plain_ = Create("pvc-plain", nullptr);
    grpc::ServerContext ctx;
    csi::v1::CreateSnapshotRequest r;
    r.set_source_volume_id(a1_);
    r.set_name("snap-a1");
    csi::v1::CreateSnapshotResponse out;
    EXPECT_TRUE(service_.CreateSnapshot(&ctx, &r, &out).ok());
    snap_ = out.snapshot().snapshot_id();
  }
  std::string Create(const std::string& name, const char* kek) {
    auto r = testing::CreateRequest(name, 1 << 20);
    if (kek != nullptr) {
      (*r.mutable_parameters())["encrypted"] = "true";
      (*r.mutable_secrets())["encryptionKey"] = kek;
    }
    grpc::ServerContext ctx;
    csi::v1::CreateVolumeResponse out;
    EXPECT_TRUE(service_.CreateVolume(&ctx, &r, &out).ok());
    return out.volume().volume_id();
  }
  // The data key of a volume (or, by its source volume's id, a snapshot)
  // under `kek`; "" when it does not open.
  std::string DataKey(const std::string& id, const char* kek) {
    auto v = backend_->GetVolume(id);
    std::string wrapped = v.ok() ? v->wrapped_data_key : backend_->GetSnapshot(id)->wrapped_data_key;
    const std::string bound = v.ok() ? id : backend_->GetSnapshot(id)->source_volume_id;
    auto key = UnwrapDataKey(Kek(kek), wrapped, bound);
    return key.ok() ? key->bytes() : "";
  }
  static std::map<std::string, Kind> Outcomes(const RewrapReport& report) {
    std::map<std::string, Kind> out;
    for (const auto& o : report.outcomes) out[o.id] = o.kind;
    return out;
  }

  std::shared_ptr<testing::FakeBackend> backend_ = std::make_shared<testing::FakeBackend>();
  ControllerService service_{backend_, ControllerOptions{}};
  std::string a1_, a2_, other_, plain_, snap_;
};

TEST_F(KeyRotationTest, EveryKeyOfTheClassIsRewrappedWithTheSameDataKey) {
  const std::string a1_key = DataKey(a1_, kOld);
  ASSERT_FALSE(a1_key.empty());
  const std::string other_wrapped = backend_->GetVolume(other_)->wrapped_data_key;

  auto report = RewrapDataKeys(*backend_, Kek(kOld), Kek(kNew), /*dry_run=*/false);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(
      Outcomes(*report),
      (std::map<std::string, Kind>{
          {a1_, Kind::kRewrapped}, {a2_, Kind::kRewrapped}, {other_, Kind::kNotOpened}, {snap_, Kind::kRewrapped}}));
  EXPECT_TRUE(report->complete());
  EXPECT_FALSE(report->all_opened());
  EXPECT_EQ(DataKey(a1_, kNew), a1_key);
  EXPECT_EQ(DataKey(a1_, kOld), "");
  EXPECT_EQ(DataKey(snap_, kNew), a1_key);
  EXPECT_FALSE(DataKey(a2_, kNew).empty());
  EXPECT_EQ(backend_->GetVolume(other_)->wrapped_data_key, other_wrapped);  // left as it is

  auto again = RewrapDataKeys(*backend_, Kek(kOld), Kek(kNew), false);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Outcomes(*again)[a1_], Kind::kAlreadyNew);
  EXPECT_EQ(Outcomes(*again)[snap_], Kind::kAlreadyNew);
  EXPECT_FALSE(Outcomes(*again).contains(plain_));
}

TEST_F(KeyRotationTest, ADryRunStoresNothing) {
  const int sets = backend_->Calls("SetWrappedDataKey");
  auto report = RewrapDataKeys(*backend_, Kek(kOld), Kek(kNew), /*dry_run=*/true);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(Outcomes(*report)[a1_], Kind::kRewrapped);
  EXPECT_EQ(backend_->Calls("SetWrappedDataKey"), sets);
  EXPECT_FALSE(DataKey(a1_, kOld).empty());
}

TEST_F(KeyRotationTest, AKeyThatCannotBeStoredStaysUnderTheOldKeyAndIsReported) {
  backend_->FailNext("SetWrappedDataKey", Unavailable("storage host down"));
  auto report = RewrapDataKeys(*backend_, Kek(kOld), Kek(kNew), false);
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->complete());
  EXPECT_EQ(Outcomes(*report)[a1_], Kind::kFailed);  // the first one listed
  EXPECT_FALSE(DataKey(a1_, kOld).empty());
  EXPECT_FALSE(DataKey(a2_, kNew).empty());  // the others went on
}

TEST_F(KeyRotationTest, TheServiceRefusesUnusableKeysWithoutQuotingThem) {
  VolumeKeysService keys(backend_);
  grpc::ServerContext ctx;
  keys::v1::RewrapDataKeysRequest request;
  keys::v1::RewrapDataKeysResponse response;
  request.set_old_encryption_key(kOld);
  request.set_new_encryption_key("bm90LWEta2V5");
  grpc::Status st = keys.RewrapDataKeys(&ctx, &request, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("new_encryption_key"));
  EXPECT_THAT(st.error_message(), Not(HasSubstr("bm90LWEta2V5")));
  request.set_new_encryption_key(kOld);
  EXPECT_EQ(keys.RewrapDataKeys(&ctx, &request, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  request.set_new_encryption_key(kNew);
  ASSERT_TRUE(keys.RewrapDataKeys(&ctx, &request, &response).ok());
  ASSERT_EQ(response.keys_size(), 4);
  for (const auto& k : response.keys()) {
    EXPECT_EQ(k.outcome(), k.id() == other_ ? keys::v1::RewrappedKey::NOT_OPENED : keys::v1::RewrappedKey::REWRAPPED);
    EXPECT_EQ(k.snapshot(), k.id() == snap_);
  }
}

}  // namespace
}  // namespace blockcsi
