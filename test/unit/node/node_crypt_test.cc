// Encrypted volumes on the node against in-memory fakes (cryptsetup's
// effects modelled in the fake world): the LUKS2 layer is made only on a
// blank device, opened with the unwrapped data key, never reformatted when
// the key does not open it; the key travels on stdin only; a missing secret
// or wrapped key never stages the volume as plain; unstage, rollback and
// expand handle the mapping in the right order.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "contract/publish_context.h"
#include "contract/volume_key.h"
#include "node/node_service.h"
#include "node/volume_crypt.h"
#include "support/csi_capabilities.h"
#include "support/fake_attacher.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using testing::FakeAttacher;
using testing::FakeHost;
using testing::FakeMounter;
using testing::FakeProbe;
using testing::FakeWorld;
using testing::FakeWorldExecutor;

constexpr char kStaging[] = "/var/lib/kubelet/plugins/kubernetes.io/csi/blockcsi.io/abc/globalmount";
constexpr char kTarget[] = "/var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pv1/mount";
constexpr char kVolume[] = "pvc-1";
constexpr char kDevice[] = "/dev/fake1";
constexpr char kMapping[] = "/dev/mapper/blockcsi-pvc-1";
// base64 of 32 x 'k' and of 32 x 'w': the class's KEK and another one.
constexpr char kKek[] = "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s=";
constexpr char kOtherKek[] = "d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3c=";

StatusOr<SecretBytes> Kek(const char* base64) { return ParseKeyEncryptionKey(base64, kVolume); }

class NodeCryptTest : public ::testing::Test {
 protected:
  NodeCryptTest() {
    SetLogCaptureForTest(&log_lines_);
    NodeServiceOptions o;
    o.node_id = "node-a";
    o.attacher = attacher_;
    o.mounter = mounter_;
    o.probe = std::make_shared<FakeProbe>(world_);
    o.executor = executor_;
    o.host = host_;
    // A "crash" at the armed fault point: an uncertain failure, which keeps
    // what the stage made for the retry (as a killed plugin would).
    o.fault_hook = [this](std::string_view step) {
      return step == armed_fault_ ? Unavailable("fault point " + std::string(step)) : OkStatus();
    };
    node_ = std::make_unique<NodeService>(std::move(o));
    world_->dirs.insert(kStaging);
    world_->AddDevice(kDevice, {});
    attacher_->SetDeviceFor(kVolume, kDevice);
    data_key_ = std::string(32, 'd');
    wrapped_ = *WrapDataKey(*Kek(kKek), SecretBytes(data_key_), kVolume);
  }
  ~NodeCryptTest() override { SetLogCaptureForTest(nullptr); }

  csi::v1::NodeStageVolumeRequest StageRequest(const std::string& fs = "ext4") const {
    csi::v1::NodeStageVolumeRequest r;
    r.set_volume_id(kVolume);
    r.set_staging_target_path(kStaging);
    *r.mutable_volume_capability() = testing::CapabilityFor(fs);
    auto& ctx = *r.mutable_publish_context();
    ctx[publish_context::kPortals] = "127.0.0.1:3260";
    ctx[publish_context::kTargetIqn] = "iqn.2026-11.io.blockcsi:pvc-1";
    ctx[publish_context::kLun] = "1";
    ctx[publish_context::kSerial] = "beaf1pvc1";
    ctx[volume_key::kWrappedDataKeyContext] = wrapped_;
    (*r.mutable_volume_context())[volume_key::kEncryptionContext] = volume_key::kEncryptionLuks2;
    (*r.mutable_secrets())[volume_key::kEncryptionKeySecret] = kKek;
    return r;
  }

  static csi::v1::NodeUnstageVolumeRequest UnstageRequest() {
    csi::v1::NodeUnstageVolumeRequest r;
    r.set_volume_id(kVolume);
    r.set_staging_target_path(kStaging);
    return r;
  }

  // Every command line run, space separated.
  std::vector<std::string> Commands() {
    std::vector<std::string> out;
    for (const auto& argv : executor_->Commands()) {
      std::string line;
      for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
      out.push_back(line);
    }
    return out;
  }

  // Nothing of the volume is left on the node: no record, no mapping.
  void ExpectNothingLeft() {
    EXPECT_FALSE(attacher_->Get(kVolume).ok()) << "the attachment is left behind";
    EXPECT_TRUE(world_->crypt_mappings.empty()) << "a dm-crypt mapping is left behind";
    EXPECT_EQ(FindMountAt(world_->mounts, kStaging), nullptr);
  }

  std::shared_ptr<FakeWorld> world_ = std::make_shared<FakeWorld>();
  std::shared_ptr<FakeAttacher> attacher_ = std::make_shared<FakeAttacher>(world_);
  std::shared_ptr<FakeMounter> mounter_ = std::make_shared<FakeMounter>(world_);
  std::shared_ptr<FakeWorldExecutor> executor_ = std::make_shared<FakeWorldExecutor>(world_);
  std::shared_ptr<FakeHost> host_ = std::make_shared<FakeHost>(world_);
  std::unique_ptr<NodeService> node_;
  std::string log_lines_;
  std::string data_key_;
  std::string wrapped_;
  std::string armed_fault_;
};

#define EXPECT_CODE(expr, code_value)                                            \
  do {                                                                           \
    ::blockcsi::Status _st = (expr);                                             \
    EXPECT_EQ(_st.code(), ::blockcsi::StatusCode::code_value) << _st.ToString(); \
  } while (0)

TEST(CryptMappingNameTest, PlainIdsReadAsThemselvesOthersAreHashed) {
  EXPECT_EQ(CryptMappingName("pvc-1"), "blockcsi-pvc-1");
  std::string odd = CryptMappingName("pool/image#1");
  EXPECT_EQ(odd.rfind("blockcsi--", 0), 0u) << odd;
  EXPECT_EQ(odd.size(), 10u + 32u);
  EXPECT_EQ(odd.find('/'), std::string::npos);
  EXPECT_EQ(odd, CryptMappingName("pool/image#1")) << "the same on every call";
  EXPECT_NE(odd, CryptMappingName("pool/image#2"));
  EXPECT_EQ(CryptMappingName(std::string(101, 'a')).size(), 42u) << "a dm name holds at most 127 characters";
  EXPECT_EQ(CryptMappingName("-x").rfind("blockcsi--", 0), 0u) << "never mistaken for a hashed name";
}

TEST_F(NodeCryptTest, BlankDeviceIsLuksFormattedOpenedAndTheFilesystemMadeOnTheMapping) {
  Status st = node_->Stage(StageRequest());
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<std::string> want = {
      std::string("cryptsetup luksFormat --type luks2 --batch-mode --pbkdf pbkdf2 --pbkdf-force-iterations 1000 "
                  "--offset 32768 --key-file=- ") +
          kDevice,
      std::string("cryptsetup open --type luks2 --key-file=- --disable-keyring ") + kDevice + " blockcsi-pvc-1",
  };
  std::vector<std::string> ran = Commands();
  ASSERT_GE(ran.size(), 3u);
  EXPECT_EQ(ran[0], want[0]);
  EXPECT_EQ(ran[1], want[1]);
  EXPECT_EQ(ran[2].rfind("mkfs.ext4", 0), 0u) << ran[2];
  EXPECT_EQ(executor_->Commands()[2].back(), kMapping) << "mkfs runs on the mapping, never on the device";
  const MountEntry* staged = FindMountAt(world_->mounts, kStaging);
  ASSERT_NE(staged, nullptr);
  EXPECT_EQ(staged->source, kMapping);
  EXPECT_EQ(world_->devices[kDevice].signatures.front().type, "crypto_LUKS");
  EXPECT_EQ(attacher_->Get(kVolume)->annotations.at(kCryptAnnotation), "blockcsi-pvc-1");
}

TEST_F(NodeCryptTest, TheKeyGoesOnStdinMarkedSensitiveAndNowhereElse) {
  ASSERT_TRUE(node_->Stage(StageRequest()).ok()) << log_lines_;
  auto stdins = executor_->Stdins();
  auto commands = executor_->Commands();
  int keyed = 0;
  for (size_t i = 0; i < commands.size(); ++i) {
    for (const auto& arg : commands[i]) {
      EXPECT_EQ(arg.find(data_key_), std::string::npos) << "the data key is in argv";
      EXPECT_EQ(arg.find(kKek), std::string::npos) << "the KEK is in argv";
    }
    if (stdins[i].first.empty()) continue;
    EXPECT_EQ(stdins[i].first, data_key_);
    EXPECT_TRUE(stdins[i].second) << "the key on stdin must be marked sensitive";
    ++keyed;
  }
  EXPECT_EQ(keyed, 2) << "luksFormat and open read the key";
  EXPECT_EQ(log_lines_.find(data_key_), std::string::npos);
  EXPECT_EQ(log_lines_.find(kKek), std::string::npos);
}

TEST_F(NodeCryptTest, UnstageClosesTheMappingAfterTheUnmountAndBeforeTheDetach) {
  ASSERT_TRUE(node_->Stage(StageRequest()).ok());
  ASSERT_TRUE(node_->Unstage(UnstageRequest()).ok()) << log_lines_;
  std::vector<std::string> log = world_->Log();
  auto at = [&](const std::string& prefix) {
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i].rfind(prefix, 0) == 0) return static_cast<int>(i);
    }
    return -1;
  };
  int unmount = at(std::string("umount ") + kStaging);
  int close = at("exec cryptsetup close blockcsi-pvc-1");
  int detach = at("detach pvc-1");
  ASSERT_GE(unmount, 0);
  ASSERT_GE(close, 0);
  ASSERT_GE(detach, 0);
  EXPECT_LT(unmount, close);
  EXPECT_LT(close, detach);
  ExpectNothingLeft();
}

TEST_F(NodeCryptTest, RestageOpensTheSameLuksHeaderAndKeepsTheFilesystem) {
  ASSERT_TRUE(node_->Stage(StageRequest()).ok());
  ASSERT_TRUE(node_->Unstage(UnstageRequest()).ok());
  ASSERT_TRUE(node_->Stage(StageRequest()).ok()) << log_lines_;
  EXPECT_EQ(world_->Count("exec cryptsetup luksFormat"), 1) << "a LUKS header is never made again";
  EXPECT_EQ(world_->Count("exec mkfs"), 1) << "the filesystem inside is kept";
  EXPECT_EQ(FindMountAt(world_->mounts, kStaging)->source, kMapping);
}

TEST_F(NodeCryptTest, AStageRetriedWhileStagedTouchesNothing) {
  ASSERT_TRUE(node_->Stage(StageRequest()).ok());
  size_t before = Commands().size();
  ASSERT_TRUE(node_->Stage(StageRequest()).ok()) << log_lines_;
  EXPECT_EQ(Commands().size(), before);
}

TEST_F(NodeCryptTest, AMappingLeftOpenByACrashIsReusedNotOpenedAgain) {
  ASSERT_TRUE(node_->Stage(StageRequest()).ok());
  ASSERT_TRUE(mounter_->Unmount(kStaging).ok());  // the crash: mapping open, nothing mounted
  ASSERT_TRUE(node_->Stage(StageRequest()).ok()) << log_lines_;
  EXPECT_EQ(world_->Count("exec cryptsetup open"), 1);
  EXPECT_EQ(FindMountAt(world_->mounts, kStaging)->source, kMapping);
}

TEST_F(NodeCryptTest, AHeaderTheKeyDoesNotOpenIsPermissionDeniedNeverReformatted) {
  world_->SetSignature(kDevice, "crypto_LUKS", "crypto");
  world_->luks_keys[kDevice] = "someone else's key";
  world_->luks_contents[kDevice] = {{"ext4", "filesystem", "", ""}};
  EXPECT_CODE(node_->Stage(StageRequest()), kPermissionDenied);
  EXPECT_EQ(world_->Count("exec cryptsetup luksFormat"), 0);
  EXPECT_EQ(world_->Count("exec mkfs"), 0);
  EXPECT_EQ(world_->luks_keys[kDevice], "someone else's key") << "the header is left as it was";
  EXPECT_EQ(world_->luks_contents[kDevice].front().type, "ext4") << "the data is left as it was";
  ExpectNothingLeft();
}

// A luksFormat killed between its header and its first keyslot leaves a
// header no key opens: formatted again, rather than a volume that never
// stages again. A header with a keyslot is not (the test above).
TEST_F(NodeCryptTest, AHeaderWithoutAnyKeyslotIsAFormatCutShortAndIsFormattedAgain) {
  world_->SetSignature(kDevice, "crypto_LUKS", "crypto");
  world_->luks_keys[kDevice] = "";
  ASSERT_TRUE(node_->Stage(StageRequest()).ok()) << log_lines_;
  EXPECT_EQ(world_->Count("exec cryptsetup luksDump --dump-json-metadata"), 1);
  EXPECT_EQ(world_->Count("exec cryptsetup luksFormat"), 1);
  EXPECT_FALSE(world_->luks_keys[kDevice].empty());
  EXPECT_EQ(FindMountAt(world_->mounts, kStaging)->source, kMapping);
}

// cryptsetup 2.6.1's own output (test/testdata/cryptsetup), before and
// after `cryptsetup erase` of a header made as FormatLuks makes it.
TEST(LuksDumpTest, KeyslotsAreCountedFromTheJsonMetadata) {
  auto one = ReadFileToString(testing::TestDataPath("cryptsetup/luksdump-one-keyslot.json"));
  auto none = ReadFileToString(testing::TestDataPath("cryptsetup/luksdump-no-keyslot.json"));
  ASSERT_TRUE(one.ok() && none.ok());
  EXPECT_EQ(ParseLuksKeyslotCount(*one).value(), 1u);
  EXPECT_EQ(ParseLuksKeyslotCount(*none).value(), 0u);
  for (const char* bad : {"", "not json", "{}", "{\"keyslots\":[]}", "{\"keyslots\":{}}"}) {
    EXPECT_EQ(ParseLuksKeyslotCount(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(NodeCryptTest, AKeySecretOfAnotherClassIsPermissionDeniedBeforeAnythingAttaches) {
  auto req = StageRequest();
  (*req.mutable_secrets())[volume_key::kEncryptionKeySecret] = kOtherKek;
  EXPECT_CODE(node_->Stage(req), kPermissionDenied);
  EXPECT_EQ(world_->Count("attach"), 0);
  EXPECT_TRUE(Commands().empty());
  EXPECT_EQ(log_lines_.find(kOtherKek), std::string::npos);
}

TEST_F(NodeCryptTest, MidRotationAKeyWrappedUnderThePreviousKekStillOpens) {
  wrapped_ = *WrapDataKey(*Kek(kOtherKek), SecretBytes(data_key_), kVolume);
  auto req = StageRequest();
  EXPECT_CODE(node_->Stage(req), kPermissionDenied);
  (*req.mutable_secrets())[volume_key::kPreviousEncryptionKeySecret] = kKek;
  EXPECT_CODE(node_->Stage(req), kPermissionDenied);  // the previous KEK does not open it either
  (*req.mutable_secrets())[volume_key::kPreviousEncryptionKeySecret] = kOtherKek;
  Status st = node_->Stage(req);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto stdins = executor_->Stdins();
  EXPECT_TRUE(std::any_of(stdins.begin(), stdins.end(), [&](const auto& in) { return in.first == data_key_; }));
}

TEST_F(NodeCryptTest, AnyOtherSignatureIsRefusedNeverFormatted) {
  world_->SetSignature(kDevice, "ext4", "filesystem");
  EXPECT_CODE(node_->Stage(StageRequest()), kFailedPrecondition);
  EXPECT_EQ(world_->Count("exec cryptsetup"), 0);
  EXPECT_EQ(world_->devices[kDevice].signatures.front().type, "ext4");
  ExpectNothingLeft();
}

TEST_F(NodeCryptTest, AnEncryptedVolumeIsNeverStagedAsPlain) {
  auto no_secret = StageRequest();
  no_secret.mutable_secrets()->clear();
  EXPECT_CODE(node_->Stage(no_secret), kInvalidArgument);
  auto no_wrapped = StageRequest();
  no_wrapped.mutable_publish_context()->erase(volume_key::kWrappedDataKeyContext);
  EXPECT_CODE(node_->Stage(no_wrapped), kInvalidArgument);
  auto unknown_scheme = StageRequest();
  (*unknown_scheme.mutable_volume_context())[volume_key::kEncryptionContext] = "luks9";
  EXPECT_CODE(node_->Stage(unknown_scheme), kInvalidArgument);
  auto unmarked = StageRequest();
  unmarked.mutable_volume_context()->clear();
  EXPECT_CODE(node_->Stage(unmarked), kInvalidArgument);
  EXPECT_EQ(world_->Count("attach"), 0);
  EXPECT_EQ(world_->Count("exec mkfs"), 0);
}

TEST_F(NodeCryptTest, AFailedStageAfterTheOpenLeavesNoMappingBehind) {
  executor_->Script("mkfs.ext4", 1, "", "mkfs.ext4: Input/output error");
  EXPECT_CODE(node_->Stage(StageRequest()), kInternal);
  ExpectNothingLeft();
  EXPECT_EQ(world_->Count("exec cryptsetup close"), 1);
}

TEST_F(NodeCryptTest, AMappingThatWillNotCloseKeepsTheDeviceAttached) {
  ASSERT_TRUE(node_->Stage(StageRequest()).ok());
  executor_->Script("cryptsetup", 5, "", "Device blockcsi-pvc-1 is still in use.");
  EXPECT_CODE(node_->Unstage(UnstageRequest()), kFailedPrecondition);
  EXPECT_TRUE(attacher_->Get(kVolume).ok()) << "detached under an open mapping";
  EXPECT_EQ(world_->Count("detach"), 0);
}

TEST_F(NodeCryptTest, RawBlockPublishesTheMappingNotTheDevice) {
  ASSERT_TRUE(node_->Stage(StageRequest("block")).ok()) << log_lines_;
  EXPECT_EQ(world_->Count("exec mkfs"), 0);
  world_->files.insert(kTarget);
  csi::v1::NodePublishVolumeRequest pub;
  pub.set_volume_id(kVolume);
  pub.set_staging_target_path(kStaging);
  pub.set_target_path(kTarget);
  *pub.mutable_volume_capability() = testing::BlockCapability();
  ASSERT_TRUE(node_->Publish(pub).ok()) << log_lines_;
  EXPECT_EQ(world_->Count(std::string("bind ") + kMapping + " " + kTarget), 1);
  EXPECT_CODE(node_->Unstage(UnstageRequest()), kFailedPrecondition);  // still published
  EXPECT_EQ(world_->Count("exec cryptsetup close"), 0);
}

TEST_F(NodeCryptTest, ExpandGrowsTheMappingBeforeTheFilesystemOnIt) {
  ASSERT_TRUE(node_->Stage(StageRequest()).ok());
  world_->devices[kDevice].size_bytes = 2ULL << 30;
  csi::v1::NodeExpandVolumeRequest req;
  req.set_volume_id(kVolume);
  req.set_volume_path(kStaging);
  csi::v1::NodeExpandVolumeResponse resp;
  ASSERT_TRUE(node_->Expand(req, &resp).ok()) << log_lines_;
  std::vector<std::string> ran = Commands();
  ASSERT_GE(ran.size(), 2u);
  EXPECT_EQ(ran[ran.size() - 2], "cryptsetup resize blockcsi-pvc-1");
  EXPECT_EQ(ran.back(), std::string("resize2fs ") + kMapping);
  EXPECT_EQ(world_->devices[kMapping].size_bytes, (2ULL << 30) - (16ULL << 20));
  EXPECT_EQ(resp.capacity_bytes(), (2LL << 30) - (16LL << 20)) << "the pod gets the mapping, not the device";
}

// The device holds the bytes asked for but the mapping on it does not (the
// header comes off): the pod would not get them, so the resizer must retry.
TEST_F(NodeCryptTest, ExpandJudgesTheMappingsSizeNotTheDevices) {
  ASSERT_TRUE(node_->Stage(StageRequest()).ok());
  world_->devices[kDevice].size_bytes = 2ULL << 30;
  csi::v1::NodeExpandVolumeRequest req;
  req.set_volume_id(kVolume);
  req.set_volume_path(kStaging);
  req.mutable_capacity_range()->set_required_bytes(2LL << 30);
  csi::v1::NodeExpandVolumeResponse resp;
  EXPECT_CODE(node_->Expand(req, &resp), kUnavailable);
  req.mutable_capacity_range()->set_required_bytes((2LL << 30) - (16LL << 20));
  ASSERT_TRUE(node_->Expand(req, &resp).ok()) << log_lines_;
  EXPECT_EQ(resp.capacity_bytes(), (2LL << 30) - (16LL << 20));
}

// Interrupted after the LUKS header was written, or after the mapping was
// opened: the retry opens (or reuses) what is there and never formats again.
TEST_F(NodeCryptTest, AStageInterruptedAfterLuksFormatOrOpenIsRetriedWithoutFormattingAgain) {
  for (const char* point : {"node.stage.after-luks-format", "node.stage.after-luks-open"}) {
    SCOPED_TRACE(point);
    armed_fault_ = point;
    EXPECT_CODE(node_->Stage(StageRequest()), kUnavailable);
    armed_fault_.clear();
    ASSERT_TRUE(node_->Stage(StageRequest()).ok());
    EXPECT_EQ(world_->Count("exec cryptsetup luksFormat"), 1);
    EXPECT_EQ(world_->Count("exec mkfs"), 1);
    EXPECT_EQ(world_->crypt_mappings.size(), 1u);
    ASSERT_TRUE(node_->Unstage(UnstageRequest()).ok());
    ExpectNothingLeft();
  }
}

// dm-crypt does not pass discards (the mapping is opened without
// allow_discards on purpose), so a trim of an encrypted volume can never
// give anything back: the periodic trim counts it as skipped, with the
// reason, never as failed every round; a trim asked for by name says why.
TEST_F(NodeCryptTest, ThePeriodicTrimSkipsAnEncryptedVolumeWithItsReasonAndNeverFailsIt) {
  ASSERT_TRUE(node_->Stage(StageRequest()).ok());
  auto counter = [](const std::string& result) {
    std::string text = Metrics().Render();
    std::string series = "blockcsi_node_fstrim_total{result=\"" + result + "\"} ";
    size_t at = text.find("\n" + series);
    return at == std::string::npos ? 0.0 : std::stod(text.substr(at + 1 + series.size()));
  };
  const double skipped_before = counter("skipped");
  const double failed_before = counter("failed");
  NodeService::TrimRound round = node_->TrimStagedVolumes();
  EXPECT_EQ(round.skipped, 1u);
  EXPECT_EQ(round.failed, 0u);
  EXPECT_EQ(round.trimmed, 0u);
  EXPECT_EQ(world_->Count("fitrim"), 0) << "an encrypted volume's FITRIM can only fail";
  EXPECT_EQ(counter("skipped") - skipped_before, 1);
  EXPECT_EQ(counter("failed") - failed_before, 0);
  EXPECT_NE(log_lines_.find("periodic trim: volume skipped"), std::string::npos) << log_lines_;
  EXPECT_NE(log_lines_.find("does not pass discards"), std::string::npos) << log_lines_;

  auto one = node_->Trim(kVolume);
  EXPECT_EQ(one.status().code(), StatusCode::kFailedPrecondition) << one.status().ToString();
  EXPECT_NE(one.status().message().find("encrypted: its dm-crypt mapping does not pass discards"), std::string::npos)
      << one.status().ToString();
}

}  // namespace
}  // namespace blockcsi
