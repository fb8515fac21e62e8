// Encryption at rest, the controller's half, through the real `blockcsi
// --mode controller` (local backend, a real tgtd): CreateVolume of an
// encrypted class, its retry (also after a kill -9 of the plugin), the
// publish_context's wrapped key, an encrypted clone and the refused ones,
// and a key rotation with `blockctl rewrap-keys` over the controller's
// socket. The KEKs and the data key must appear in no log line, no pool file
// and no process's argv. TearDown asserts, before it cleans, that nothing is
// left on tgtd or in the pool. Needs root and tgt (skips otherwise).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "contract/volume_key.h"
#include "support/csi_requests.h"
#include "support/leak_check.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr char kKek[] = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
constexpr char kNewKek[] = "QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8=";
constexpr char kNode[] = "enc-node-1";

std::string Hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) out += std::string{kDigits[c >> 4], kDigits[c & 15]};
  return out;
}

class EncryptionPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    tgtd_ = testing::TgtdHarness::Start(&error);
    BLOCKCSI_REQUIRE_TGTD(tgtd_, error);
    plugin_ = std::make_unique<testing::PluginUnderTest>(dir_.Join("plugin"), tgtd_.get());
    options_.mode = "controller";
    ASSERT_TRUE(plugin_->Start(options_, &error)) << error;
    baseline_ = testing::TakeLeakSnapshot(Scope());
  }
  void TearDown() override {
    if (plugin_ == nullptr) return;
    if (!HasFailure()) {
      EXPECT_TRUE(testing::NothingLeftSince(baseline_, Scope(), "the test (before cleaning)"));
    }
    plugin_->Stop();
    testing::CleanUpUnder(dir_.path());
  }
  testing::LeakScope Scope() const {
    testing::LeakScope scope;
    scope.pool_dir = plugin_->pool_dir();
    scope.tgtd = tgtd_.get();
    scope.ignore_pids = {plugin_->pid()};
    return scope;
  }
  std::string GrpcLogTail() const { return plugin_->LogTail(); }

  csi::v1::CreateVolumeRequest Request(const std::string& name, const char* kek, const std::string& clone_of = "") {
    auto r = testing::CreateRequest(name, 16 * kMiB);
    if (kek != nullptr) {
      (*r.mutable_parameters())["encrypted"] = "true";
      (*r.mutable_secrets())["encryptionKey"] = kek;
    }
    if (!clone_of.empty()) r.mutable_volume_content_source()->mutable_volume()->set_volume_id(clone_of);
    return r;
  }
  grpc::Status Create(const csi::v1::CreateVolumeRequest& r, csi::v1::Volume* out = nullptr) {
    csi::v1::CreateVolumeResponse resp;
    grpc::Status st = plugin_->controller().CreateVolume(testing::Deadline().get(), r, &resp);
    if (out != nullptr) *out = resp.volume();
    return st;
  }
  // Publishes `id` to kNode and returns the data key its wrappedDataKey
  // opens to under `kek` ("" when it does not).
  std::string PublishedDataKey(const std::string& id, const char* kek) {
    auto r = testing::PublishRequest(id, kNode);
    csi::v1::ControllerPublishVolumeResponse resp;
    EXPECT_GRPC_OK(plugin_->controller().ControllerPublishVolume(testing::Deadline().get(), r, &resp));
    auto parsed = ParseKeyEncryptionKey(kek, id);
    auto key = UnwrapDataKey(*parsed, resp.publish_context().at("wrappedDataKey"), id);
    return key.ok() ? key->bytes() : "";
  }
  void Unpublish(const std::string& id) {
    csi::v1::ControllerUnpublishVolumeResponse resp;
    EXPECT_GRPC_OK(plugin_->controller().ControllerUnpublishVolume(testing::Deadline().get(),
                                                                   testing::UnpublishRequest(id, kNode), &resp));
  }
  void Delete(const std::string& id) {
    csi::v1::DeleteVolumeRequest r;
    r.set_volume_id(id);
    csi::v1::DeleteVolumeResponse resp;
    EXPECT_GRPC_OK(plugin_->controller().DeleteVolume(testing::Deadline().get(), r, &resp));
  }
  // blockctl rewrap-keys over the plugin's socket; {exit code, output}.
  std::pair<int, std::string> Rewrap(const char* old_kek, const char* new_kek, bool* argv_clean) {
    std::ofstream(dir_.Join("old.key")) << old_kek << "\n";
    std::ofstream(dir_.Join("new.key")) << new_kek << "\n";
    const std::string log = dir_.Join("rewrap.log");
    std::filesystem::remove(log);
    std::vector<std::string> argv = {testing::BinDir() + "/blockctl",
                                     "--endpoint",
                                     "unix://" + plugin_->socket(),
                                     "rewrap-keys",
                                     "--old-key-file",
                                     dir_.Join("old.key"),
                                     "--new-key-file",
                                     dir_.Join("new.key")};
    for (const auto& arg : argv) *argv_clean &= arg.find(old_kek) == std::string::npos;
    testing::ChildProcess child(argv, log);
    int code = child.Wait(std::chrono::seconds(60));
    return {code, testing::ReadFileOrEmpty(log)};
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::TgtdHarness> tgtd_;
  std::unique_ptr<testing::PluginUnderTest> plugin_;
  testing::PluginOptions options_;
  testing::LeakSnapshot baseline_;
};

TEST_F(EncryptionPluginTest, CreateRetryRestartCloneAndRotateThroughThePlugin) {
  // A class asking for encryption without its key: refused, nothing made.
  auto no_key = Request("pvc-nokey", kKek);
  no_key.mutable_secrets()->clear();
  grpc::Status refused = Create(no_key);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << refused.error_message();
  EXPECT_NE(refused.error_message().find("encryptionKey"), std::string::npos) << refused.error_message();
  EXPECT_TRUE(testing::NothingLeftSince(baseline_, Scope(), "the refused CreateVolume"));

  csi::v1::Volume volume;
  ASSERT_GRPC_OK(Create(Request("pvc-enc", kKek), &volume));
  const std::string id = volume.volume_id();
  EXPECT_EQ(volume.volume_context().at("encryption"), "luks2");
  const std::string data_key = PublishedDataKey(id, kKek);
  ASSERT_EQ(data_key.size(), kDataKeyBytes);

  // The retry, also after a kill -9: the same volume with the same key.
  plugin_->Kill9();
  std::string error;
  ASSERT_TRUE(plugin_->Start(options_, &error)) << error;
  csi::v1::Volume again;
  ASSERT_GRPC_OK(Create(Request("pvc-enc", kKek), &again));
  EXPECT_EQ(again.volume_id(), id);
  EXPECT_EQ(PublishedDataKey(id, kKek), data_key);

  // A clone keeps the data key, re-wrapped for its own id; an unencrypted
  // class may not clone it.
  csi::v1::Volume clone;
  ASSERT_GRPC_OK(Create(Request("pvc-clone", kKek, id), &clone));
  EXPECT_EQ(PublishedDataKey(clone.volume_id(), kKek), data_key);
  grpc::Status plain_clone = Create(Request("pvc-plain-clone", nullptr, id));
  EXPECT_EQ(plain_clone.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(plain_clone.error_message().find(id), std::string::npos) << plain_clone.error_message();

  // Rotation: every key of the class now opens under the new KEK only, to the
  // same data key; a second run finds them new; a wrong old key changes nothing.
  bool argv_clean = true;
  auto [code, out] = Rewrap(kKek, kNewKek, &argv_clean);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("rewrapped"), std::string::npos) << out;
  EXPECT_EQ(PublishedDataKey(id, kNewKek), data_key);
  EXPECT_EQ(PublishedDataKey(id, kKek), "");
  EXPECT_EQ(PublishedDataKey(clone.volume_id(), kNewKek), data_key);
  auto [again_code, again_out] = Rewrap(kKek, kNewKek, &argv_clean);
  EXPECT_EQ(again_code, 0) << again_out;
  EXPECT_NE(again_out.find("already-new"), std::string::npos) << again_out;
  auto [wrong_code, wrong_out] = Rewrap("ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=", kKek, &argv_clean);
  EXPECT_EQ(wrong_code, 1) << wrong_out;
  EXPECT_NE(wrong_out.find("not-opened"), std::string::npos) << wrong_out;
  EXPECT_EQ(PublishedDataKey(id, kNewKek), data_key);
  EXPECT_TRUE(argv_clean);

  // No key in any log line or pool file, in any form.
  std::string files = testing::ReadFileOrEmpty(plugin_->log_path());
  for (const auto& entry : std::filesystem::recursive_directory_iterator(plugin_->pool_dir())) {
    if (entry.is_regular_file() && entry.path().extension() != ".img") files += testing::ReadFileOrEmpty(entry.path());
  }
  for (const std::string& secret : {std::string(kKek), std::string(kNewKek), data_key, Hex(data_key)}) {
    EXPECT_EQ(files.find(secret), std::string::npos);
  }
  EXPECT_NE(files.find("wrapped_data_key"), std::string::npos);

  for (const std::string& v : {id, clone.volume_id()}) {
    Unpublish(v);
    Delete(v);
  }
}

}  // namespace
}  // namespace blockcsi
