// The kernel connector's CHAP step against the real open-iscsi iscsiadm
// (database operations only: no iscsid, no kernel initiator here). The
// node record is created, updated and deleted by iscsiadm itself in the
// host's /etc/iscsi (open-iscsi has no way to point it elsewhere), under a
// target IQN unique to this run and removed afterwards. Login is the one
// step that needs the kernel: the executor seam answers it as a CHAP
// rejection after reading the record back with `iscsiadm -o show`, which
// also exercises the connector's cleanup of a failed attach.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include <gtest/gtest.h>

#include "attach/attach_spec.h"
#include "attach/iscsi_connector.h"
#include "attach/volume_attacher_impl.h"
#include "common/atomic_file.h"
#include "common/executor.h"
#include "contract/publish_context.h"
#include "support/proc_watch.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

constexpr char kIscsiadm[] = "/usr/sbin/iscsiadm";
constexpr char kPortal[] = "127.0.0.1:3260";
constexpr char kPassword[] = "rec-password-7Qx9";
constexpr char kMutualPassword[] = "rec-mutual-4Kw2zz";

// Runs every command for real, except --login: there it records what
// `iscsiadm -o show` prints for the node record and answers as iscsiadm
// does when the target rejects CHAP (exit 24).
class LoginObservingExecutor final : public Executor {
 public:
  explicit LoginObservingExecutor(std::shared_ptr<Executor> real) : real_(std::move(real)) {}
  StatusOr<CommandResult> Run(const Command& command) override {
    std::vector<std::string> argv = command.Argv();
    {
      // Deterministic where the /proc watcher is a sample: no argument,
      // environment variable or stdin of any command carries a password.
      std::lock_guard<std::mutex> lock(mu_);
      auto has = [](const std::string& text) {
        return text.find(kPassword) != std::string::npos || text.find(kMutualPassword) != std::string::npos;
      };
      for (const auto& arg : command.args()) secret_args_ += has(arg.value) ? 1 : 0;
      for (const auto& [k, v] : command.env()) secret_args_ += has(v) ? 1 : 0;
      secret_args_ += has(command.stdin_data()) ? 1 : 0;
    }
    if (std::find(argv.begin(), argv.end(), "--login") == argv.end()) return real_->Run(command);
    Command show(argv[0]);
    for (size_t i = 1; i < argv.size(); ++i) {
      if (argv[i] != "--login") show.Arg(argv[i]);
    }
    show.Arg("-o").Arg("show");
    auto shown = real_->Run(show);
    std::lock_guard<std::mutex> lock(mu_);
    if (shown.ok()) shown_ = shown->stdout_text;
    CommandResult r;
    r.exit_code = 24;
    r.stderr_text = "iscsiadm: Login failed due to authorization failure\n";
    return r;
  }
  int secret_args() const {
    std::lock_guard<std::mutex> lock(mu_);
    return secret_args_;
  }
  std::string shown() const {
    std::lock_guard<std::mutex> lock(mu_);
    return shown_;
  }

 private:
  std::shared_ptr<Executor> real_;
  mutable std::mutex mu_;
  std::string shown_;
  int secret_args_ = 0;
};

TEST(IscsiadmRecordTest, ChapIsStoredInTheRealNodeRecordWithoutAnySecretInArgv) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: iscsiadm writes /etc/iscsi";
  if (::access(kIscsiadm, X_OK) != 0) GTEST_SKIP() << kIscsiadm << " absent (apt-get install open-iscsi)";
  testing::TempDir dir;
  std::string suffix = std::to_string(::getpid());
  std::string iface = "bcsitest" + suffix;
  std::string target = "iqn.2026-12.io.blockcsi.test:chaprecord-" + suffix;
  std::string initiator = "iqn.2026-12.io.blockcsi.test:node-" + suffix;
  std::shared_ptr<Executor> real = MakeProcessExecutor();
  // Whatever happens, nothing of ours stays in the host's database.
  struct Cleanup {
    std::shared_ptr<Executor> real;
    std::string target, iface;
    ~Cleanup() {
      (void)real->Run(
          Command(kIscsiadm).Args({"-m", "node", "-T", target, "-p", kPortal, "-I", iface, "-o", "delete"}));
      (void)real->Run(Command(kIscsiadm).Args({"-m", "iface", "-I", iface, "-o", "delete"}));
    }
  } cleanup{real, target, iface};

  // `iscsiadm -m iface -o update` needs the kernel's
  // /sys/class/iscsi_transport; `-o new` does not. So the iface is made by
  // iscsiadm and its initiator name added by hand, in iscsiadm's own format,
  // and the connector finds it already set up.
  auto made = real->Run(Command(kIscsiadm).Args({"-m", "iface", "-I", iface, "-o", "new"}));
  ASSERT_TRUE(made.ok() && made->ok()) << (made.ok() ? made->stderr_text : made.status().ToString());
  {
    std::string path = "/etc/iscsi/ifaces/" + iface;
    std::string text = testing::ReadFileOrEmpty(path);
    auto end = text.find("# END RECORD");
    ASSERT_NE(end, std::string::npos) << text;
    text.insert(end, "iface.initiatorname = " + initiator + "\n");
    ASSERT_TRUE(WriteFileAtomically(path, text).ok());
  }

  auto executor = std::make_shared<LoginObservingExecutor>(real);
  IscsiConnectorOptions o;
  o.executor = executor;
  o.iface = iface;
  o.initiator_iqn = initiator;
  o.login_retries = 0;
  o.host_fs = MachineHost();
  VolumeAttacherImpl attacher(dir.Join("state"), MachineHost(), MakeIscsiConnector(std::move(o)));
  ASSERT_TRUE(attacher.Start().ok());
  auto spec = ParseAttachSpec("vol-rec",
                              {{publish_context::kPortals, kPortal},
                               {publish_context::kTargetIqn, target},
                               {publish_context::kLun, "1"},
                               {publish_context::kSerial, "bc7f3a9c2e41d08b"},
                               {publish_context::kChapRequired, "true"}},
                              {{secret_keys::kChapUsername, "recuser"},
                               {secret_keys::kChapPassword, kPassword},
                               {secret_keys::kChapMutualUsername, "recarray"},
                               {secret_keys::kChapMutualPassword, kMutualPassword}},
                              initiator);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();

  testing::ProcSecretWatch watch({kPassword, kMutualPassword});
  auto record = attacher.Attach(*spec);
  watch.Stop();
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), StatusCode::kPermissionDenied) << record.status().ToString();
  EXPECT_GT(watch.scans(), 0);
  EXPECT_EQ(executor->secret_args(), 0) << "a command was given a CHAP secret";
  EXPECT_EQ(watch.sightings(), 0) << "a CHAP secret was visible in /proc/<pid>/cmdline or environ";

  // What iscsiadm read back from the record the connector wrote: the user
  // names in clear, the passwords stored (iscsiadm masks them in show).
  std::string shown = executor->shown();
  EXPECT_NE(shown.find("node.session.auth.authmethod = CHAP\n"), std::string::npos) << shown;
  EXPECT_NE(shown.find("node.session.auth.username = recuser\n"), std::string::npos) << shown;
  EXPECT_NE(shown.find("node.session.auth.password = ********\n"), std::string::npos) << shown;
  EXPECT_NE(shown.find("node.session.auth.username_in = recarray\n"), std::string::npos) << shown;
  EXPECT_NE(shown.find("node.session.auth.password_in = ********\n"), std::string::npos) << shown;
  EXPECT_NE(shown.find("node.startup = manual\n"), std::string::npos) << shown;
  EXPECT_EQ(shown.find(kPassword), std::string::npos);
  // The failed attach (a final code) left no node record behind.
  EXPECT_FALSE(std::filesystem::exists("/etc/iscsi/nodes/" + target));
}

}  // namespace
}  // namespace blockcsi
