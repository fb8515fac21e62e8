// The userspace connector for real: tgtd serves LUNs on sparse files, the
// attacher spawns bridge processes (libiscsi → FUSE → loop) and the tests
// check bytes, sizes, errors and that nothing is left behind.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <thread>

#include "attach/attach_record_store.h"
#include "bridge/bridge_protocol.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "support/attach_fixture.h"

namespace blockcsi::testing {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

AttachSpec SpecFor(const std::map<std::string, std::string>& context,
                   const std::map<std::string, std::string>& secrets = {}, const std::string& volume = "vol-a") {
  auto spec = ParseAttachSpec(volume, context, secrets, InitiatorIqnForNode(kNodeId));
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : AttachSpec{};
}

// ContextEdits for AttachEdited.
void RequireChap(std::map<std::string, std::string>& context) { context[publish_context::kChapRequired] = "true"; }
ContextEdit Set(const std::string& key, const std::string& value) {
  return [key, value](std::map<std::string, std::string>& context) { context[key] = value; };
}

TEST_F(AttachIntegrationTest, AttachWriteReadBackDetach) {
  TestTarget t = MakeTarget("one", 64 * kMiB);
  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok()) << attacher.status().ToString();
  auto record = (*attacher)->Attach(SpecFor(ContextFor(t)));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->state, "attached");
  EXPECT_TRUE(record->device_path.starts_with("/dev/loop")) << record->device_path;
  EXPECT_EQ(record->size_bytes, t.size_bytes);
  EXPECT_EQ(record->expected_wwn, t.wwn);

  // The kernel's view of the device size equals the LUN.
  std::string out;
  ASSERT_EQ(RunProgram({"blockdev", "--getsize64", record->device_path}, &out), 0) << out;
  EXPECT_EQ(std::stoull(out), t.size_bytes);

  // Bytes written through the loop device land in the target's backing file.
  std::string data = Pattern(kMiB + 4096, 'a');
  ASSERT_EQ(WriteDirect(record->device_path, 3 * kMiB, data), 0);
  EXPECT_EQ(ReadFileAt(t.backing_file, 3 * kMiB, data.size()), data);
  EXPECT_EQ(ReadDirect(record->device_path, 3 * kMiB, data.size()), data);

  // The record is on disk, 0600, and says attached.
  struct stat st {};
  std::string path = state_dir_ + "/attachments/vol-a.json";
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(ReadFileOrEmpty(path).find("\"attached\""), std::string::npos);

  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  ExpectNothingLeft();
  // Detach again: nothing to do, still OK.
  EXPECT_TRUE((*attacher)->Detach("vol-a").ok());
}

TEST_F(AttachIntegrationTest, AttachIsIdempotentAndReusesTheBridge) {
  TestTarget t = MakeTarget("idem", 32 * kMiB);
  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok()) << attacher.status().ToString();
  auto first = (*attacher)->Attach(SpecFor(ContextFor(t)));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = (*attacher)->Attach(SpecFor(ContextFor(t)));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(first->device_path, second->device_path);
  EXPECT_EQ(first->connector_state.at("bridge_pid"), second->connector_state.at("bridge_pid"));
  EXPECT_EQ(BridgePids().size(), 1u);
  EXPECT_FALSE((*attacher)->Check("vol-a").abnormal) << (*attacher)->Check("vol-a").message;
  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, WrongChapIsAClearErrorAndLeavesNothing) {
  TestTarget t = MakeTarget("chap", 16 * kMiB);
  AddChap(t, "alice", "right-secret-123");
  std::string logs;
  SetLogCaptureForTest(&logs);
  auto record = AttachEdited(t, RequireChap,
                             {{secret_keys::kChapUsername, "alice"}, {secret_keys::kChapPassword, "wrong-secret-456"}});
  SetLogCaptureForTest(nullptr);
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kPermissionDenied) << record.status().ToString();
  EXPECT_NE(record.status().message().find("CHAP"), std::string::npos) << record.status().message();
  EXPECT_EQ(record.status().message().find("wrong-secret-456"), std::string::npos);
  EXPECT_EQ(logs.find("wrong-secret-456"), std::string::npos);
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, RightChapAttachesAndTheSecretIsNowhere) {
  TestTarget t = MakeTarget("chapok", 16 * kMiB);
  AddChap(t, "bob", "bobs-secret-789");
  std::string logs;
  SetLogCaptureForTest(&logs);
  // At debug, for this process and so for the bridge it starts: the secret
  // checks below see every line any level could write.
  ASSERT_TRUE(LogEnabled(LogLevel::kDebug)) << "the secret check would miss what is logged at debug";
  // The bridge inherits stderr (its log): point this process's stderr at a
  // file while the bridge starts, so that what the bridge ever prints is read.
  const std::string bridge_stderr = tmp_->Join("bridge-stderr.log");
  std::fflush(stderr);
  int saved_stderr = ::dup(STDERR_FILENO);
  int log_fd = ::open(bridge_stderr.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  ASSERT_GE(saved_stderr, 0);
  ASSERT_GE(log_fd, 0);
  ::dup2(log_fd, STDERR_FILENO);
  ::close(log_fd);
  auto record = AttachEdited(t, RequireChap,
                             {{secret_keys::kChapUsername, "bob"}, {secret_keys::kChapPassword, "bobs-secret-789"}});
  std::fflush(stderr);
  ::dup2(saved_stderr, STDERR_FILENO);
  ::close(saved_stderr);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  // Not in the record, the bridge's command line, environment, stderr or
  // control replies, nor in the plugin's logs.
  EXPECT_EQ(ReadFileOrEmpty(state_dir_ + "/attachments/vol-a.json").find("bobs-secret"), std::string::npos);
  auto pids = BridgePids();
  ASSERT_EQ(pids.size(), 1u);
  const std::string proc = "/proc/" + std::to_string(pids[0]);
  std::string cmdline = ReadFileOrEmpty(proc + "/cmdline");
  EXPECT_FALSE(cmdline.empty());
  EXPECT_EQ(cmdline.find("bobs-secret"), std::string::npos);
  std::string environ = ReadFileOrEmpty(proc + "/environ");
  EXPECT_FALSE(environ.empty()) << "cannot read the bridge's environment";
  EXPECT_EQ(environ.find("bobs-secret"), std::string::npos) << "the secret is in the bridge's environment";
  const std::string control_socket = record->connector_state.at("control_socket");
  for (const nlohmann::json& request :
       {nlohmann::json{{"op", "status"}}, nlohmann::json{{"op", "status"}, {"refresh_identity", true}},
        nlohmann::json{{"op", "rescan"}}, nlohmann::json{{"op", "no-such-op"}}}) {
    auto reply = CallBridge(control_socket, request, std::chrono::seconds(20));
    std::string text = reply.ok() ? reply->dump() : reply.status().ToString();
    EXPECT_EQ(text.find("bobs-secret"), std::string::npos) << request.dump() << " -> " << text;
  }
  ASSERT_TRUE(attacher_->Detach("vol-a").ok());
  SetLogCaptureForTest(nullptr);
  EXPECT_EQ(logs.find("bobs-secret"), std::string::npos);
  std::string bridge_log = ReadFileOrEmpty(bridge_stderr);
  EXPECT_EQ(bridge_log.find("bobs-secret"), std::string::npos) << "the secret is in the bridge's stderr";
  EXPECT_NE(cmdline.find("--log-level"), std::string::npos) << "the bridge was not started at debug level";
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, MissingAclIsAClearErrorAndLeavesNothing) {
  TestTarget t = MakeTarget("noacl", 16 * kMiB, "some-other-node");
  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok());
  auto record = (*attacher)->Attach(SpecFor(ContextFor(t)));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kNotFound) << record.status().ToString();
  EXPECT_NE(record.status().message().find("ACL"), std::string::npos) << record.status().message();
  EXPECT_NE(record.status().message().find(InitiatorIqnForNode(kNodeId)), std::string::npos);
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, WrongLunIdentityIsRefusedAndDetached) {
  TestTarget t = MakeTarget("ident", 16 * kMiB);
  std::string logs;
  SetLogCaptureForTest(&logs);
  auto record = AttachEdited(t, Set(publish_context::kSerial, "bcsn-someone-else"));
  SetLogCaptureForTest(nullptr);
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kFailedPrecondition) << record.status().ToString();
  EXPECT_NE(record.status().message().find("wrong LUN"), std::string::npos);
  EXPECT_NE(logs.find("WRONG LUN"), std::string::npos);
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, WrongWwnIsRefused) {
  TestTarget t = MakeTarget("wwn", 16 * kMiB);
  auto record = AttachEdited(t, Set(publish_context::kWwn, "6000000000000000000000000000beef"));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kFailedPrecondition) << record.status().ToString();
  EXPECT_NE(record.status().message().find(t.wwn), std::string::npos) << record.status().message();
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, UnreachablePortalIsUnavailable) {
  TestTarget t = MakeTarget("down", 16 * kMiB);
  ReservedPort dead(ReservedPort::Use::kDead);  // refuses connections while the test runs
  ASSERT_NE(dead.port(), 0);
  auto record = AttachEdited(t, Set(publish_context::kPortals, "127.0.0.1:" + std::to_string(dead.port())));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kUnavailable) << record.status().ToString();
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, DeadFirstPortalDoesNotBlockTheNextOne) {
  TestTarget t = MakeTarget("twoportals", 16 * kMiB);
  ReservedPort dead(ReservedPort::Use::kDead);  // refuses connections while the test runs
  ASSERT_NE(dead.port(), 0);
  auto record = AttachEdited(
      t, Set(publish_context::kPortals, "127.0.0.1:" + std::to_string(dead.port()) + "," + tgtd_->portal()));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->connector_state.at("portal"), tgtd_->portal());
  ASSERT_TRUE(attacher_->Detach("vol-a").ok());
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, TwoVolumesAttachAndDetachIndependently) {
  TestTarget a = MakeTarget("va", 16 * kMiB);
  TestTarget b = MakeTarget("vb", 24 * kMiB);
  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok());
  auto ra = (*attacher)->Attach(SpecFor(ContextFor(a), {}, "vol-a"));
  auto rb = (*attacher)->Attach(SpecFor(ContextFor(b), {}, "vol-b"));
  ASSERT_TRUE(ra.ok()) << ra.status().ToString();
  ASSERT_TRUE(rb.ok()) << rb.status().ToString();
  EXPECT_NE(ra->device_path, rb->device_path);
  EXPECT_EQ(rb->size_bytes, b.size_bytes);
  auto list = (*attacher)->List();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 2u);

  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  // vol-b is untouched by vol-a's detach.
  std::string data = Pattern(64 * 1024, 'q');
  ASSERT_EQ(WriteDirect(rb->device_path, 0, data), 0);
  EXPECT_EQ(ReadFileAt(b.backing_file, 0, data.size()), data);
  EXPECT_FALSE((*attacher)->Check("vol-b").abnormal);
  EXPECT_EQ(BridgePids().size(), 1u);
  ASSERT_TRUE((*attacher)->Detach("vol-b").ok());
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, DetachRefusesWhileTheDeviceIsMounted) {
  TestTarget t = MakeTarget("busy", 64 * kMiB);
  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok());
  auto record = (*attacher)->Attach(SpecFor(ContextFor(t)));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  std::string out;
  ASSERT_EQ(RunProgram({"mkfs.ext4", "-q", "-E", "nodiscard,lazy_itable_init=1", record->device_path}, &out), 0) << out;
  std::string mnt = tmp_->Join("mnt");
  std::filesystem::create_directories(mnt);
  ASSERT_EQ(::mount(record->device_path.c_str(), mnt.c_str(), "ext4", 0, nullptr), 0) << std::strerror(errno);
  Status st = (*attacher)->Detach("vol-a");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  // Nothing was torn down: the filesystem still works.
  { std::ofstream(mnt + "/f") << "still here"; }
  ::sync();
  EXPECT_EQ(ReadFileOrEmpty(mnt + "/f"), "still here");
  ASSERT_EQ(::umount(mnt.c_str()), 0);
  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  ExpectNothingLeft();
}

// The attach tool (a stand-in holding the attacher, not blockcsi) killed
// with SIGKILL while a volume is in use: the bridge lives on, the mounted
// filesystem stays readable and writable, and a new attacher adopts the
// bridge. The real blockcsi killed the same way: node_e2e_test's
// PluginSigkillKeepsThePublishedVolumeWorking.
TEST_F(AttachIntegrationTest, AttachToolKill9KeepsTheMountedVolumeWorking) {
  TestTarget t = MakeTarget("survive", 64 * kMiB);
  std::string log = tmp_->Join("plugin.log");
  auto plugin = std::make_unique<ChildProcess>(
      std::vector<std::string>{AttachToolPath(), "attach",   "--state-dir", state_dir_,  "--node-id",
                               kNodeId,          "--volume", "vol-a",       "--portals", tgtd_->portal(),
                               "--target",       t.iqn,      "--lun",       "1",         "--serial",
                               t.serial,         "--wwn",    t.wwn,         "--hold",    "true"},
      log);
  std::string device;
  for (int i = 0; i < 600 && device.empty(); ++i) {
    std::string text = ReadFileOrEmpty(log);
    auto pos = text.find("attached /dev/");
    if (pos != std::string::npos) device = text.substr(pos + 9, text.find('\n', pos) - pos - 9);
    if (text.find("error ") != std::string::npos) break;
    if (device.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(device.empty()) << ReadFileOrEmpty(log);
  std::string out;
  ASSERT_EQ(RunProgram({"mkfs.ext4", "-q", "-E", "nodiscard,lazy_itable_init=1", device}, &out), 0) << out;
  std::string mnt = tmp_->Join("mnt");
  std::filesystem::create_directories(mnt);
  ASSERT_EQ(::mount(device.c_str(), mnt.c_str(), "ext4", 0, nullptr), 0) << std::strerror(errno);
  { std::ofstream(mnt + "/before") << "written before the crash"; }
  ::sync();

  plugin->Signal(SIGKILL);
  EXPECT_EQ(plugin->Wait(std::chrono::seconds(10)), 128 + SIGKILL);
  plugin.reset();

  // The filesystem still works with no plugin at all.
  { std::ofstream(mnt + "/after") << "written after the crash"; }
  ::sync();
  EXPECT_EQ(ReadFileOrEmpty(mnt + "/before"), "written before the crash");
  ASSERT_EQ(::umount(mnt.c_str()), 0);
  ASSERT_EQ(::mount(device.c_str(), mnt.c_str(), "ext4", MS_RDONLY, nullptr), 0);
  EXPECT_EQ(ReadFileOrEmpty(mnt + "/after"), "written after the crash");
  ASSERT_EQ(::umount(mnt.c_str()), 0);

  // The restarted plugin finds the record and the live bridge.
  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok()) << attacher.status().ToString();
  auto record = (*attacher)->Get("vol-a");
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->device_path, device);
  EXPECT_FALSE((*attacher)->Check("vol-a").abnormal) << (*attacher)->Check("vol-a").message;
  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  ExpectNothingLeft();
}

// The fault test: the plugin dies after the bridge is up but before the
// record says "attached". Detach from a restarted plugin still leaves no
// session, loop device or FUSE mount.
TEST_F(AttachIntegrationTest, CrashBetweenLoginAndRecordUpdateIsCleanedByDetach) {
  TestTarget t = MakeTarget("crash", 32 * kMiB);
  std::string log = tmp_->Join("plugin.log");
  ChildProcess plugin({AttachToolPath(), "attach",   "--state-dir", state_dir_,   "--node-id",
                       kNodeId,          "--volume", "vol-a",       "--portals",  tgtd_->portal(),
                       "--target",       t.iqn,      "--lun",       "1",          "--serial",
                       t.serial,         "--wwn",    t.wwn,         "--crash-at", "node.stage.after-connect"},
                      log);
  EXPECT_EQ(plugin.Wait(std::chrono::seconds(60)), 128 + SIGKILL) << ReadFileOrEmpty(log);
  auto text = ReadFileToString(state_dir_ + "/attachments/vol-a.json");
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("\"attaching\""), std::string::npos);
  // The crash left a live bridge, a loop device and a FUSE mount behind.
  EXPECT_EQ(BridgePids().size(), 1u);
  EXPECT_EQ(LoopDevicesUnderState().size(), 1u);
  // The iSCSI session is visible on the target while the bridge lives.
  EXPECT_NE(tgtd_->ShowTargets().find("Initiator: " + InitiatorIqnForNode(kNodeId)), std::string::npos)
      << tgtd_->ShowTargets();

  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok()) << attacher.status().ToString();
  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  ExpectNothingLeft();
  EXPECT_EQ(tgtd_->ShowTargets().find("Initiator: " + InitiatorIqnForNode(kNodeId)), std::string::npos)
      << tgtd_->ShowTargets();
}

TEST_F(AttachIntegrationTest, RetryAfterCrashReusesTheBridge) {
  TestTarget t = MakeTarget("retry", 32 * kMiB);
  ChildProcess plugin({AttachToolPath(), "attach",   "--state-dir", state_dir_,   "--node-id",
                       kNodeId,          "--volume", "vol-a",       "--portals",  tgtd_->portal(),
                       "--target",       t.iqn,      "--lun",       "1",          "--serial",
                       t.serial,         "--wwn",    t.wwn,         "--crash-at", "node.stage.after-connect"});
  EXPECT_EQ(plugin.Wait(std::chrono::seconds(60)), 128 + SIGKILL);
  auto before = BridgePids();
  ASSERT_EQ(before.size(), 1u);
  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok());
  auto record = (*attacher)->Attach(SpecFor(ContextFor(t)));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->state, "attached");
  EXPECT_EQ(BridgePids(), before);
  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, BridgeWithoutRecordIsCleanedAtStart) {
  TestTarget t = MakeTarget("orphan", 16 * kMiB);
  {
    auto attacher = NewAttacher();
    ASSERT_TRUE(attacher.ok());
    ASSERT_TRUE((*attacher)->Attach(SpecFor(ContextFor(t))).ok());
  }
  ASSERT_TRUE(RemoveFileDurably(state_dir_ + "/attachments/vol-a.json").ok());
  std::string logs;
  SetLogCaptureForTest(&logs);
  auto attacher = NewAttacher();
  SetLogCaptureForTest(nullptr);
  ASSERT_TRUE(attacher.ok());
  EXPECT_NE(logs.find("no attach record"), std::string::npos) << logs;
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, DeadBridgeIsReportedAndDetachCleansUp) {
  TestTarget t = MakeTarget("deadbridge", 16 * kMiB);
  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok());
  auto record = (*attacher)->Attach(SpecFor(ContextFor(t)));
  ASSERT_TRUE(record.ok());
  for (int pid : BridgePids()) ::kill(pid, SIGKILL);
  for (int i = 0; i < 100 && !BridgePids().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // I/O on the orphaned loop device fails fast instead of hanging.
  EXPECT_EQ(ReadDirect(record->device_path, 0, 4096), "");
  AttachHealth health = (*attacher)->Check("vol-a");
  EXPECT_TRUE(health.abnormal);
  EXPECT_NE(health.message.find("not running"), std::string::npos) << health.message;
  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, TargetGoneGivesIoErrorsNotAHang) {
  TestTarget t = MakeTarget("gone", 16 * kMiB);
  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok());
  auto record = (*attacher)->Attach(SpecFor(ContextFor(t)));
  ASSERT_TRUE(record.ok());
  tgtd_->Kill9();
  // Bounded by the bridge's command timeout and reconnect limit; a hang
  // here would hit the ctest timeout.
  EXPECT_EQ(ReadDirect(record->device_path, 0, 4096), "");
  EXPECT_TRUE((*attacher)->Check("vol-a").abnormal);
  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  // The leak checker reads tgtd and reports one it cannot read: back, empty
  // (a kill -9 loses its configuration), it shows no session either.
  std::string error;
  ASSERT_TRUE(tgtd_->Restart(&error)) << error;
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, MutualChapAttaches) {
  TestTarget t = MakeTarget("mutual", 16 * kMiB);
  AddChap(t, "carol", "carols-secret-1");
  int code = 0;
  tgtd_->Tgtadm({"--op", "new", "--mode", "account", "--user", "array", "--password", "arrays-secret-2"}, &code);
  ASSERT_EQ(code, 0);
  tgtd_->Tgtadm({"--op", "bind", "--mode", "account", "--tid", std::to_string(t.tid), "--user", "array", "--outgoing"},
                &code);
  ASSERT_EQ(code, 0);
  auto record = AttachEdited(t, RequireChap,
                             {{secret_keys::kChapUsername, "carol"},
                              {secret_keys::kChapPassword, "carols-secret-1"},
                              {secret_keys::kChapMutualUsername, "array"},
                              {secret_keys::kChapMutualPassword, "arrays-secret-2"}});
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  ASSERT_TRUE(attacher_->Detach("vol-a").ok());
  // The target proving the wrong secret back is refused too.
  auto context = ContextFor(t);
  RequireChap(context);
  record = attacher_->Attach(SpecFor(context, {{secret_keys::kChapUsername, "carol"},
                                               {secret_keys::kChapPassword, "carols-secret-1"},
                                               {secret_keys::kChapMutualUsername, "array"},
                                               {secret_keys::kChapMutualPassword, "not-the-arrays-3"}}));
  EXPECT_EQ(record.status().code(), StatusCode::kPermissionDenied) << record.status().ToString();
  EXPECT_EQ(record.status().message().find("not-the-arrays"), std::string::npos);
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, ReadOnlyAttachmentRefusesWrites) {
  TestTarget t = MakeTarget("ro", 16 * kMiB);
  std::string data = Pattern(4096, 'r');
  {
    std::ofstream f(t.backing_file, std::ios::in | std::ios::out | std::ios::binary);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  auto record = AttachEdited(t, Set(publish_context::kReadOnly, "true"));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(ReadDirect(record->device_path, 0, 4096), data);
  EXPECT_NE(WriteDirect(record->device_path, 0, Pattern(4096, 'x')), 0);
  EXPECT_EQ(ReadFileAt(t.backing_file, 0, 4096), data);
  ASSERT_TRUE(attacher_->Detach("vol-a").ok());
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, RescanPicksUpAGrownLun) {
  TestTarget t = MakeTarget("grow", 16 * kMiB);
  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok());
  auto record = (*attacher)->Attach(SpecFor(ContextFor(t)));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  // Grow the image and refresh the LUN the way the backend does.
  ASSERT_EQ(::truncate(t.backing_file.c_str(), 32 * kMiB), 0);
  std::string tid = std::to_string(t.tid);
  int code = 0;
  tgtd_->Tgtadm({"--op", "delete", "--mode", "logicalunit", "--tid", tid, "--lun", "1"}, &code);
  ASSERT_EQ(code, 0);
  ASSERT_TRUE(AddLun(t));
  auto size = (*attacher)->Rescan("vol-a");
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, 32 * kMiB);
  std::string out;
  ASSERT_EQ(RunProgram({"blockdev", "--getsize64", record->device_path}, &out), 0) << out;
  EXPECT_EQ(std::stoull(out), 32 * kMiB);
  // The new tail is usable.
  std::string data = Pattern(8192, 'g');
  ASSERT_EQ(WriteDirect(record->device_path, 30 * kMiB, data), 0);
  EXPECT_EQ(ReadFileAt(t.backing_file, 30 * kMiB, data.size()), data);
  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  ExpectNothingLeft();
}

TEST_F(AttachIntegrationTest, SeveralSessionsPerVolumeCarryConcurrentIo) {
  TestTarget t = MakeTarget("multi", 64 * kMiB);
  auto attacher = NewAttacher(/*bridge_sessions=*/4);
  ASSERT_TRUE(attacher.ok());
  auto record = (*attacher)->Attach(SpecFor(ContextFor(t)));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  // Four writers on disjoint regions at once, then every byte checked.
  std::vector<std::thread> writers;
  std::array<bool, 4> ok{};  // one slot per writer thread
  for (int i = 0; i < 4; ++i) {
    writers.emplace_back([&, i] {
      ok[i] = true;
      for (int j = 0; j < 8; ++j) {
        uint64_t off = (uint64_t(i) * 8 + j) * kMiB;
        ok[i] = ok[i] && WriteDirect(record->device_path, off, Pattern(kMiB, static_cast<char>('A' + i + j))) == 0;
      }
    });
  }
  for (auto& w : writers) w.join();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(ok[i]) << "writer " << i;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 8; ++j) {
      uint64_t off = (uint64_t(i) * 8 + j) * kMiB;
      ASSERT_EQ(ReadFileAt(t.backing_file, off, kMiB), Pattern(kMiB, static_cast<char>('A' + i + j))) << off;
    }
  }
  // The target sees four sessions of this node, all gone after detach.
  std::string show = tgtd_->ShowTargets();
  size_t nexus = 0;
  for (size_t at = show.find("I_T nexus: "); at != std::string::npos; at = show.find("I_T nexus: ", at + 1)) ++nexus;
  EXPECT_EQ(nexus, 4u) << show;
  ASSERT_TRUE((*attacher)->Detach("vol-a").ok());
  EXPECT_EQ(tgtd_->ShowTargets().find("I_T nexus: "), std::string::npos);
  ExpectNothingLeft();
}

// A storm of bridges starting at once: every one is handed the same lowest
// free loop device and only one configure per round wins, so each of the
// others must ask again until it has one of its own (16 tries lost to 32
// concurrent stages in lifecycle_bench).
TEST_F(AttachIntegrationTest, ThirtyTwoBridgesStartingAtOnceEachGetALoopDevice) {
  constexpr int kVolumes = 32;
  std::vector<TestTarget> targets;
  for (int i = 0; i < kVolumes; ++i) targets.push_back(MakeTarget("storm" + std::to_string(i), 4 * kMiB));
  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok());
  std::vector<std::future<StatusOr<AttachRecord>>> attaches;
  for (int i = 0; i < kVolumes; ++i) {
    attaches.push_back(std::async(std::launch::async, [&, i] {
      return (*attacher)->Attach(SpecFor(ContextFor(targets[i]), {}, "vol-" + std::to_string(i)));
    }));
  }
  // Every attach is waited for and every volume detached before the
  // verdict, so a failed run leaves no bridge behind either.
  std::set<std::string> devices;
  for (int i = 0; i < kVolumes; ++i) {
    StatusOr<AttachRecord> record = attaches[i].get();
    EXPECT_TRUE(record.ok()) << "vol-" << i << ": " << record.status().ToString();
    if (record.ok()) devices.insert(record->device_path);
  }
  for (int i = 0; i < kVolumes; ++i) EXPECT_TRUE((*attacher)->Detach("vol-" + std::to_string(i)).ok()) << i;
  EXPECT_EQ(devices.size(), static_cast<size_t>(kVolumes)) << "a volume without a loop device of its own";
  ExpectNothingLeft();
}

// Kubelet state dirs plus long volume ids overflow a unix socket's 108
// bytes; the control socket must work anyway, across a plugin restart.
TEST_F(AttachIntegrationTest, LongVolumeIdsWork) {
  TestTarget t = MakeTarget("longid", 16 * kMiB);
  std::string id = "pool-a/" + std::string(150, 'v');
  auto attacher = NewAttacher();
  ASSERT_TRUE(attacher.ok());
  auto record = (*attacher)->Attach(SpecFor(ContextFor(t), {}, id));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  ASSERT_GT(record->connector_state.at("control_socket").size(), 108u);
  auto restarted = NewAttacher();
  ASSERT_TRUE(restarted.ok());
  EXPECT_FALSE((*restarted)->Check(id).abnormal) << (*restarted)->Check(id).message;
  ASSERT_TRUE((*restarted)->Detach(id).ok());
  ExpectNothingLeft();
}

}  // namespace
}  // namespace blockcsi::testing
