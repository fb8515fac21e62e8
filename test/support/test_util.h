// Helpers shared by the tests: temp dirs that clean up, child processes
// stopped by their pid, programs run to their end, and waiting for a socket. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace blockcsi::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A program the test started; killed (SIGKILL) and reaped on destruction
// unless it was already waited for.
class ChildProcess {
 public:
  // stdout+stderr go to `log_path` when given.
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path = "");
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  void Signal(int sig);
  // Waits up to `timeout`; returns the exit code, 128+signal, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

// Polls until a unix socket at `path` accepts a connection.
bool WaitForSocket(const std::string& path, std::chrono::milliseconds timeout);

std::string ReadFileOrEmpty(const std::string& path);

// Runs a program to its end (argv, no shell; killed after `timeout`): its
// exit code, or -1 when it could not run; stdout+stderr (or why it could
// not run) into *output when given.
int RunProgram(const std::vector<std::string>& argv, std::string* output = nullptr,
               std::chrono::seconds timeout = std::chrono::seconds(300));

// Where this build and its sources are (generated: build_paths.cc.in).
std::string SourceDir();
std::string BuildDir();
// The program directory of this build (build/bin).
std::string BinDir();
// Test binaries and test-only programs (build/tests).
std::string TestsDir();
std::string TestDataPath(const std::string& name);
// Copies the tree at `from` (a captured sysfs scenario) into `root`, merging
// with what is there and keeping symlinks as links (std::filesystem::copy
// cannot overwrite a symlink).
void MergeTreeInto(const std::string& from, const std::string& root);

// Skip helpers: "requires root" etc., printed as the skip reason.
bool IsRoot();
// Whether `program` is an executable on $PATH (or /sbin, /usr/sbin): a
// missing program is a missing capability of the machine, a failing one is not.
bool HaveProgram(const std::string& program);
// Why `program` cannot take `option` on this machine ("" when it can): it is
// not installed, or its usage text does not list the option (mke2fs before
// 1.43 has no "-d root-directory"). A test whose setup runs such a program
// skips only for this reason; any other failure of the program is a failure.
std::string MissingProgramOption(const std::string& program, const std::string& option);
// The shared libraries `program` names (the NEEDED entries of `readelf -d`),
// or the reason readelf gave when it failed (empty list).
std::vector<std::string> NeededLibraries(const std::string& program, std::string* error);

}  // namespace blockcsi::testing
