// TgtdSocketExecutor against a real tgtd, side by side with tgtadm itself:
// the same commands give the same state, the same listings and the same
// errors; the backend does CHAP end to end over it (issue #21: no CHAP
// secret on any command line). Root and Debian tgt; skipped otherwise.
#include "backend/local/tgtd_socket.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>

#include "backend/local/local_backend.h"
#include "backend/local/tgt_exporter.h"
#include "backend/local/tgtadm_parser.h"
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

class TgtdSocketTest : public testing::TgtdTest {
 protected:
  Command Tgtadm(std::vector<std::string> args) const {
    Command c(TgtExporter::kDefaultTgtadm);
    c.Args({"-C", std::to_string(tgtd_->control_port()), "--lld", "iscsi"}).Args(args);
    return c;
  }
  CommandResult Socket(const Command& c) {
    auto r = socket_.Run(c);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : CommandResult{};
  }

  TgtdSocketExecutor socket_;
  testing::TempDir dir_;
};

TEST_F(TgtdSocketTest, SameStateListingsAndErrorsAsTgtadm) {
  std::string image = dir_.Join("lun.img");
  ASSERT_EQ(::truncate(image.c_str(), 0), -1);  // does not exist yet
  {
    FILE* f = std::fopen(image.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
    ASSERT_EQ(::truncate(image.c_str(), 8 * kMiB), 0);
  }
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--op", "new", "--mode", "target", "--tid", "3", "-T", "iqn.2026-11.io.blockcsi:sock"},
           {"--op", "new", "--mode", "logicalunit", "--tid", "3", "--lun", "1", "-b", image},
           {"--op", "update", "--mode", "logicalunit", "--tid", "3", "--lun", "1", "--params",
            "scsi_sn=bcsisock,scsi_id=b10cc5a1000000000000000a"},
           {"--op", "new", "--mode", "account", "--user", "sockuser", "--password", "sock-pass-1234"},
           {"--op", "new", "--mode", "account", "--user", "sockmutual", "--password", "mutual-pass-987"},
           {"--op", "bind", "--mode", "account", "--tid", "3", "--user", "sockuser"},
           {"--op", "bind", "--mode", "account", "--tid", "3", "--user", "sockmutual", "--outgoing"},
           {"--op", "bind", "--mode", "target", "--tid", "3", "--initiator-name", kNode}}) {
    CommandResult r = Socket(Tgtadm(args));
    EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  }
  // tgtadm reads back what the socket made, and the socket reads the same text.
  int code = -1;
  std::string by_tgtadm = tgtd_->Tgtadm({"--op", "show", "--mode", "target"}, &code);
  ASSERT_EQ(code, 0);
  EXPECT_EQ(Socket(Tgtadm({"--op", "show", "--mode", "target"})).stdout_text, by_tgtadm);
  EXPECT_EQ(Socket(Tgtadm({"--op", "show", "--mode", "account"})).stdout_text,
            tgtd_->Tgtadm({"--op", "show", "--mode", "account"}));
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
  EXPECT_EQ(t.FindLun(1)->backing_path, image);

  // tgtd's errors come back as tgtadm words them (TgtExporter tolerates some).
  CommandResult again = Socket(Tgtadm({"--op", "new", "--mode", "account", "--user", "sockuser", "--password", "x"}));
  EXPECT_NE(again.exit_code, 0);
  EXPECT_EQ(again.stderr_text, "tgtadm: this account already exists\n");
  CommandResult missing = Socket(Tgtadm({"--op", "delete", "--mode", "account", "--user", "nobody"}));
  EXPECT_EQ(missing.stderr_text, "tgtadm: can't find the account\n");
  CommandResult acl = Socket(Tgtadm(
      {"--op", "unbind", "--mode", "target", "--tid", "3", "--initiator-name", "iqn.2026-11.io.blockcsi:node:none"}));
  EXPECT_EQ(acl.stderr_text, "tgtadm: this access control rule does not exist\n");
  CommandResult no_target = Socket(Tgtadm({"--op", "delete", "--mode", "target", "--tid", "99"}));
  EXPECT_EQ(no_target.stderr_text, "tgtadm: can't find the target\n");
  // A comma would split tgtd's parameter list: refused before sending.
  CommandResult comma = Socket(Tgtadm({"--op", "new", "--mode", "account", "--user", "a", "--password", "b,c"}));
  EXPECT_NE(comma.exit_code, 0);
  EXPECT_EQ(tgtd_->Tgtadm({"--op", "show", "--mode", "account"}).find("    a\n"), std::string::npos);

  for (const auto& args :
       std::vector<std::vector<std::string>>{{"--op", "delete", "--mode", "target", "--tid", "3", "--force"},
                                             {"--op", "delete", "--mode", "account", "--user", "sockuser"},
                                             {"--op", "delete", "--mode", "account", "--user", "sockmutual"}}) {
    EXPECT_EQ(Socket(Tgtadm(args)).exit_code, 0);
  }
  EXPECT_EQ(tgtd_->ShowTargets(), "");
}

TEST_F(TgtdSocketTest, ATgtdThatIsNotThereIsUnavailable) {
  Command c(TgtExporter::kDefaultTgtadm);
  c.Args({"-C", std::to_string(testing::FreeTcpPort()), "--lld", "iscsi", "--op", "show", "--mode", "target"});
  auto r = socket_.Run(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(socket_.Run(Command("/bin/sh").Arg("-c").Arg("true")).status().code(), StatusCode::kInvalidArgument);
}

// The backend over the socket: CHAP one-way and mutual enforced by tgtd,
// with no tgtadm process (so no password in any /proc/<pid>/cmdline).
TEST_F(TgtdSocketTest, BackendGrantsChapThroughTheSocket) {
  testing::TempDir pool;
  LocalBackendOptions options;
  options.portals = {tgtd_->portal()};
  options.reconcile_interval = std::chrono::milliseconds(0);
  auto exporter = std::make_shared<TgtExporter>(std::make_shared<TgtdSocketExecutor>(), tgtd_->control_port());
  auto backend = LocalBackend::Open(pool.path(), exporter, options);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  CreateVolumeSpec spec;
  spec.name = "pvc-socket";
  spec.size_bytes = 8 * kMiB;
  auto v = (*backend)->CreateVolume(spec);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_TRUE(
      (*backend)->GrantAccess(v->id, {kNode, "node-sock", false, "rwo", {"sockuser", "sock-pass-1234", "", ""}}).ok());
  std::string error;
  IscsiLogin login{tgtd_->portal(), v->target_iqn, kNode, "sockuser", "sock-pass-1234", "", ""};
  auto session = IscsiClient::Login(login, &error);
  ASSERT_NE(session, nullptr) << error;
  EXPECT_EQ(session->Serial(), v->serial);
  session.reset();
  login.chap_password = "wrong-pass-1234";
  EXPECT_EQ(IscsiClient::Login(login, &error), nullptr) << "a wrong CHAP secret got in";
  ASSERT_TRUE((*backend)->RevokeAccess(v->id, kNode).ok());
  ASSERT_TRUE((*backend)->DeleteVolume(v->id).ok());
  auto accounts = ParseTgtadmAccounts(tgtd_->Tgtadm({"--op", "show", "--mode", "account"}));
  ASSERT_TRUE(accounts.ok());
  EXPECT_TRUE(accounts->empty()) << "an account outlived its volume";
  EXPECT_TRUE((*backend)->ReconcileNow().ok());
}

}  // namespace
}  // namespace blockcsi
