// The controller's encryption at rest over the real LocalBackend (its pool
// in a temp directory, the LIO exporter on a temp configfs tree: no daemon):
// a retried CreateVolume keeps its one data key, a create cut between its
// two steps is keyed by the retry, the compare-and-set refuses a key it was
// not shown, and what reaches the disk is the wrapped form only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/local/lio_exporter.h"
#include "backend/local/local_backend.h"
#include "contract/volume_key.h"
#include "controller/controller_service.h"
#include "support/csi_requests.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
constexpr int64_t kMiB = 1 << 20;
constexpr char kKek[] = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

class ControllerEncryptionPoolTest : public ::testing::Test {
 protected:
  ControllerEncryptionPoolTest() { Reopen(); }

  void Reopen() {
    service_.reset();
    backend_.reset();  // releases the pool's lock
    LocalBackendOptions options;
    options.portals = {"127.0.0.1:3260"};
    options.reconcile_interval = std::chrono::milliseconds(0);
    auto backend = LocalBackend::Open(pool_.path(), std::make_shared<LioExporter>(configfs_.path()), options);
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = *backend;
    service_ = std::make_unique<ControllerService>(backend_, ControllerOptions{});
  }
  static csi::v1::CreateVolumeRequest Request(const std::string& name) {
    auto r = testing::CreateRequest(name, 16 * kMiB);
    (*r.mutable_parameters())["encrypted"] = "true";
    (*r.mutable_secrets())["encryptionKey"] = kKek;
    return r;
  }
  csi::v1::Volume MustCreate(const csi::v1::CreateVolumeRequest& r) {
    grpc::ServerContext ctx;
    csi::v1::CreateVolumeResponse out;
    grpc::Status st = service_->CreateVolume(&ctx, &r, &out);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out.volume();
  }
  std::string Wrapped(const std::string& id) {
    auto record = backend_->GetVolume(id);
    EXPECT_TRUE(record.ok()) << record.status().ToString();
    return record.ok() ? record->wrapped_data_key : "";
  }
  std::string DataKey(const std::string& id) {
    auto kek = ParseKeyEncryptionKey(kKek, id);
    auto key = UnwrapDataKey(*kek, Wrapped(id), id);
    EXPECT_TRUE(key.ok()) << key.status().ToString();
    return key.ok() ? key->bytes() : "";
  }

  testing::TempDir pool_;
  testing::TempDir configfs_;
  std::shared_ptr<LocalBackend> backend_;
  std::unique_ptr<ControllerService> service_;
};

TEST_F(ControllerEncryptionPoolTest, ARetriedCreateReturnsTheSameVolumeWithTheSameKeyAfterARestartToo) {
  const csi::v1::Volume first = MustCreate(Request("pvc-1"));
  const std::string wrapped = Wrapped(first.volume_id());
  ASSERT_FALSE(wrapped.empty());
  const csi::v1::Volume again = MustCreate(Request("pvc-1"));
  EXPECT_EQ(again.volume_id(), first.volume_id());
  EXPECT_EQ(Wrapped(first.volume_id()), wrapped);
  Reopen();  // the key is durable in the pool's record
  EXPECT_EQ(MustCreate(Request("pvc-1")).volume_id(), first.volume_id());
  EXPECT_EQ(Wrapped(first.volume_id()), wrapped);
  EXPECT_EQ(again.volume_context().at("encryption"), "luks2");
}

TEST_F(ControllerEncryptionPoolTest, ACreateCutBetweenItsStepsIsKeyedOnceByTheRetry) {
  // The backend's step alone, as a controller that died before keying left it.
  CreateVolumeSpec spec;
  spec.name = "pvc-1";
  spec.size_bytes = 16 * kMiB + volume_key::kLuksHeaderBytes;  // the device holds the header too
  spec.parameters = {{"encrypted", "true"}};
  auto made = backend_->CreateVolume(spec);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ASSERT_EQ(made->wrapped_data_key, "");
  const csi::v1::Volume keyed = MustCreate(Request("pvc-1"));
  EXPECT_EQ(keyed.volume_id(), made->id);
  const std::string key = DataKey(made->id);
  ASSERT_EQ(key.size(), kDataKeyBytes);
  MustCreate(Request("pvc-1"));
  EXPECT_EQ(DataKey(made->id), key);
}

TEST_F(ControllerEncryptionPoolTest, TheKeyIsSetOnlyOverTheOneTheCallerRead) {
  const std::string id = MustCreate(Request("pvc-1")).volume_id();
  const std::string wrapped = Wrapped(id);
  EXPECT_EQ(backend_->SetWrappedDataKey(id, "", "v1.other").code(), StatusCode::kAborted);
  EXPECT_EQ(backend_->SetWrappedDataKey(id, "v1.stale", "v1.other").code(), StatusCode::kAborted);
  EXPECT_EQ(Wrapped(id), wrapped);
  EXPECT_TRUE(backend_->SetWrappedDataKey(id, wrapped, wrapped).ok());  // a retry of a done swap
  EXPECT_EQ(backend_->SetWrappedDataKey("vol-0000000000000000", "", "v1.x").code(), StatusCode::kNotFound);
  EXPECT_EQ(backend_->SetWrappedDataKey(id, wrapped, "v1.bad key\n").code(), StatusCode::kInvalidArgument);

  // A snapshot keeps its volume's key, and its own copy is set the same way.
  auto snapshot = backend_->CreateSnapshot(id, "snap-1");
  ASSERT_TRUE(snapshot.ok());
  EXPECT_EQ(snapshot->wrapped_data_key, wrapped);
  ASSERT_TRUE(backend_->SetWrappedDataKey(snapshot->id, wrapped, "v1.rotated").ok());
  Reopen();
  EXPECT_EQ(backend_->GetSnapshot(snapshot->id)->wrapped_data_key, "v1.rotated");
  EXPECT_EQ(Wrapped(id), wrapped);
}

TEST_F(ControllerEncryptionPoolTest, ThePersistedRecordHoldsOnlyTheWrappedKey) {
  const std::string id = MustCreate(Request("pvc-1")).volume_id();
  const std::string key = DataKey(id);
  ASSERT_EQ(key.size(), kDataKeyBytes);
  auto kek = ParseKeyEncryptionKey(kKek, id);
  std::string everything;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(pool_.path())) {
    if (entry.is_regular_file() && entry.path().extension() != ".img") everything += ReadAll(entry.path());
  }
  const std::string record = ReadAll(pool_.path() + "/volumes/" + id + ".json");
  EXPECT_THAT(record, HasSubstr("\"wrapped_data_key\": \"" + Wrapped(id) + "\""));
  for (const std::string& secret : {key, Hex(key), std::string(kKek), kek->bytes(), Hex(kek->bytes())}) {
    EXPECT_THAT(everything, Not(HasSubstr(secret)));
  }
  // The data key in base64 at each of the three alignments it could take
  // inside a longer base64 text: one of these runs would be in it.
  for (size_t skip = 0; skip < 3; ++skip) {
    const std::string part = key.substr(skip, (key.size() - skip) / 3 * 3);
    std::string b64(part.size() / 3 * 4 + 1, '\0');
    b64.resize(EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                               reinterpret_cast<const unsigned char*>(part.data()), static_cast<int>(part.size())));
    EXPECT_THAT(everything, Not(HasSubstr(b64))) << skip;
  }
}

}  // namespace
}  // namespace blockcsi
