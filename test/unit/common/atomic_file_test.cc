#include "common/atomic_file.h"

#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace blockcsi {
namespace {

using testing::TempDir;

constexpr AtomicWritePoints kTestPoints{"test.write.temp-written", "test.write.temp-synced", "test.write.renamed",
                                        "test.write.dir-synced"};

TEST(AtomicFileTest, WritesWithMode0600) {
  TempDir dir;
  std::string path = dir.Join("record.json");
  ASSERT_TRUE(WriteFileAtomically(path, "{\"a\":1}").ok());
  auto text = ReadFileToString(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "{\"a\":1}");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(AtomicFileTest, ReplacesExistingFile) {
  TempDir dir;
  std::string path = dir.Join("f");
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "new contents").ok());
  EXPECT_EQ(*ReadFileToString(path), "new contents");
}

// A crash is simulated by a child process that dies (_exit) at a step of the
// write; afterwards the file must hold the old or the new bytes, whole. (What
// a power loss would add, a missing fsync, is the order test below.)
TEST(AtomicFileTest, CrashAtAnyStepLeavesOldOrNewNeverTorn) {
  const std::string old_text(100000, 'o');
  const std::string new_text(150000, 'n');
  for (const char* crash_step : {"temp-written", "temp-synced", "renamed"}) {
    TempDir dir;
    std::string path = dir.Join("record.json");
    ASSERT_TRUE(WriteFileAtomically(path, old_text).ok());
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      AtomicWriteOptions options;
      std::string step_to_crash = crash_step;
      options.fault_points = kTestPoints;
      options.fault_hook = [&](std::string_view point) {
        if (point == "test.write." + step_to_crash) ::_exit(0);
        return OkStatus();
      };
      (void)WriteFileAtomically(path, new_text, options);
      ::_exit(1);  // the hook should have ended us
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0) << "child did not reach step " << crash_step;
    auto text = ReadFileToString(path);
    ASSERT_TRUE(text.ok());
    if (std::string(crash_step) == "renamed") {
      EXPECT_EQ(*text, new_text) << crash_step;
    } else {
      EXPECT_EQ(*text, old_text) << crash_step;
    }
  }
}

// The durability promise is an order of system calls: the temp file's bytes
// reach the disk (fsync) before the rename makes them the file, and the
// rename reaches it (fsync of the directory) before the call returns. A crash
// test with _exit cannot see a missing fsync (the page cache survives a
// process death), so this records the steps as each call completes.
TEST(AtomicFileTest, FsyncsTheTempFileBeforeTheRenameAndTheDirectoryAfter) {
  TempDir dir;
  std::vector<std::string> steps;
  AtomicWriteOptions options;
  options.fault_points = kTestPoints;
  options.fault_hook = [&](std::string_view point) {
    steps.emplace_back(point);
    return OkStatus();
  };
  ASSERT_TRUE(WriteFileAtomically(dir.Join("record.json"), "{}", options).ok());
  EXPECT_EQ(steps, (std::vector<std::string>{"test.write.temp-written", "test.write.temp-synced", "test.write.renamed",
                                             "test.write.dir-synced"}));
}

TEST(AtomicFileTest, WithoutDirectorySyncTheTempFileIsStillSyncedBeforeTheRename) {
  TempDir dir;
  std::vector<std::string> steps;
  AtomicWriteOptions options;
  options.fault_points = kTestPoints;
  options.sync_directory = false;
  options.fault_hook = [&](std::string_view point) {
    steps.emplace_back(point);
    return OkStatus();
  };
  ASSERT_TRUE(WriteFileAtomically(dir.Join("record.json"), "{}", options).ok());
  EXPECT_EQ(steps,
            (std::vector<std::string>{"test.write.temp-written", "test.write.temp-synced", "test.write.renamed"}));
  EXPECT_EQ(*ReadFileToString(dir.Join("record.json")), "{}");
}

// The kernel's view of the fsyncs, not the code's own fault points (a
// dropped ::fsync under a kept step would pass those): in a forked child,
// seccomp traps every fsync, the SIGSYS handler notes the kind of file it
// was for ('F' a file, 'D' a directory) and answers 0, or -EIO when asked
// to fail. The child reports the notes and the calls' results on a pipe.
bool g_fail_fsync = false;
char g_fsyncs[64];
size_t g_fsync_count = 0;

#if defined(__x86_64__)
void OnTrappedFsync(int, siginfo_t*, void* context) {
  auto* uc = static_cast<ucontext_t*>(context);
  struct stat st {};
  int fd = static_cast<int>(uc->uc_mcontext.gregs[REG_RDI]);
  char kind = ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) ? 'D' : 'F';
  if (g_fsync_count < sizeof g_fsyncs) g_fsyncs[g_fsync_count++] = kind;
  uc->uc_mcontext.gregs[REG_RAX] = g_fail_fsync ? -EIO : 0;
}
#endif

// Runs body in a child whose fsyncs are trapped; returns what it wrote,
// then "|" and the fsyncs it made.
std::string WithTrappedFsync(bool fail, const std::function<std::string()>& body) {
  int out[2];
  if (::pipe(out) != 0) return "pipe failed";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(out[0]);
    g_fail_fsync = fail;
    struct sigaction sa {};
    sa.sa_sigaction = OnTrappedFsync;
    sa.sa_flags = SA_SIGINFO;
    ::sigaction(SIGSYS, &sa, nullptr);
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fsync, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
      _exit(3);
    }
    std::string report = body();
    report += "|" + std::string(g_fsyncs, g_fsync_count);
    ssize_t n = ::write(out[1], report.data(), report.size());
    _exit(n == static_cast<ssize_t>(report.size()) ? 0 : 4);
  }
  ::close(out[1]);
  std::string got;
  char buf[256];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "child failed: " + std::to_string(status);
  return got;
}

std::string CodeOf(const Status& st) { return st.ok() ? "ok" : "error"; }

TEST(AtomicFileTest, TheKernelSeesTheFileThenTheDirectoryFsyncedAndAFailedFsyncFailsTheWrite) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the SIGSYS handler reads x86_64 registers";
#else
  TempDir dir;
  const std::string path = dir.Join("record.json");
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  EXPECT_EQ(WithTrappedFsync(false, [&] { return CodeOf(WriteFileAtomically(path, "new")); }), "ok|FD");
  EXPECT_EQ(*ReadFileToString(path), "new");
  AtomicWriteOptions no_dir_sync;
  no_dir_sync.sync_directory = false;
  EXPECT_EQ(WithTrappedFsync(false, [&] { return CodeOf(WriteFileAtomically(path, "newer", no_dir_sync)); }), "ok|F");
  EXPECT_EQ(WithTrappedFsync(false, [&] { return CodeOf(RemoveFileDurably(path)); }), "ok|D");

  // A failed fsync of the temp file fails the write and leaves the old file
  // and no temp file behind.
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  EXPECT_EQ(WithTrappedFsync(true, [&] { return CodeOf(WriteFileAtomically(path, "new")); }), "error|F");
  EXPECT_EQ(*ReadFileToString(path), "old");
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) left.push_back(entry.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"record.json"});
#endif
}

TEST(AtomicFileTest, RemoveMissingFileIsOk) {
  TempDir dir;
  EXPECT_TRUE(RemoveFileDurably(dir.Join("nothing")).ok());
  ASSERT_TRUE(WriteFileAtomically(dir.Join("x"), "1").ok());
  EXPECT_TRUE(RemoveFileDurably(dir.Join("x")).ok());
  EXPECT_EQ(ReadFileToString(dir.Join("x")).status().code(), StatusCode::kNotFound);
}

TEST(AtomicFileTest, MakeDirectoriesRefusesAFile) {
  TempDir dir;
  ASSERT_TRUE(MakeDirectories(dir.Join("a/b/c")).ok());
  ASSERT_TRUE(WriteFileAtomically(dir.Join("file"), "x").ok());
  EXPECT_EQ(MakeDirectories(dir.Join("file")).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace blockcsi
