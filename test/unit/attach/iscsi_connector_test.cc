// The kernel (open-iscsi) connector without a kernel: a FakeExecutor that
// expects the exact iscsiadm/blockdev/multipath argv and replays output
// captured from real runs (test/testdata/iscsiadm), and a fake sysfs tree
// (test/testdata/sysfs) that the "kernel" fills in as logins happen.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>

#include "attach/iscsi_connector.h"
#include "attach/volume_attacher_impl.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "support/fake_executor.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

using testing::FakeExecutor;

constexpr char kTarget[] = "iqn.2026-11.io.blockcsi:vol-7f3a9c2e";
constexpr char kP1[] = "192.0.2.10:3260";
constexpr char kP2[] = "192.0.2.11:3260";
constexpr char kSerial[] = "bc7f3a9c2e41d08b";
constexpr char kWwn[] = "6000000000000000000000007f3a9c2e";
const std::string kInitiator = InitiatorIqnForNode("worker-1");

std::string Data(const std::string& name) {
  auto text = ReadFileToString(testing::TestDataPath("iscsiadm/" + name));
  EXPECT_TRUE(text.ok()) << name;
  return text.ok() ? *text : "";
}

// Time moves only when someone sleeps; `on_sleep_` plays the kernel or
// multipathd doing something meanwhile. Thread-safe (paths wait in parallel).
class FakeClock final : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  std::chrono::system_clock::time_point WallNow() const override { return {}; }
  void Sleep(std::chrono::milliseconds d) override {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
    ++sleeps_;
    if (on_sleep_) on_sleep_(sleeps_);
  }
  int sleeps() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sleeps_;
  }
  std::function<void(int)> on_sleep_;  // set before the clock is shared

 private:
  mutable std::mutex mu_;
  int sleeps_ = 0;                               // guarded by mu_
  std::chrono::steady_clock::time_point now_{};  // guarded by mu_
};

class IscsiConnectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.Join("root");
    std::filesystem::create_directories(root_ + "/sys/class/iscsi_session");
    std::filesystem::create_directories(root_ + "/sys/block");
    state_ = dir_.Join("state");
    executor_ = std::make_shared<FakeExecutor>();
    clock_ = std::make_shared<FakeClock>();
  }

  void TearDown() override {
    EXPECT_TRUE(executor_->Pending().empty()) << "expected commands never ran: " << executor_->Pending().front();
  }

  std::unique_ptr<VolumeAttacherImpl> MakeAttacher() {
    IscsiConnectorOptions o;
    o.executor = executor_;
    o.host_fs = HostRootedAt(root_);
    o.clock = clock_;
    o.iface = "blockcsi";
    o.initiator_iqn = kInitiator;
    o.login_timeout = std::chrono::seconds(30);
    o.login_retries = 2;
    o.device_wait = std::chrono::seconds(60);
    o.multipath_wait = std::chrono::seconds(30);
    auto a = std::make_unique<VolumeAttacherImpl>(state_, MachineHost(), MakeIscsiConnector(std::move(o)));
    EXPECT_TRUE(a->Start().ok());
    return a;
  }

  // Copies a captured sysfs scenario into the fake root (merging trees).
  void Install(const std::string& scenario) {
    testing::MergeTreeInto(testing::TestDataPath("sysfs/" + scenario), root_);
  }
  std::function<void()> Installs(const std::string& scenario) {
    return [this, scenario] { Install(scenario); };
  }
  std::string Sys(const std::string& path) { return root_ + "/sys" + path; }

  AttachSpec Spec(const std::string& portals, int lun = 1, std::map<std::string, std::string> secrets = {}) {
    std::map<std::string, std::string> context = {{publish_context::kPortals, portals},
                                                  {publish_context::kTargetIqn, kTarget},
                                                  {publish_context::kLun, std::to_string(lun)},
                                                  {publish_context::kSerial, kSerial},
                                                  {publish_context::kWwn, kWwn}};
    if (!secrets.empty()) context[publish_context::kChapRequired] = "true";
    auto spec = ParseAttachSpec("vol-1", context, secrets, kInitiator);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    return *spec;
  }

  static std::vector<std::string> Node(const std::string& portal, std::vector<std::string> rest,
                                       const std::string& iface = "blockcsi") {
    std::vector<std::string> argv = {"iscsiadm", "-m", "node", "-T", kTarget, "-p", portal, "-I", iface};
    argv.insert(argv.end(), rest.begin(), rest.end());
    return argv;
  }
  void ExpectIfaceOk() {
    executor_->ExpectOk({"iscsiadm", "-m", "iface", "-I", "blockcsi", "-o", "show"}, Data("iface_show_blockcsi.txt"));
  }
  // A new record at kP1 and a login that succeeds, after which session1 is
  // in sysfs but the LUN's disk (target3:0:0) is not.
  void ExpectLoginWithoutTheDisk() {
    ExpectNodeRecord(kP1, Data("node_new_portal1.txt"));
    executor_->ExpectOk(Node(kP1, {"--login"}), Data("login_portal1.txt")).Then([this] {
      Install("session1_lun1");
      std::filesystem::remove_all(Sys("/devices/platform/host3/session1/target3:0:0"));
    });
  }
  // Attach(Spec(kP1)) succeeds on session1_lun1's disk.
  void ExpectAttachesSdc(VolumeAttacherImpl& attacher) {
    auto record = attacher.Attach(Spec(kP1));
    ASSERT_TRUE(record.ok()) << record.status().ToString();
    EXPECT_EQ(record->device_path, "/dev/sdc");
  }
  // A static volume (LUN 1 of kTarget at kP1) that logs in as `initiator_name`.
  static StatusOr<AttachSpec> StaticSpec(const std::string& initiator_name) {
    return ParseAttachSpec("vol-1",
                           {{publish_context::kPortals, kP1},
                            {publish_context::kTargetIqn, kTarget},
                            {publish_context::kLun, "1"},
                            {publish_context::kStatic, "true"},
                            {publish_context::kInitiatorName, initiator_name}},
                           {}, kInitiator);
  }
  // Portal `n` (1: kP1, 2: kP2) gets a new node record and logs in, after
  // which the "kernel" shows the session `sysfs` (testdata/sysfs).
  void ExpectRecordAndLogin(int n, const std::string& sysfs) {
    const std::string portal = n == 1 ? kP1 : kP2;
    ExpectNodeRecord(portal, Data("node_new_portal" + std::to_string(n) + ".txt"));
    executor_->ExpectOk(Node(portal, {"--login"}), Data("login_portal" + std::to_string(n) + ".txt"))
        .Then(Installs(sysfs));
  }
  // Where `iscsiadm -o new` (no tpgt) puts the record: <nodes>/<iqn>/<ip>,<port>.
  std::string RecordFile(const std::string& portal) {
    std::string flat = portal;
    flat[flat.rfind(':')] = ',';
    return root_ + "/etc/iscsi/nodes/" + kTarget + "/" + flat;
  }
  // A record as open-iscsi 2.1.8 wrote it (captured from the real iscsiadm).
  void InstallRecord(const std::string& file) {
    std::string text = Data("node_record_new_portal1.txt");
    text.replace(text.find("TARGET"), 6, kTarget);
    std::filesystem::create_directories(std::filesystem::path(file).parent_path());
    ASSERT_TRUE(WriteFileAtomically(file, text).ok());
  }
  void ExpectNodeRecord(const std::string& portal, const std::string& new_output, bool chap = false,
                        const std::string& iface = "blockcsi") {
    executor_->ExpectOk(Node(portal, {"-o", "new"}, iface), new_output).Then([this, portal] {
      InstallRecord(RecordFile(portal));
    });
    auto update = [&](const std::string& key, const std::string& value) {
      executor_->ExpectOk(Node(portal, {"-o", "update", "-n", key, "-v", value}, iface));
    };
    update("node.startup", "manual");
    update("node.session.scan", "manual");
    update("node.conn[0].timeo.login_timeout", "30");
    update("node.session.initial_login_retry_max", "1");
    if (!chap) {
      update("node.session.auth.authmethod", "None");
      return;
    }
    // CHAP: no iscsiadm call at all; the record file is rewritten.
  }
  void ExpectLogoutAndDelete(const std::string& portal, const std::string& logout_output) {
    executor_->ExpectOk(Node(portal, {"--logout"}), logout_output);
    executor_->ExpectOk(Node(portal, {"-o", "delete"}));
  }

  testing::TempDir dir_;
  std::string root_;
  std::string state_;
  std::shared_ptr<FakeExecutor> executor_;
  std::shared_ptr<FakeClock> clock_;
};

TEST_F(IscsiConnectorTest, LogsInScansTheLunAndResolvesTheDiskThroughSysfs) {
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ExpectRecordAndLogin(1, "session1_lun1");
  auto record = attacher->Attach(Spec(kP1));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->device_path, "/dev/sdc");
  EXPECT_EQ(record->size_bytes, 1ull << 30);
  EXPECT_EQ(record->connector_state.at("session." + std::string(kP1)), "1");
  // Only our LUN was scanned, on the session's own host.
  EXPECT_EQ(testing::ReadFileOrEmpty(Sys("/class/scsi_host/host3/scan")), "- - 1");
  EXPECT_FALSE(attacher->Check("vol-1").abnormal) << attacher->Check("vol-1").message;

  executor_->ExpectOk({"blockdev", "--flushbufs", "/dev/sdc"});
  ExpectLogoutAndDelete(kP1, Data("logout_portal1.txt"));
  ASSERT_TRUE(attacher->Detach("vol-1").ok());
  EXPECT_EQ(testing::ReadFileOrEmpty(Sys("/devices/platform/host3/session1/target3:0:0/3:0:0:1/delete")), "1");
}

TEST_F(IscsiConnectorTest, AlreadyLoggedInSessionIsReused) {
  Install("session1_lun1");
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ExpectAttachesSdc(*attacher);
}

TEST_F(IscsiConnectorTest, LoginRacingAnotherLoginCountsAsLoggedIn) {
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ExpectNodeRecord(kP1, Data("node_new_portal1.txt"));
  executor_->ExpectFail(Node(kP1, {"--login"}), 15, Data("login_session_exists.stderr"))
      .Then(Installs("session1_lun1"));
  EXPECT_TRUE(attacher->Attach(Spec(kP1)).ok());
}

TEST_F(IscsiConnectorTest, CreatesTheIfaceWithTheNodesInitiatorName) {
  auto attacher = MakeAttacher();
  executor_->ExpectFail({"iscsiadm", "-m", "iface", "-I", "blockcsi", "-o", "show"}, 6,
                        Data("iface_show_missing.stderr"));
  executor_->ExpectOk({"iscsiadm", "-m", "iface", "-I", "blockcsi", "-o", "new"}, Data("iface_new.txt"));
  executor_->ExpectOk(
      {"iscsiadm", "-m", "iface", "-I", "blockcsi", "-o", "update", "-n", "iface.initiatorname", "-v", kInitiator},
      Data("iface_update.txt"));
  Install("session1_lun1");
  EXPECT_TRUE(attacher->Attach(Spec(kP1)).ok());
}

TEST_F(IscsiConnectorTest, ChapIsWrittenIntoTheNodeRecordFileNeverOnArgv) {
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ExpectNodeRecord(kP1, Data("node_new_portal1.txt"), /*chap=*/true);
  executor_->ExpectOk(Node(kP1, {"--login"}), Data("login_portal1.txt")).Then(Installs("session1_lun1"));
  std::string logs;
  SetLogCaptureForTest(&logs);
  ASSERT_TRUE(LogEnabled(LogLevel::kDebug)) << "the secret check would miss what is logged at debug";
  auto record = attacher->Attach(Spec(kP1, 1,
                                      {{secret_keys::kChapUsername, "alice"},
                                       {secret_keys::kChapPassword, "alice-secret-1"},
                                       {secret_keys::kChapMutualUsername, "array"},
                                       {secret_keys::kChapMutualPassword, "array-secret-2"}}));
  SetLogCaptureForTest(nullptr);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  for (const auto& line : executor_->RedactedLog()) {
    EXPECT_EQ(line.find("secret-"), std::string::npos) << line;
  }
  EXPECT_EQ(logs.find("secret-"), std::string::npos);
  // No argv held a secret: every command run matched one of the exact,
  // secret-free argv lists ExpectNodeRecord queued (an unexpected one fails).
  auto text = ReadFileToString(state_ + "/attachments/vol-1.json");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->find("secret-"), std::string::npos);
  // The record: auth lines where iscsiadm itself writes them (after
  // authmethod), every other line unchanged, owner-only.
  auto rec = ReadFileToString(RecordFile(kP1));
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  std::string want = Data("node_record_new_portal1.txt");
  want.replace(want.find("TARGET"), 6, kTarget);
  want.replace(want.find("node.session.auth.authmethod = None\n"), 36,
               "node.session.auth.authmethod = CHAP\n"
               "node.session.auth.username = alice\n"
               "node.session.auth.password = alice-secret-1\n"
               "node.session.auth.username_in = array\n"
               "node.session.auth.password_in = array-secret-2\n");
  EXPECT_EQ(*rec, want);
  EXPECT_EQ(std::filesystem::status(RecordFile(kP1)).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

// Discovery's layout <ip>,<port>,<tpgt>/<iface>: found whatever the tpgt;
// records of another port or iface are left alone.
TEST_F(IscsiConnectorTest, ChapFindsTheRecordOfOurPortalAndIfaceWhateverTheTpgt) {
  std::map<std::string, std::string> chap = {{secret_keys::kChapUsername, "alice"},
                                             {secret_keys::kChapPassword, "alice-secret-1"}};
  std::string dir = root_ + "/etc/iscsi/nodes/" + std::string(kTarget);
  {
    auto attacher = MakeAttacher();
    ExpectIfaceOk();
    executor_->ExpectOk(Node(kP1, {"-o", "new"}), Data("node_new_portal1.txt")).Then([this, dir] {
      InstallRecord(dir + "/192.0.2.10,3260,1/blockcsi");
      InstallRecord(dir + "/192.0.2.10,32600,1/blockcsi");    // another port: not ours
      InstallRecord(dir + "/192.0.2.10,3260,2/other-iface");  // another iface: not ours
    });
    for (auto [k, v] :
         std::vector<std::pair<std::string, std::string>>{{"node.startup", "manual"},
                                                          {"node.session.scan", "manual"},
                                                          {"node.conn[0].timeo.login_timeout", "30"},
                                                          {"node.session.initial_login_retry_max", "1"}}) {
      executor_->ExpectOk(Node(kP1, {"-o", "update", "-n", k, "-v", v}));
    }
    executor_->ExpectOk(Node(kP1, {"--login"}), Data("login_portal1.txt")).Then(Installs("session1_lun1"));
    ASSERT_TRUE(attacher->Attach(Spec(kP1, 1, chap)).ok());
    EXPECT_NE(testing::ReadFileOrEmpty(dir + "/192.0.2.10,3260,1/blockcsi")
                  .find("node.session.auth.password = alice-secret-1\n"),
              std::string::npos);
    EXPECT_EQ(testing::ReadFileOrEmpty(dir + "/192.0.2.10,32600,1/blockcsi").find("alice"), std::string::npos);
    EXPECT_EQ(testing::ReadFileOrEmpty(dir + "/192.0.2.10,3260,2/other-iface").find("alice"), std::string::npos);
  }
}

TEST_F(IscsiConnectorTest, ChapWithTwoRecordsForThePortalIsRefusedAndCleanedUp) {
  std::string dir = root_ + "/etc/iscsi/nodes/" + std::string(kTarget);
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  executor_->ExpectOk(Node(kP1, {"-o", "new"}), Data("node_new_portal1.txt")).Then([this, dir] {
    InstallRecord(dir + "/192.0.2.10,3260");
    InstallRecord(dir + "/192.0.2.10,3260,1/blockcsi");
  });
  for (auto [k, v] : std::vector<std::pair<std::string, std::string>>{{"node.startup", "manual"},
                                                                      {"node.session.scan", "manual"},
                                                                      {"node.conn[0].timeo.login_timeout", "30"},
                                                                      {"node.session.initial_login_retry_max", "1"}}) {
    executor_->ExpectOk(Node(kP1, {"-o", "update", "-n", k, "-v", v}));
  }
  executor_->ExpectOk(Node(kP1, {"-o", "delete"}));
  auto record = attacher->Attach(
      Spec(kP1, 1, {{secret_keys::kChapUsername, "alice"}, {secret_keys::kChapPassword, "alice-secret-1"}}));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kInternal) << record.status().ToString();
  EXPECT_NE(record.status().message().find("ambiguous"), std::string::npos) << record.status().ToString();
  EXPECT_EQ(record.status().message().find("secret"), std::string::npos);
  EXPECT_EQ(testing::ReadFileOrEmpty(dir + "/192.0.2.10,3260").find("alice"), std::string::npos);
  EXPECT_EQ(attacher->Get("vol-1").status().code(), StatusCode::kNotFound);
}

// Issue #24: a static PV's initiatorName logs in through an iface of its
// own that carries that name (the node's iface stays as it is); the session
// sysfs shows is logged in as that initiator, and the detach goes through
// the same iface.
TEST_F(IscsiConnectorTest, StaticVolumeLogsInAsItsInitiatorNameThroughAnIfaceOfItsOwn) {
  const std::string legacy = "iqn.1994-05.com.example:legacy";
  const std::string iface = "blockcsi-40f33eb6b30053a4";  // FNV-1a 64 of the name
  auto attacher = MakeAttacher();
  auto spec = StaticSpec(legacy);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  executor_->ExpectFail({"iscsiadm", "-m", "iface", "-I", iface, "-o", "show"}, 6,
                        Data("iface_show_missing_legacy.stderr"));
  executor_->ExpectOk({"iscsiadm", "-m", "iface", "-I", iface, "-o", "new"}, Data("iface_new_legacy.txt"));
  executor_->ExpectOk(
      {"iscsiadm", "-m", "iface", "-I", iface, "-o", "update", "-n", "iface.initiatorname", "-v", legacy},
      Data("iface_update_legacy.txt"));
  ExpectNodeRecord(kP1, Data("node_new_portal1.txt"), false, iface);
  executor_->ExpectOk(Node(kP1, {"--login"}, iface), Data("login_portal1.txt"))
      .Then(Installs("session1_lun1_legacy_initiator"));
  auto record = attacher->Attach(*spec);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->device_path, "/dev/sdc");
  EXPECT_EQ(record->connector_state.at("iface"), iface);
  EXPECT_EQ(testing::ReadFileOrEmpty(Sys("/class/iscsi_session/session1/initiatorname")), legacy + "\n");

  executor_->ExpectOk({"blockdev", "--flushbufs", "/dev/sdc"});
  executor_->ExpectOk(Node(kP1, {"--logout"}, iface), Data("logout_portal1.txt"));
  executor_->ExpectOk(Node(kP1, {"-o", "delete"}, iface));
  ASSERT_TRUE(attacher->Detach("vol-1").ok());
}

// The iface already exists with that name (a second volume of the same
// array, or a restart): reused as it is. A session logged in as another
// name (the iface was edited by hand) is refused, and nothing is left.
TEST_F(IscsiConnectorTest, StaticVolumeWhoseSessionCarriesAnotherNameIsRefused) {
  const std::string legacy = "iqn.1994-05.com.example:legacy";
  const std::string iface = "blockcsi-40f33eb6b30053a4";
  auto attacher = MakeAttacher();
  auto spec = StaticSpec(legacy);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  executor_->ExpectOk({"iscsiadm", "-m", "iface", "-I", iface, "-o", "show"}, Data("iface_show_legacy.txt"));
  ExpectNodeRecord(kP1, Data("node_new_portal1.txt"), false, iface);
  // The "kernel" logs in with the node's own name (session1_lun1).
  executor_->ExpectOk(Node(kP1, {"--login"}, iface), Data("login_portal1.txt")).Then([this] {
    Install("session1_lun1");
    std::ofstream(Sys("/devices/platform/host3/session1/iscsi_session/session1/ifacename"))
        << "blockcsi-40f33eb6b30053a4\n";
  });
  // The rollback: the device the session brought is flushed, the session
  // and the node record go.
  executor_->ExpectOk({"blockdev", "--flushbufs", "/dev/sdc"});
  executor_->ExpectOk(Node(kP1, {"--logout"}, iface), Data("logout_portal1.txt"));
  executor_->ExpectOk(Node(kP1, {"-o", "delete"}, iface));
  auto record = attacher->Attach(*spec);
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kFailedPrecondition) << record.status().ToString();
  EXPECT_NE(record.status().message().find("logged in as " + kInitiator), std::string::npos)
      << record.status().ToString();
  EXPECT_EQ(attacher->Get("vol-1").status().code(), StatusCode::kNotFound);
}

TEST_F(IscsiConnectorTest, RejectedChapIsPermissionDeniedAndLeavesNoNodeRecord) {
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ExpectNodeRecord(kP1, Data("node_new_portal1.txt"));
  executor_->ExpectFail(Node(kP1, {"--login"}), 24, Data("login_auth_failed.stderr"));
  // Cleanup: no session to log out of; the node record goes.
  executor_->ExpectOk(Node(kP1, {"-o", "delete"}));
  auto record = attacher->Attach(Spec(kP1));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kPermissionDenied) << record.status().ToString();
  EXPECT_NE(record.status().message().find(kInitiator), std::string::npos);
  EXPECT_EQ(attacher->Get("vol-1").status().code(), StatusCode::kNotFound);
}

// iscsiadm's exit 19 (seen on a real kernel when the target's answer to
// mutual CHAP is wrong) says the login will not succeed however often it is
// tried: one attempt, a final code, no node record left.
TEST_F(IscsiConnectorTest, NonRetryableLoginFailureIsFinalAndTriedOnce) {
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ExpectNodeRecord(kP1, Data("node_new_portal1.txt"));
  executor_->ExpectFail(Node(kP1, {"--login"}), 19, Data("login_fatal.stderr"));
  executor_->ExpectOk(Node(kP1, {"-o", "delete"}));
  auto record = attacher->Attach(Spec(kP1));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kFailedPrecondition) << record.status().ToString();
  EXPECT_NE(record.status().message().find("non-retryable"), std::string::npos) << record.status().ToString();
  EXPECT_EQ(attacher->Get("vol-1").status().code(), StatusCode::kNotFound);
}

TEST_F(IscsiConnectorTest, DeviceThatNeverAppearsTimesOutAndLogsOut) {
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ExpectLoginWithoutTheDisk();
  ExpectLogoutAndDelete(kP1, Data("logout_portal1.txt"));
  auto record = attacher->Attach(Spec(kP1));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kDeadlineExceeded) << record.status().ToString();
  EXPECT_NE(record.status().message().find("did not appear"), std::string::npos);
  EXPECT_GT(clock_->sleeps(), 10);
}

TEST_F(IscsiConnectorTest, DeviceThatAppearsLateIsFound) {
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ExpectLoginWithoutTheDisk();
  clock_->on_sleep_ = [this](int n) {
    if (n == 3) Install("session1_lun1");
  };
  ExpectAttachesSdc(*attacher);
}

TEST_F(IscsiConnectorTest, DiskIsTakenOnlyOnceSysBlockLinksIt) {
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ExpectNodeRecord(kP1, Data("node_new_portal1.txt"));
  // The kernel shows the disk under its SCSI device a moment before it links
  // it into /sys/block (seen on a real kernel): no size to read there yet.
  executor_->ExpectOk(Node(kP1, {"--login"}), Data("login_portal1.txt")).Then([this] {
    Install("session1_lun1");
    std::filesystem::remove(Sys("/block/sdc"));
  });
  clock_->on_sleep_ = [this](int n) {
    if (n == 3) Install("session1_lun1");
  };
  ExpectAttachesSdc(*attacher);
  EXPECT_GE(clock_->sleeps(), 3);
}

TEST_F(IscsiConnectorTest, MultipathUsesTheDmDeviceWhenAllPathsAgree) {
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ExpectRecordAndLogin(1, "session1_lun1");
  ExpectRecordAndLogin(2, "session2_lun1");
  // multipathd assembles the map a moment after both paths exist.
  clock_->on_sleep_ = [this](int) {
    if (std::filesystem::exists(Sys("/block/sdc")) && std::filesystem::exists(Sys("/block/sdd")) &&
        !std::filesystem::exists(Sys("/block/dm-0"))) {
      Install("mpath_dm0");
    }
  };
  executor_->InAnyOrder();  // the two portals log in in parallel
  auto record = attacher->Attach(Spec(std::string(kP1) + "," + kP2));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->device_path, "/dev/dm-0");
  EXPECT_EQ(record->connector_state.at("dm"), "dm-0");

  executor_->ExpectOk({"blockdev", "--flushbufs", "/dev/dm-0"});
  executor_->ExpectOk({"multipath", "-f", "mpatha"});
  ExpectLogoutAndDelete(kP1, Data("logout_portal1.txt"));
  ExpectLogoutAndDelete(kP2, Data("logout_portal2.txt"));
  ASSERT_TRUE(attacher->Detach("vol-1").ok());
  EXPECT_EQ(testing::ReadFileOrEmpty(Sys("/devices/platform/host3/session1/target3:0:0/3:0:0:1/delete")), "1");
  EXPECT_EQ(testing::ReadFileOrEmpty(Sys("/devices/platform/host4/session2/target4:0:0/4:0:0:1/delete")), "1");
}

TEST_F(IscsiConnectorTest, PathsThatDisagreeAreRefusedAndCleanedUp) {
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ExpectRecordAndLogin(1, "session1_lun1");
  ExpectRecordAndLogin(2, "session2_lun1_other_lun");
  executor_->ExpectOk({"blockdev", "--flushbufs", "/dev/sdc"});
  ExpectLogoutAndDelete(kP1, Data("logout_portal1.txt"));
  ExpectLogoutAndDelete(kP2, Data("logout_portal2.txt"));
  executor_->InAnyOrder();  // the two portals log in in parallel
  auto record = attacher->Attach(Spec(std::string(kP1) + "," + kP2));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(record.status().message().find("paths disagree"), std::string::npos) << record.status().message();
  EXPECT_EQ(attacher->Get("vol-1").status().code(), StatusCode::kNotFound);
}

TEST_F(IscsiConnectorTest, OneDeadPortalDoesNotBlockTheOthers) {
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ExpectNodeRecord(kP1, Data("node_new_portal1.txt"));
  for (int i = 0; i < 3; ++i) {  // login_retries = 2: three bounded attempts
    executor_->ExpectFail(Node(kP1, {"--login"}), 8, Data("login_timeout_portal2.stderr"));
  }
  ExpectNodeRecord(kP2, Data("node_new_portal2.txt"));
  executor_->ExpectOk(Node(kP2, {"--login"}), Data("login_portal2.txt")).Then([this] {
    Install("session2_lun1");
    Install("mpath_dm0");
  });
  executor_->InAnyOrder();  // the two portals log in in parallel
  auto record = attacher->Attach(Spec(std::string(kP1) + "," + kP2));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->device_path, "/dev/dm-0");
  EXPECT_EQ(record->connector_state.count("session." + std::string(kP1)), 0u);

  // Detach: the dead portal has no session (its node record still goes).
  executor_->ExpectOk({"blockdev", "--flushbufs", "/dev/dm-0"});
  executor_->ExpectOk({"multipath", "-f", "mpatha"});
  executor_->ExpectFail(Node(kP1, {"-o", "delete"}), 21, Data("node_delete_no_record.stderr"));
  ExpectLogoutAndDelete(kP2, Data("logout_portal2.txt"));
  ASSERT_TRUE(attacher->Detach("vol-1").ok());
}

TEST_F(IscsiConnectorTest, AllPortalsDownIsUnavailable) {
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ExpectNodeRecord(kP1, Data("node_new_portal1.txt"));
  for (int i = 0; i < 3; ++i) executor_->ExpectFail(Node(kP1, {"--login"}), 8, Data("login_timeout_portal2.stderr"));
  executor_->ExpectOk(Node(kP1, {"-o", "delete"}));
  auto record = attacher->Attach(Spec(kP1));
  EXPECT_EQ(record.status().code(), StatusCode::kUnavailable) << record.status().ToString();
  EXPECT_NE(record.status().message().find("connection timed out"), std::string::npos);
}

TEST_F(IscsiConnectorTest, LogoutIsSkippedWhileAnotherLunOfTheTargetIsInUse) {
  Install("session1_lun1");
  Install("session1_lun2");  // another volume's LUN on the same session
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ASSERT_TRUE(attacher->Attach(Spec(kP1)).ok());
  std::string logs;
  SetLogCaptureForTest(&logs);
  executor_->ExpectOk({"blockdev", "--flushbufs", "/dev/sdc"});
  // No --logout and no node record deletion: the FakeExecutor would fail.
  ASSERT_TRUE(attacher->Detach("vol-1").ok());
  SetLogCaptureForTest(nullptr);
  EXPECT_NE(logs.find("keeping iSCSI session"), std::string::npos);
  EXPECT_EQ(testing::ReadFileOrEmpty(Sys("/devices/platform/host3/session1/target3:0:0/3:0:0:1/delete")), "1");
  EXPECT_EQ(testing::ReadFileOrEmpty(Sys("/devices/platform/host3/session1/target3:0:0/3:0:0:2/delete")), "");
}

TEST_F(IscsiConnectorTest, DetachToleratesEverythingAlreadyGone) {
  Install("session1_lun1");
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ASSERT_TRUE(attacher->Attach(Spec(kP1)).ok());
  // Someone logged out and removed the devices behind our back.
  std::filesystem::remove_all(root_ + "/sys");
  executor_->ExpectFail(Node(kP1, {"-o", "delete"}), 21, Data("node_delete_no_record.stderr"));
  ASSERT_TRUE(attacher->Detach("vol-1").ok());
  EXPECT_EQ(attacher->Get("vol-1").status().code(), StatusCode::kNotFound);
}

TEST_F(IscsiConnectorTest, WrongLunBehindTheTargetIsRefused) {
  Install("session1_lun1");
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  executor_->ExpectOk({"blockdev", "--flushbufs", "/dev/sdc"});
  ExpectLogoutAndDelete(kP1, Data("logout_portal1.txt"));
  AttachSpec spec = Spec(kP1);
  spec.expected_serial = "another-volume";
  auto record = attacher->Attach(spec);
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(record.status().message().find("wrong LUN"), std::string::npos);
}

TEST_F(IscsiConnectorTest, CheckReportsALostSession) {
  Install("session1_lun1");
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ASSERT_TRUE(attacher->Attach(Spec(kP1)).ok());
  ASSERT_TRUE(
      WriteFileAtomically(Sys("/devices/platform/host3/session1/iscsi_session/session1/state"), "FAILED\n").ok());
  AttachHealth h = attacher->Check("vol-1");
  EXPECT_TRUE(h.abnormal);
  EXPECT_NE(h.message.find("no iSCSI session"), std::string::npos) << h.message;
}

TEST_F(IscsiConnectorTest, StartReportsSessionsWithoutRecords) {
  Install("session1_lun1");
  std::string logs;
  SetLogCaptureForTest(&logs);
  auto attacher = MakeAttacher();
  SetLogCaptureForTest(nullptr);
  EXPECT_NE(logs.find("no attach record"), std::string::npos) << logs;
  EXPECT_NE(logs.find(kTarget), std::string::npos);
}

TEST_F(IscsiConnectorTest, StartReportsAnAttachedVolumeWhoseDeviceIsGone) {
  Install("session1_lun1");
  {
    auto attacher = MakeAttacher();
    ExpectIfaceOk();
    ASSERT_TRUE(attacher->Attach(Spec(kP1)).ok());
  }
  std::filesystem::remove(Sys("/block/sdc"));
  std::string logs;
  SetLogCaptureForTest(&logs);
  auto restarted = MakeAttacher();
  SetLogCaptureForTest(nullptr);
  EXPECT_NE(logs.find("lost its device"), std::string::npos) << logs;
  EXPECT_TRUE(restarted->Check("vol-1").abnormal);
}

TEST_F(IscsiConnectorTest, RescanAsksTheDiskAndReportsTheNewSize) {
  Install("session1_lun1");
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  ASSERT_TRUE(attacher->Attach(Spec(kP1)).ok());
  // The array grew the LUN to 2 GiB; the kernel reports it after the rescan.
  ASSERT_TRUE(WriteFileAtomically(Sys("/devices/platform/host3/session1/target3:0:0/3:0:0:1/block/sdc/size"),
                                  std::to_string(4 * 1024 * 1024) + "\n")
                  .ok());
  auto size = attacher->Rescan("vol-1");
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, 2ull << 30);
  EXPECT_EQ(testing::ReadFileOrEmpty(Sys("/devices/platform/host3/session1/target3:0:0/3:0:0:1/rescan")), "1");
  EXPECT_EQ(attacher->Get("vol-1")->size_bytes, 2ull << 30);
}

TEST_F(IscsiConnectorTest, RescanOfAMultipathDeviceResizesTheMap) {
  Install("session1_lun1");
  Install("session2_lun1");
  Install("mpath_dm0");
  auto attacher = MakeAttacher();
  ExpectIfaceOk();
  executor_->InAnyOrder();
  ASSERT_TRUE(attacher->Attach(Spec(std::string(kP1) + "," + kP2)).ok());
  executor_->ExpectOk({"multipathd", "resize", "map", "mpatha"});
  auto size = attacher->Rescan("vol-1");
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, 1ull << 30);
  EXPECT_EQ(testing::ReadFileOrEmpty(Sys("/devices/platform/host4/session2/target4:0:0/4:0:0:1/rescan")), "1");
}

}  // namespace
}  // namespace blockcsi
