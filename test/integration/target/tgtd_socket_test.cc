// Both TgtdControls against a real tgtd: TgtdSocketControl (tgtd's
// management socket) and TgtadmControl (an exec of tgtadm) make the same
// state and read the same listings as tgtadm itself, and answer the same
// error number for each refusal blockcsi meets, the ones TgtExporter
// tolerates included. The backend does CHAP end to end over the socket (no
// CHAP secret on any command line), and tolerates an ACL rule that tgtd
// already has when it gets there. Root and Debian tgt; skipped otherwise.
#include "backend/local/tgtd_socket_control.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>

#include "backend/local/local_backend.h"
#include "backend/local/tgt_exporter.h"
#include "backend/local/tgtadm_control.h"
#include "backend/local/tgtadm_parser.h"
#include "common/executor.h"
#include "integration/target/iscsi_client.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"
#include "support/tgtd_test.h"

namespace blockcsi {
namespace {

using testing::IscsiClient;
using testing::IscsiLogin;

constexpr uint64_t kMiB = 1024 * 1024;
constexpr char kNode[] = "iqn.2026-11.io.blockcsi:node:sock";
constexpr char kIqn[] = "iqn.2026-11.io.blockcsi:sock";

class TgtdSocketTest : public testing::TgtdTest {
 protected:
  void SetUp() override {
    TgtdTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    socket_ = std::make_unique<TgtdSocketControl>(tgtd_->control_port());
    tgtadm_ = std::make_unique<TgtadmControl>(std::shared_ptr<Executor>(MakeProcessExecutor()), tgtd_->control_port());
  }
  // tgtd's answer through `control`, which must have reached tgtd.
  TgtdAnswer Send(TgtdControl& control, const TgtdRequest& request) {
    auto answer = control.Send(request);
    EXPECT_TRUE(answer.ok()) << request.Describe() << ": " << answer.status().ToString();
    return answer.ok() ? *answer : TgtdAnswer{TgtdError::kUnknownError, ""};
  }
  // The local backend on a pool of its own, exporting through `control`.
  std::shared_ptr<LocalBackend> OpenBackend(std::shared_ptr<TgtdControl> control) {
    LocalBackendOptions options;
    options.portals = {tgtd_->portal()};
    options.reconcile_interval = std::chrono::milliseconds(0);
    auto backend = LocalBackend::Open(
        pool_.path(), std::make_shared<TgtExporter>(std::move(control), tgtd_->control_port(), MachineHost()), options);
    EXPECT_TRUE(backend.ok()) << backend.status().ToString();
    return backend.ok() ? *backend : nullptr;
  }
  // An 8 MiB volume of `backend` named `name`.
  auto CreateVolume(LocalBackend& backend, std::string name) {
    CreateVolumeSpec spec;
    spec.name = std::move(name);
    spec.size_bytes = 8 * kMiB;
    return backend.CreateVolume(spec);
  }
  // An 8 MiB image file for a LUN.
  std::string MakeImage() {
    std::string image = dir_.Join("lun.img");
    FILE* f = std::fopen(image.c_str(), "w");
    EXPECT_NE(f, nullptr);
    if (f != nullptr) std::fclose(f);
    EXPECT_EQ(::truncate(image.c_str(), 8 * kMiB), 0);
    return image;
  }

  std::unique_ptr<TgtdSocketControl> socket_;
  std::unique_ptr<TgtadmControl> tgtadm_;
  testing::TempDir dir_;
  testing::TempDir pool_;
};

TEST_F(TgtdSocketTest, TheSocketMakesWhatTgtadmListsAndReadsWhatTgtadmPrints) {
  const std::string image = MakeImage();
  for (const auto& request :
       {TgtdRequest::NewTarget(3, kIqn), TgtdRequest::NewLun(3, 1, image),
        TgtdRequest::ConfigureLun(3, 1, "bcsisock", "b10cc5a1000000000000000a"),
        TgtdRequest::NewAccount("sockuser", "sock-pass-1234"), TgtdRequest::NewAccount("sockmutual", "mutual-pass-987"),
        TgtdRequest::BindAccount(3, "sockuser", false), TgtdRequest::BindAccount(3, "sockmutual", true),
        TgtdRequest::BindInitiator(3, kNode)}) {
    EXPECT_EQ(Send(*socket_, request).error, TgtdError::kSuccess) << request.Describe();
  }
  int code = -1;
  std::string by_tgtadm = tgtd_->Tgtadm({"--op", "show", "--mode", "target"}, &code);
  ASSERT_EQ(code, 0);
  EXPECT_EQ(Send(*socket_, TgtdRequest::ShowTargets()).text, by_tgtadm);
  EXPECT_EQ(Send(*tgtadm_, TgtdRequest::ShowTargets()).text, by_tgtadm);
  EXPECT_EQ(Send(*socket_, TgtdRequest::ShowAccounts()).text, tgtd_->Tgtadm({"--op", "show", "--mode", "account"}));
  auto targets = ParseTgtadmTargets(by_tgtadm);
  ASSERT_TRUE(targets.ok()) << targets.status().ToString();
  ASSERT_EQ(targets->size(), 1u);
  const TgtTarget& t = targets->front();
  EXPECT_EQ(t.tid, 3);
  EXPECT_EQ(t.incoming_accounts, std::vector<std::string>{"sockuser"});
  EXPECT_EQ(t.outgoing_accounts, std::vector<std::string>{"sockmutual"});
  EXPECT_EQ(t.acls, std::vector<std::string>{kNode});
  ASSERT_NE(t.FindLun(1), nullptr);
  EXPECT_EQ(t.FindLun(1)->scsi_sn, "bcsisock");
  EXPECT_TRUE(t.FindLun(1)->thin_provisioning) << "the socket's LUN update did not reach tgtd as tgtadm's does";
  EXPECT_EQ(t.FindLun(1)->backing_path, image);

  for (const auto& request : {TgtdRequest::DeleteTarget(3), TgtdRequest::DeleteAccount("sockuser"),
                              TgtdRequest::DeleteAccount("sockmutual")}) {
    EXPECT_EQ(Send(*socket_, request).error, TgtdError::kSuccess) << request.Describe();
  }
  EXPECT_EQ(tgtd_->ShowTargets(), "");
}

// Each refusal TgtExporter meets, through both controls: the same number,
// the one TgtExporter's tolerated sets are written with.
TEST_F(TgtdSocketTest, BothControlsAnswerTgtdsErrorNumber) {
  const std::string image = MakeImage();
  for (const auto& request :
       {TgtdRequest::NewTarget(3, kIqn), TgtdRequest::NewLun(3, 1, image),
        TgtdRequest::NewAccount("in", "in-pass-1234"), TgtdRequest::NewAccount("out", "out-pass-1234"),
        TgtdRequest::NewAccount("other", "other-pass-12"), TgtdRequest::BindAccount(3, "in", false),
        TgtdRequest::BindAccount(3, "out", true), TgtdRequest::BindInitiator(3, kNode)}) {
    ASSERT_EQ(Send(*socket_, request).error, TgtdError::kSuccess) << request.Describe();
  }
  const std::vector<std::pair<TgtdRequest, TgtdError>> cases = {
      {TgtdRequest::NewTarget(3, "iqn.2026-11.io.blockcsi:other"), TgtdError::kTargetExists},
      {TgtdRequest::DeleteTarget(99), TgtdError::kNoTarget},
      {TgtdRequest::BindInitiator(3, kNode), TgtdError::kAclExists},
      {TgtdRequest::UnbindInitiator(3, "iqn.2026-11.io.blockcsi:node:none"), TgtdError::kAclDoesNotExist},
      {TgtdRequest::BindInitiator(99, kNode), TgtdError::kNoTarget},
      {TgtdRequest::DeleteLun(3, 7), TgtdError::kNoLun},
      {TgtdRequest::NewAccount("in", "again-pass-12"), TgtdError::kUserExists},
      {TgtdRequest::DeleteAccount("nobody"), TgtdError::kNoUser},
      {TgtdRequest::BindAccount(3, "in", false), TgtdError::kUserExists},
      {TgtdRequest::BindAccount(3, "other", true), TgtdError::kOutgoingAccountExists},
      {TgtdRequest::UnbindAccount(3, "other", false), TgtdError::kNoUser},
      {TgtdRequest::UnbindAccount(3, "other", true), TgtdError::kNoUser},
      {TgtdRequest::DeleteConnection(3, 12345, 0), TgtdError::kNoSession},
  };
  for (const auto& [request, error] : cases) {
    EXPECT_EQ(Send(*socket_, request).error, error) << "socket: " << request.Describe();
    EXPECT_EQ(Send(*tgtadm_, request).error, error) << "tgtadm: " << request.Describe();
  }
  // A comma would split tgtd's parameter list: refused before sending.
  for (TgtdControl* control : {static_cast<TgtdControl*>(socket_.get()), static_cast<TgtdControl*>(tgtadm_.get())}) {
    EXPECT_EQ(control->Send(TgtdRequest::NewAccount("a", "b,c")).status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(tgtd_->Tgtadm({"--op", "show", "--mode", "account"}).find("    a\n"), std::string::npos);

  for (const auto& request : {TgtdRequest::DeleteTarget(3), TgtdRequest::DeleteAccount("in"),
                              TgtdRequest::DeleteAccount("out"), TgtdRequest::DeleteAccount("other")}) {
    EXPECT_EQ(Send(*socket_, request).error, TgtdError::kSuccess) << request.Describe();
  }
}

TEST_F(TgtdSocketTest, ATgtdThatIsNotThereIsUnavailable) {
  // A control port no tgtd serves, below 32768 (tgtadm refuses larger ones
  // itself, which is not "tgtd is not there").
  int port = 32000;
  while (port > 1000 && ::access(("/var/run/tgtd/socket." + std::to_string(port)).c_str(), F_OK) == 0) --port;
  TgtdSocketControl socket(port);
  EXPECT_EQ(socket.Send(TgtdRequest::ShowTargets()).status().code(), StatusCode::kUnavailable);
  TgtadmControl tgtadm(std::shared_ptr<Executor>(MakeProcessExecutor()), port);
  EXPECT_EQ(tgtadm.Send(TgtdRequest::ShowTargets()).status().code(), StatusCode::kUnavailable);
}

// Someone else makes the ACL rule between TgtExporter's read and its bind:
// tgtd answers ACL_EXIST, which is "already so", and the read-back agrees.
class BindFirst final : public TgtdControl {
 public:
  explicit BindFirst(std::shared_ptr<TgtdControl> tgtd) : tgtd_(std::move(tgtd)) {}
  StatusOr<TgtdAnswer> Send(const TgtdRequest& request) override {
    if (request.mode == TgtdMode::kTarget && request.op == TgtdOp::kBind) {
      auto first = tgtd_->Send(request);
      if (!first.ok() || !first->ok()) return Internal("the other binder failed");
      ++raced_;
    }
    return tgtd_->Send(request);
  }
  int raced() const { return raced_; }

 private:
  const std::shared_ptr<TgtdControl> tgtd_;
  int raced_ = 0;
};

TEST_F(TgtdSocketTest, AnAclRuleTgtdAlreadyHasIsToleratedAndReadBack) {
  auto racing = std::make_shared<BindFirst>(std::make_shared<TgtdSocketControl>(tgtd_->control_port()));
  auto backend = OpenBackend(racing);
  ASSERT_NE(backend, nullptr);
  auto v = CreateVolume(*backend, "pvc-raced");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  auto granted = backend->GrantAccess(v->id, {kNode, "node-sock", false, "rwo", {}});
  ASSERT_TRUE(granted.ok()) << granted.status().ToString();
  EXPECT_EQ(racing->raced(), 1);
  auto targets = ParseTgtadmTargets(tgtd_->ShowTargets());
  ASSERT_TRUE(targets.ok());
  ASSERT_EQ(targets->size(), 1u);
  EXPECT_EQ(targets->front().acls, std::vector<std::string>{kNode});
  ASSERT_TRUE(backend->RevokeAccess(v->id, kNode).ok());
  ASSERT_TRUE(backend->DeleteVolume(v->id).ok());
}

// The backend over the socket: CHAP one-way and mutual enforced by tgtd,
// with no tgtadm process (so no password in any /proc/<pid>/cmdline).
TEST_F(TgtdSocketTest, BackendGrantsChapThroughTheSocket) {
  auto backend = OpenBackend(std::make_shared<TgtdSocketControl>(tgtd_->control_port()));
  ASSERT_NE(backend, nullptr);
  auto v = CreateVolume(*backend, "pvc-socket");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_TRUE(
      backend->GrantAccess(v->id, {kNode, "node-sock", false, "rwo", {"sockuser", "sock-pass-1234", "", ""}}).ok());
  std::string error;
  IscsiLogin login{tgtd_->portal(), v->target_iqn, kNode, "sockuser", "sock-pass-1234", "", ""};
  auto session = IscsiClient::Login(login, &error);
  ASSERT_NE(session, nullptr) << error;
  EXPECT_EQ(session->Serial(), v->serial);
  session.reset();
  login.chap_password = "wrong-pass-1234";
  EXPECT_EQ(IscsiClient::Login(login, &error), nullptr) << "a wrong CHAP secret got in";
  ASSERT_TRUE(backend->RevokeAccess(v->id, kNode).ok());
  ASSERT_TRUE(backend->DeleteVolume(v->id).ok());
  auto accounts = ParseTgtadmAccounts(tgtd_->Tgtadm({"--op", "show", "--mode", "account"}));
  ASSERT_TRUE(accounts.ok());
  EXPECT_TRUE(accounts->empty()) << "an account outlived its volume";
  EXPECT_TRUE(backend->ReconcileNow().ok());
}

}  // namespace
}  // namespace blockcsi
