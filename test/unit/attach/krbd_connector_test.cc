// The kernel RBD connector without a kernel: a FakeExecutor that expects
// the exact `rbd device map/unmap` argv and replays output captured from
// the rbd CLI (test/testdata/krbd), and a fake sysfs tree
// (test/testdata/krbd/sysfs) that the "kernel" fills in when a map runs.
// Driven through the VolumeAttacher facade, as the node service does.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <functional>

#include "attach/attach_record_store.h"
#include "attach/krbd_connector.h"
#include "attach/volume_attacher_impl.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "contract/publish_context.h"
#include "support/fake_executor.h"
#include "support/krbd_captured.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using krbd_captured::kImage;
using krbd_captured::kImageId;  // the rbd0 scenario's image_id
using testing::FakeExecutor;
constexpr char kOrphanImage[] = "csi-vol-0b9d6e2a5c4f4e1d8a7b3c2d1e0f9a8b";
constexpr char kMonHost[] = "[v2:127.0.0.1:26235,v1:127.0.0.1:20372]";
constexpr char kKey[] = "AQBx8UVnAAAAABAAn2jRUeIDl5F7oSg6YgxoOw==";

std::string Data(const std::string& name) {
  auto text = ReadFileToString(testing::TestDataPath("krbd/" + name));
  EXPECT_TRUE(text.ok()) << name;
  return text.ok() ? *text : "";
}

CommandResult Failed(int exit_code, const std::string& stderr_file) {
  CommandResult r;
  r.exit_code = exit_code;
  r.stderr_text = Data(stderr_file);
  return r;
}

class KrbdConnectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.Join("root");
    std::filesystem::create_directories(root_ + "/sys");
    std::filesystem::create_directories(root_ + "/dev");
    state_ = dir_.Join("state");
    executor_ = std::make_shared<FakeExecutor>();
    SetLogCaptureForTest(&logs_);
    ASSERT_TRUE(LogEnabled(LogLevel::kDebug)) << "the key check would miss what is logged at debug";
  }

  void TearDown() override {
    SetLogCaptureForTest(nullptr);
    EXPECT_TRUE(executor_->Pending().empty()) << "expected commands never ran: " << executor_->Pending().front();
    // The key never reaches a log line, an argv as logged, or a record.
    EXPECT_EQ(logs_.find(kKey), std::string::npos) << logs_;
    for (const auto& line : executor_->RedactedLog()) EXPECT_EQ(line.find(kKey), std::string::npos) << line;
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(state_, ec)) {
      if (!e.is_regular_file()) continue;
      EXPECT_EQ(testing::ReadFileOrEmpty(e.path().string()).find(kKey), std::string::npos) << e.path();
    }
  }

  KrbdConnectorOptions Options() {
    KrbdConnectorOptions o;
    o.executor = executor_;
    o.host_fs = HostRootedAt(root_);
    o.state_files = MachineHost();
    o.state_dir = state_;
    o.command_timeout = std::chrono::seconds(120);
    return o;
  }

  std::unique_ptr<VolumeAttacherImpl> MakeAttacher() {
    auto a = std::make_unique<VolumeAttacherImpl>(state_, MachineHost(), MakeKrbdConnector(Options()));
    EXPECT_TRUE(a->Start().ok());
    return a;
  }

  // Copies a captured sysfs scenario into the fake root (merging trees).
  void Install(const std::string& scenario) { krbd_captured::Install(scenario, root_); }
  std::function<void()> Installs(const std::string& scenario) {
    return [this, scenario] { Install(scenario); };
  }
  std::string Root(const std::string& path) { return root_ + path; }
  void Write(const std::string& path, const std::string& text) {
    ASSERT_TRUE(WriteFileAtomically(Root(path), text).ok()) << path;
  }

  AttachSpec Spec(bool read_only = false, const std::string& image_id = kImageId, const std::string& key = kKey) {
    std::map<std::string, std::string> context = {
        {publish_context::kTransport, "rbd"},       {publish_context::kRbdPool, "rbd"},
        {publish_context::kRbdImage, kImage},       {publish_context::kRbdImageId, image_id},
        {publish_context::kCephMonitors, kMonHost}, {publish_context::kCephUser, "blockcsi"}};
    if (read_only) context[publish_context::kReadOnly] = "true";
    std::map<std::string, std::string> secrets;
    if (!key.empty()) secrets = {{secret_keys::kCephUserId, "blockcsi"}, {secret_keys::kCephUserKey, key}};
    auto spec = ParseAttachSpec("vol-1", context, secrets, "");
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    return *spec;
  }

  std::string KeyFile() { return state_ + "/krbd/vol-1.key"; }

  std::vector<std::string> MapArgv(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {"rbd", "device",          "map",       "--pool", "rbd", "--id", "blockcsi",
                                     "-m",  "127.0.0.1:20372", "--keyfile", KeyFile()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--options", "noudev", kImage});
    return argv;
  }
  static std::vector<std::string> UnmapArgv(const std::string& device) {
    return {"rbd", "device", "unmap", "--options", "noudev", device};
  }

  // Run while the fake `rbd device map` runs: the key file is there, 0600,
  // holding exactly the key.
  std::function<void()> KeyFileIsPrivate(bool* checked) {
    return [this, checked] {
      struct stat st {};
      ASSERT_EQ(::stat(KeyFile().c_str(), &st), 0) << "no key file while rbd runs";
      EXPECT_EQ(st.st_mode & 07777, 0600u);
      EXPECT_EQ(testing::ReadFileOrEmpty(KeyFile()), kKey);
      *checked = true;
    };
  }

  testing::TempDir dir_;
  std::string root_;
  std::string state_;
  std::string logs_;
  std::shared_ptr<FakeExecutor> executor_;
};

TEST(KrbdMonitorAddressesTest, ConvertsMonHostToKernelV1Addresses) {
  using V = std::vector<std::string>;
  auto conv = [](std::string_view in) {
    auto r = KrbdMonitorAddresses(in);
    EXPECT_TRUE(r.ok()) << in << ": " << r.status().ToString();
    return r.ok() ? *r : V{};
  };
  // What this machine's test cluster advertises (hack/ceph-cluster.sh).
  EXPECT_EQ(conv(kMonHost), V{"127.0.0.1:20372"});
  EXPECT_EQ(conv("[v2:10.0.0.1:3300/0,v1:10.0.0.1:6789/0],[v2:10.0.0.2:3300/0,v1:10.0.0.2:6789/0]"),
            (V{"10.0.0.1:6789", "10.0.0.2:6789"}));
  // The v1 address need not come second.
  EXPECT_EQ(conv("[v1:10.0.0.3:6789/0,v2:10.0.0.3:3300/0]"), V{"10.0.0.3:6789"});
  EXPECT_EQ(conv("v1:10.0.0.1:6789/0,10.0.0.2:6790,10.0.0.3"), (V{"10.0.0.1:6789", "10.0.0.2:6790", "10.0.0.3:6789"}));
  EXPECT_EQ(conv("[v2:[2001:db8::1]:3300/0,v1:[2001:db8::1]:6789/0]"), V{"[2001:db8::1]:6789"});
  EXPECT_EQ(conv("[2001:db8::2]:6789,[2001:db8::3]"), (V{"[2001:db8::2]:6789", "[2001:db8::3]:6789"}));
  EXPECT_EQ(conv("mon-a.example.com:6789"), V{"mon-a.example.com:6789"});
  // The same monitor twice is listed once.
  EXPECT_EQ(conv("10.0.0.1:6789,[v2:10.0.0.1:3300/0,v1:10.0.0.1:6789/0]"), V{"10.0.0.1:6789"});
}

TEST(KrbdMonitorAddressesTest, RefusesMsgr2OnlyAndMalformedMonitors) {
  auto v2only = KrbdMonitorAddresses("[v2:10.0.0.1:3300/0],[v2:10.0.0.2:3300/0,v1:10.0.0.2:6789/0]");
  ASSERT_FALSE(v2only.ok());
  EXPECT_EQ(v2only.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(v2only.status().message().find("[v2:10.0.0.1:3300/0]"), std::string::npos) << v2only.status().message();
  EXPECT_NE(v2only.status().message().find("v1"), std::string::npos);
  for (std::string_view bad :
       {"", ",", "10.0.0.1:port", "10.0.0.1:99999", "[v1:10.0.0.1:6789/x]", "[2001:db8::1", "v1:", "[]:6789"}) {
    auto r = KrbdMonitorAddresses(bad);
    EXPECT_FALSE(r.ok()) << "accepted \"" << bad << "\"";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

TEST_F(KrbdConnectorTest, MapsWithTheKeyInAPrivateFileThatIsGoneAfterwards) {
  auto attacher = MakeAttacher();
  bool checked = false;
  executor_->ExpectOk(MapArgv(), Data("map_rbd0.stdout")).Then([&] {
    KeyFileIsPrivate (&checked)();
    Install("rbd0");
  });
  auto record = attacher->Attach(Spec());
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_TRUE(checked);
  EXPECT_FALSE(std::filesystem::exists(KeyFile()));
  EXPECT_EQ(record->device_path, "/dev/rbd0");
  EXPECT_EQ(record->size_bytes, 1ull << 30);
  EXPECT_EQ(record->connector, "krbd");
  EXPECT_EQ(record->transport, "rbd");
  EXPECT_EQ(record->expected_serial, kImageId);
  EXPECT_EQ(record->connector_state.at("rbd_dev_id"), "0");
  EXPECT_FALSE(record->read_only);
  EXPECT_FALSE(attacher->Check("vol-1").abnormal) << attacher->Check("vol-1").message;

  // A retry finds the attachment healthy and runs nothing.
  auto again = attacher->Attach(Spec());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->device_path, "/dev/rbd0");

  executor_->ExpectOk(UnmapArgv("/dev/rbd0"));
  ASSERT_TRUE(attacher->Detach("vol-1").ok());
  EXPECT_FALSE(attacher->Get("vol-1").ok());
}

TEST_F(KrbdConnectorTest, ReadOnlyPublishMapsReadOnly) {
  auto attacher = MakeAttacher();
  executor_->ExpectOk(MapArgv({"--read-only"}), Data("map_rbd0.stdout")).Then([this] {
    Install("rbd0");
    Write("/sys/block/rbd0/ro", "1\n");
  });
  auto record = attacher->Attach(Spec(/*read_only=*/true));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_TRUE(record->read_only);
  EXPECT_FALSE(std::filesystem::exists(KeyFile()));
}

TEST_F(KrbdConnectorTest, WithoutAKeyTheNodeKeyringIsUsedAndNoKeyFileWritten) {
  auto attacher = MakeAttacher();
  executor_
      ->ExpectOk({"rbd", "device", "map", "--pool", "rbd", "--id", "blockcsi", "-m", "127.0.0.1:20372", "--options",
                  "noudev", kImage},
                 Data("map_rbd0.stdout"))
      .Then([this] {
        EXPECT_FALSE(std::filesystem::exists(state_ + "/krbd"));
        Install("rbd0");
      });
  auto record = attacher->Attach(Spec(false, kImageId, /*key=*/""));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
}

TEST_F(KrbdConnectorTest, CephConfAndMapOptionsArePassed) {
  KrbdConnectorOptions o = Options();
  o.ceph_conf = "/etc/ceph/cluster-a.conf";
  o.map_options = "ms_mode=prefer-crc";
  VolumeAttacherImpl attacher(state_, MachineHost(), MakeKrbdConnector(std::move(o)));
  ASSERT_TRUE(attacher.Start().ok());
  executor_
      ->ExpectOk({"rbd", "device", "map", "--pool", "rbd", "--id", "blockcsi", "-m", "127.0.0.1:20372", "--keyfile",
                  KeyFile(), "-c", "/etc/ceph/cluster-a.conf", "--options", "noudev,ms_mode=prefer-crc", kImage},
                 Data("map_rbd0.stdout"))
      .Then(Installs("rbd0"));
  ASSERT_TRUE(attacher.Attach(Spec()).ok());
}

TEST_F(KrbdConnectorTest, FailedMapRemovesTheKeyFileAndSaysWhy) {
  auto attacher = MakeAttacher();
  bool checked = false;
  // Captured on this machine: no rbd kernel module.
  executor_->Expect(MapArgv(), Failed(2, "map_no_kernel_module.stderr")).Then(KeyFileIsPrivate(&checked));
  auto record = attacher->Attach(Spec());
  ASSERT_FALSE(record.ok());
  EXPECT_TRUE(checked);
  EXPECT_FALSE(std::filesystem::exists(KeyFile()));
  EXPECT_EQ(record.status().code(), StatusCode::kFailedPrecondition) << record.status().ToString();
  EXPECT_NE(record.status().message().find("vol-1"), std::string::npos);
  EXPECT_NE(record.status().message().find("kernel module"), std::string::npos) << record.status().message();
  EXPECT_EQ(record.status().message().find(kKey), std::string::npos);
  // Nothing was mapped, so nothing was unmapped, and no record is left.
  EXPECT_FALSE(attacher->Get("vol-1").ok());
}

TEST_F(KrbdConnectorTest, RefusedKeyIsPermissionDenied) {
  auto attacher = MakeAttacher();
  executor_->Expect(MapArgv(), Failed(13, "map_permission_denied.stderr"));
  auto record = attacher->Attach(Spec());
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kPermissionDenied) << record.status().ToString();
  EXPECT_NE(record.status().message().find("vol-1"), std::string::npos);
  EXPECT_NE(record.status().message().find("blockcsi"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(KeyFile()));
}

TEST_F(KrbdConnectorTest, TimedOutMapIsCleanedUpEvenWhenTheKernelFinishesIt) {
  auto attacher = MakeAttacher();
  // The command is killed, but the kernel completed the mapping meanwhile:
  // the failed attach must not leave it behind.
  executor_->ExpectError(MapArgv(), DeadlineExceeded("`rbd device map ...` did not finish within 120000ms"))
      .Then(Installs("rbd0"));
  executor_->ExpectOk(UnmapArgv("/dev/rbd0"));
  auto record = attacher->Attach(Spec());
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kDeadlineExceeded) << record.status().ToString();
  EXPECT_NE(record.status().message().find("vol-1"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(KeyFile()));
  EXPECT_FALSE(attacher->Get("vol-1").ok());
}

TEST_F(KrbdConnectorTest, WrongImageIdIsUnmappedAndRefused) {
  auto attacher = MakeAttacher();
  // publish_context promises another image id than the image now has (the
  // image was deleted and re-created under the same name).
  executor_->ExpectOk(MapArgv(), Data("map_rbd0.stdout")).Then(Installs("rbd0"));
  executor_->ExpectOk(UnmapArgv("/dev/rbd0"));
  auto record = attacher->Attach(Spec(false, "10a1b2c3d4e5"));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kFailedPrecondition) << record.status().ToString();
  EXPECT_NE(record.status().message().find("vol-1"), std::string::npos);
  EXPECT_NE(record.status().message().find(kImageId), std::string::npos) << record.status().message();
  EXPECT_NE(record.status().message().find("10a1b2c3d4e5"), std::string::npos) << record.status().message();
  EXPECT_FALSE(attacher->Get("vol-1").ok());
}

TEST_F(KrbdConnectorTest, ExistingMappingOfTheImageIsReusedNotMappedTwice) {
  // Left by a plugin that died between the map and the record.
  Install("rbd0");
  auto attacher = MakeAttacher();
  auto record = attacher->Attach(Spec());
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->device_path, "/dev/rbd0");
  EXPECT_EQ(record->connector_state.at("rbd_dev_id"), "0");
  EXPECT_TRUE(executor_->RedactedLog().empty());
}

TEST_F(KrbdConnectorTest, ExistingMappingWithAnotherAccessModeIsRefused) {
  Install("rbd0");  // read-write
  auto attacher = MakeAttacher();
  executor_->ExpectOk(UnmapArgv("/dev/rbd0"));  // the failed attach cleans up its own image's mapping
  auto record = attacher->Attach(Spec(/*read_only=*/true));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kFailedPrecondition) << record.status().ToString();
  EXPECT_NE(record.status().message().find("read-only"), std::string::npos) << record.status().message();
}

TEST_F(KrbdConnectorTest, MappingOfAnotherImageIsNotReused) {
  Install("rbd1_orphan");
  auto attacher = MakeAttacher();
  executor_->ExpectOk(MapArgv(), Data("map_rbd0.stdout")).Then(Installs("rbd0"));
  auto record = attacher->Attach(Spec());
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->device_path, "/dev/rbd0");
}

TEST_F(KrbdConnectorTest, UnmapToleratesAnAlreadyUnmappedDevice) {
  Install("rbd0");
  auto attacher = MakeAttacher();
  ASSERT_TRUE(attacher->Attach(Spec()).ok());
  // Captured: what rbd says when the device is gone by the time it looks.
  executor_->Expect(UnmapArgv("/dev/rbd0"), Failed(22, "unmap_not_block_device.stderr"));
  Status st = attacher->Detach("vol-1");
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(attacher->Get("vol-1").ok());
}

TEST_F(KrbdConnectorTest, DetachWithNothingMappedRunsNothing) {
  Install("rbd0");
  auto attacher = MakeAttacher();
  ASSERT_TRUE(attacher->Attach(Spec()).ok());
  std::filesystem::remove_all(Root("/sys/bus/rbd"));  // the node rebooted
  EXPECT_TRUE(attacher->Detach("vol-1").ok());
}

TEST_F(KrbdConnectorTest, BusyDeviceIsNotUnmappedAndTheErrorNamesTheVolume) {
  Install("rbd0");
  auto attacher = MakeAttacher();
  ASSERT_TRUE(attacher->Attach(Spec()).ok());
  executor_->Expect(UnmapArgv("/dev/rbd0"), Failed(16, "unmap_busy.stderr"));
  Status st = attacher->Detach("vol-1");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("vol-1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("/dev/rbd0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("busy"), std::string::npos) << st.message();
  // The record stays for the retry.
  EXPECT_TRUE(attacher->Get("vol-1").ok());
}

TEST_F(KrbdConnectorTest, RecordedDeviceNowMappingAnotherImageIsLeftAlone) {
  Install("rbd0");
  auto attacher = MakeAttacher();
  ASSERT_TRUE(attacher->Attach(Spec()).ok());
  // Our image was unmapped by hand and rbd0 now belongs to someone else.
  Write("/sys/devices/rbd/0/name", std::string(kOrphanImage) + "\n");
  Write("/sys/devices/rbd/0/image_id", "10494c3d5e7a\n");
  AttachHealth health = attacher->Check("vol-1");
  EXPECT_TRUE(health.abnormal);
  EXPECT_NE(health.message.find(kOrphanImage), std::string::npos) << health.message;
  EXPECT_TRUE(attacher->Detach("vol-1").ok());  // no unmap expected
}

TEST_F(KrbdConnectorTest, RescanRefreshesAndReadsTheNewSize) {
  Install("rbd0");
  auto attacher = MakeAttacher();
  ASSERT_TRUE(attacher->Attach(Spec()).ok());
  Write("/sys/devices/rbd/0/size", "2147483648\n");  // the image was grown
  auto size = attacher->Rescan("vol-1");
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, 2ull << 30);
  EXPECT_EQ(testing::ReadFileOrEmpty(Root("/sys/devices/rbd/0/refresh")), "1");
  EXPECT_EQ(attacher->Get("vol-1")->size_bytes, 2ull << 30);
}

TEST_F(KrbdConnectorTest, CheckReportsAChangedImageIdAndAMissingDevice) {
  Install("rbd0");
  auto attacher = MakeAttacher();
  ASSERT_TRUE(attacher->Attach(Spec()).ok());
  ASSERT_FALSE(attacher->Check("vol-1").abnormal);

  Write("/sys/devices/rbd/0/image_id", "10a1b2c3d4e5\n");
  AttachHealth changed = attacher->Check("vol-1");
  EXPECT_TRUE(changed.abnormal);
  EXPECT_NE(changed.message.find("10a1b2c3d4e5"), std::string::npos) << changed.message;
  EXPECT_NE(changed.message.find(kImageId), std::string::npos) << changed.message;

  Write("/sys/devices/rbd/0/image_id", std::string(kImageId) + "\n");
  std::filesystem::remove(Root("/dev/rbd0"));
  AttachHealth gone = attacher->Check("vol-1");
  EXPECT_TRUE(gone.abnormal);
  EXPECT_NE(gone.message.find("/dev/rbd0"), std::string::npos) << gone.message;
}

TEST_F(KrbdConnectorTest, ReconcileRefreshesMovedDevicesReportsOrphansAndRemovesKeyLeftovers) {
  // A record whose image is now mapped at rbd0 (it said rbd3), an orphan
  // mapping of one of our images, and a key file a crash left behind.
  Install("rbd0");
  Install("rbd1_orphan");
  AttachRecordStore store(state_, MachineHost());
  ASSERT_TRUE(store.Init().ok());
  AttachRecord r = krbd_captured::ImageRecord("vol-1", "krbd", "/dev/rbd3");
  r.connector_state["rbd_dev_id"] = "3";
  ASSERT_TRUE(store.Put(r).ok());
  ASSERT_TRUE(MakeDirectories(state_ + "/krbd").ok());
  ASSERT_TRUE(WriteFileAtomically(state_ + "/krbd/vol-9.key", "left-behind").ok());

  auto attacher = MakeAttacher();  // Start() reconciles; no command may run
  auto after = attacher->Get("vol-1");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->device_path, "/dev/rbd0");
  EXPECT_EQ(after->connector_state.at("rbd_dev_id"), "0");
  EXPECT_FALSE(attacher->Check("vol-1").abnormal) << attacher->Check("vol-1").message;
  EXPECT_FALSE(std::filesystem::exists(state_ + "/krbd/vol-9.key"));
  EXPECT_NE(logs_.find("/dev/rbd1"), std::string::npos) << logs_;
  EXPECT_NE(logs_.find(kOrphanImage), std::string::npos) << logs_;
  EXPECT_TRUE(executor_->RedactedLog().empty());
}

// A plugin killed while it wrote a key file leaves "<volume>.key.tmp-<n>"
// (the write is temp + rename): holding the key, so removed like the file.
TEST_F(KrbdConnectorTest, ReconcileRemovesTheTempFileOfAnInterruptedKeyWrite) {
  ASSERT_TRUE(MakeDirectories(state_ + "/krbd").ok());
  ASSERT_TRUE(WriteFileAtomically(state_ + "/krbd/vol-9.key.tmp-123", kKey).ok());
  ASSERT_TRUE(WriteFileAtomically(state_ + "/krbd/unrelated", "kept").ok());
  auto attacher = MakeAttacher();
  EXPECT_FALSE(std::filesystem::exists(state_ + "/krbd/vol-9.key.tmp-123"));
  EXPECT_TRUE(std::filesystem::exists(state_ + "/krbd/unrelated")) << "only key files are ours to remove";
}

// Someone who could write into the key directory planted a symlink where
// the key file goes: the key is written beside it and renamed over it,
// never through it.
TEST_F(KrbdConnectorTest, AKeyFileIsNeverWrittenThroughASymlink) {
  auto attacher = MakeAttacher();
  const std::string elsewhere = dir_.Join("elsewhere");
  ASSERT_TRUE(WriteFileAtomically(elsewhere, "untouched").ok());
  ASSERT_TRUE(MakeDirectories(state_ + "/krbd").ok());
  ASSERT_EQ(::symlink(elsewhere.c_str(), KeyFile().c_str()), 0);
  bool checked = false;
  executor_->ExpectOk(MapArgv(), Data("map_rbd0.stdout")).Then([&] {
    KeyFileIsPrivate (&checked)();
    Install("rbd0");
  });
  ASSERT_TRUE(attacher->Attach(Spec()).ok());
  EXPECT_TRUE(checked);
  EXPECT_EQ(testing::ReadFileOrEmpty(elsewhere), "untouched");
  EXPECT_FALSE(std::filesystem::exists(KeyFile()));
  EXPECT_FALSE(std::filesystem::is_symlink(KeyFile()));
}

TEST_F(KrbdConnectorTest, SysfsParserReadsTheKernelsAttributes) {
  Install("rbd0");
  auto fs = HostRootedAt(root_);
  auto m = ReadKrbdMapping(*fs, "0");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->pool, "rbd");
  EXPECT_EQ(m->pool_ns, "");
  EXPECT_EQ(m->image, kImage);
  EXPECT_EQ(m->image_id, kImageId);
  EXPECT_EQ(m->snap, "-");
  EXPECT_EQ(m->size_bytes, 1ull << 30);
  EXPECT_EQ(m->device(), "/dev/rbd0");
  EXPECT_EQ(ReadKrbdMapping(*fs, "7").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadKrbdMapping(*fs, "../0").status().code(), StatusCode::kInvalidArgument);
  Install("rbd1_orphan");
  auto all = ListKrbdMappings(*fs);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].image, kOrphanImage);
  EXPECT_TRUE(ListKrbdMappings(*HostRootedAt(dir_.Join("empty"))).empty());
}

}  // namespace
}  // namespace blockcsi
