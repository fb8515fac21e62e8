#include "common/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
