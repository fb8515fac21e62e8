#include "common/executor.h"
#include "common/logging.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <thread>

#include "support/test_util.h"

namespace blockcsi {
namespace {

using namespace std::chrono_literals;

TEST(ExecutorTest, CapturesOutputAndExitCode) {
  auto exec = MakeProcessExecutor();
  auto r = exec->Run(Command("/bin/sh").Arg("-c").Arg("echo out; echo err >&2; exit 3"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->stdout_text, "out\n");
  EXPECT_EQ(r->stderr_text, "err\n");
  EXPECT_FALSE(r->ok());
}

TEST(ExecutorTest, ShellMetacharactersArePassedLiterally) {
  auto exec = MakeProcessExecutor();
  testing::TempDir dir;
  std::string victim = dir.Join("victim");
  ASSERT_TRUE(exec->Run(Command("/usr/bin/touch").Arg(victim)).ok());
  auto r = exec->Run(Command("/bin/echo").Arg("a; rm -f " + victim).Arg("$(id -u)").Arg("`id`").Arg("x && y | z"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stdout_text, "a; rm -f " + victim + " $(id -u) `id` x && y | z\n");
  EXPECT_EQ(::access(victim.c_str(), F_OK), 0) << "the argument was run by a shell";
}

TEST(ExecutorTest, TimeoutKillsTheChildAndItsGroup) {
  auto exec = MakeProcessExecutor();
  testing::TempDir dir;
  std::string pidfile = dir.Join("pid");
  // The shell starts a grandchild that would outlive a plain kill of the shell.
  // No clock is read: DEADLINE_EXCEEDED shows the timeout fired (the shell
  // alone would exit 0 after 60 s), and the grandchild's death that the kill
  // reached the whole group.
  auto r = exec->Run(Command("/bin/sh").Arg("-c").Arg("sleep 60 & echo $! > " + pidfile + "; wait").Timeout(300ms));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  std::string pid_text = testing::ReadFileOrEmpty(pidfile);
  ASSERT_FALSE(pid_text.empty());
  pid_t grandchild = std::stoi(pid_text);
  // The grandchild was killed; wait for init to reap it. The bound only keeps
  // a broken kill from hanging the test (sleep 60 would end on its own later).
  bool gone = false;
  for (int i = 0; i < 3000 && !gone; ++i) {
    std::string stat = testing::ReadFileOrEmpty("/proc/" + std::to_string(grandchild) + "/stat");
    gone = stat.empty() || stat.find(") Z") != std::string::npos;
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone) << "grandchild " << grandchild << " survived the timeout";
}

TEST(ExecutorTest, SensitiveArgumentsAreRedactedInLogsAndErrors) {
  Command cmd = Command("/bin/sh").Arg("-c").Arg("exit 1").Arg("--password").Secret("hunter2-secret");
  EXPECT_EQ(cmd.Redacted().find("hunter2-secret"), std::string::npos);
  EXPECT_NE(cmd.Redacted().find("***"), std::string::npos);
  auto exec = MakeProcessExecutor();
  auto r = RunChecked(*exec, cmd, StatusCode::kUnavailable);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message().find("hunter2-secret"), std::string::npos) << r.status().message();
  // And the secret really reached the program.
  auto echo = exec->Run(Command("/bin/echo").Secret("hunter2-secret"));
  ASSERT_TRUE(echo.ok());
  EXPECT_EQ(echo->stdout_text, "hunter2-secret\n");
}

// Item 5 of issue #15: what a caller sees of a failed program is the line
// that says why, never its usage text or version banner.
std::string ProgramError(const std::string& name) {
  return testing::ReadFileOrEmpty(testing::TestDataPath("program-errors/" + name));
}

TEST(FirstMeaningfulLineTest, RealProgramsOutputs) {
  EXPECT_EQ(FirstMeaningfulLine(ProgramError("mkfs.xfs-too-small.stderr")), "Filesystem must be larger than 300MB.");
  const std::string inodes =
      "mkfs.ext4: inode_size (256) * inodes_count (100000000) too big for a filesystem with 65536 blocks, specify "
      "higher inode_ratio (-i) or lower inode count (-N).";
  EXPECT_EQ(FirstMeaningfulLine(ProgramError("mkfs.ext4-too-many-inodes.stderr")), inodes);
  EXPECT_EQ(FirstMeaningfulLine(ProgramError("mke2fs-banner-too-many-inodes.stderr")), inodes);
  EXPECT_EQ(FirstMeaningfulLine(ProgramError("mkfs.ext4-bad-option.stderr")), "mkfs.ext4: invalid option -- 'Z'");
  EXPECT_EQ(FirstMeaningfulLine(ProgramError("mkfs.btrfs-too-small.stderr")),
            "ERROR: 'tiny.img' is too small to make a usable filesystem");
  EXPECT_EQ(FirstMeaningfulLine(ProgramError("mkfs.btrfs-too-small.stdout")), "");
}

TEST(FirstMeaningfulLineTest, ShortAndClean) {
  EXPECT_EQ(FirstMeaningfulLine(""), "");
  EXPECT_EQ(FirstMeaningfulLine("\n\n  \nUsage: prog [options]\n\t-x  do x\n"), "");
  EXPECT_EQ(FirstMeaningfulLine("Try `tgtadm --help' for more information.\n"), "");
  std::string line = FirstMeaningfulLine(std::string(1000, 'e') + "\n");
  EXPECT_EQ(line.size(), 300u);
}

TEST(FirstMeaningfulLineTest, DescribeFailureBlanksSecretsAndCarriesOneLine) {
  Command cmd("prog");
  cmd.Arg("--user").Arg("u").Secret("hunter2-secret");
  CommandResult r;
  r.exit_code = 2;
  r.stderr_text = "prog: password hunter2-secret rejected\nUsage: prog --user U PASSWORD\n  more usage\n";
  std::string described = DescribeFailure(cmd, r);
  EXPECT_EQ(described, "`prog --user u ***` failed (exit code 2): prog: password *** rejected");
}

TEST(ExecutorTest, AFailedProgramsWholeOutputIsLoggedAtDebugWithoutSecrets) {
  std::string log;
  InitLogging("blockcsi", LogFormat::kText, LogLevel::kDebug);
  SetLogCaptureForTest(&log);
  auto exec = MakeProcessExecutor();
  auto r = exec->Run(Command("/bin/sh")
                         .Arg("-c")
                         .Arg("echo \"bad password $1\" >&2; echo second line >&2; read l; echo \"read $l\"; exit 3")
                         .Arg("sh")
                         .Secret("hunter2-secret")
                         .Stdin("stdin-secret-line\n", /*sensitive=*/true));
  SetLogCaptureForTest(nullptr);
  InitLogging("blockcsi", LogFormat::kText, LogLevel::kInfo);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(log.find("second line"), std::string::npos) << log;
  EXPECT_NE(log.find("read ***"), std::string::npos) << log;
  EXPECT_EQ(log.find("hunter2-secret"), std::string::npos) << log;
  EXPECT_EQ(log.find("stdin-secret-line"), std::string::npos) << log;
}

TEST(ExecutorTest, StdinIsDelivered) {
  auto exec = MakeProcessExecutor();
  std::string big(300000, 'x');
  auto r = exec->Run(Command("/usr/bin/wc").Arg("-c").Stdin(big));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::stoul(r->stdout_text), big.size());
}

TEST(ExecutorTest, MissingProgramIsNotFound) {
  auto exec = MakeProcessExecutor();
  auto r = exec->Run(Command("/nonexistent/iscsiadm").Arg("-m").Arg("session"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/iscsiadm"), std::string::npos);
}

// A descriptor the plugin holds without O_CLOEXEC (libmount's hold on a
// mount's target, from another thread) must not reach the program: there
// it would keep that mount busy until the program exits.
TEST(ExecutorTest, ProgramsGetOnlyStdinStdoutAndStderr) {
  int held = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC, on purpose
  ASSERT_GE(held, 3);
  auto exec = MakeProcessExecutor();
  auto r = exec->Run(Command("/bin/sh").Arg("-c").Arg("ls /proc/$$/fd; [ -e /proc/$$/fd/" + std::to_string(held) +
                                                      " ] && echo inherited || echo not-inherited"));
  ::close(held);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->stdout_text.find("not-inherited"), std::string::npos) << r->stdout_text;
}

// Issue #21: tgtadm was found through PATH (~/.cargo/bin, /usr/local/sbin
// before /usr/sbin). A program planted in a PATH directory never runs; a
// bare name is taken from the system directories only.
TEST(ExecutorTest, BareNamesAreNeverLookedUpInPath) {
  testing::TempDir dir;
  std::string planted = dir.Join("planted");
  std::string marker = dir.Join("ran");
  for (const char* name : {"blockcsi-planted-probe", "losetup"}) {
    std::string script = dir.Join(name);
    FILE* f = std::fopen(script.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "#!/bin/sh\ntouch %s\n", marker.c_str());
    std::fclose(f);
    ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  }
  const char* old = std::getenv("PATH");
  std::string saved = old != nullptr ? old : "";
  ::setenv("PATH", dir.path().c_str(), 1);
  auto exec = MakeProcessExecutor();
  auto missing = exec->Run(Command("blockcsi-planted-probe"));
  auto system = exec->Run(Command("losetup").Arg("--version"));
  ::setenv("PATH", saved.c_str(), 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("PATH is not searched"), std::string::npos);
  ASSERT_TRUE(system.ok()) << system.status().ToString();
  EXPECT_EQ(system->exit_code, 0) << "losetup from /usr/sbin, not the planted one";
  EXPECT_NE(system->stdout_text.find("losetup"), std::string::npos);
  EXPECT_NE(::access(marker.c_str(), F_OK), 0) << "a program planted in PATH ran";
}

}  // namespace
}  // namespace blockcsi
