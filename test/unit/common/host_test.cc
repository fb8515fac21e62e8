// The host seam's own calls that callers rely on for safety: a private
// key's mode read back, a socket told apart from a file, and a process's
// exit delivered as an event on an fd.
#include "common/host.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <cstring>
#include <string>
#include <vector>

#include "common/atomic_file.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

bool Readable(int fd, int timeout_ms) {
  pollfd pfd{fd, POLLIN, 0};
  return ::poll(&pfd, 1, timeout_ms) > 0;
}

TEST(HostTest, PermissionsAreReadAndSetUnderTheRoot) {
  testing::TempDir dir;
  auto host = HostRootedAt(dir.path());
  ASSERT_TRUE(host->MakeDirectory("/etc/blockcsi", 0755).ok());
  ASSERT_TRUE(host->OverwriteFile("/etc/blockcsi/tls.key", "k").ok());
  ASSERT_EQ(::chmod(dir.Join("etc/blockcsi/tls.key").c_str(), 0644), 0);
  auto mode = host->Permissions("/etc/blockcsi/tls.key");
  ASSERT_TRUE(mode.ok()) << mode.status().ToString();
  EXPECT_EQ(*mode, 0644u);

  ASSERT_TRUE(host->SetPermissions("/etc/blockcsi/tls.key", 0600).ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir.Join("etc/blockcsi/tls.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u) << "chmod must reach the file under the root";

  EXPECT_EQ(host->Permissions("/etc/blockcsi/absent").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(host->SetPermissions("/etc/blockcsi/absent", 0600).code(), StatusCode::kNotFound);
}

// A node record may hold a CHAP secret: the replacement lands under the
// root with mode 0600 (even over a looser file) and leaves no temp file.
TEST(HostTest, ReplaceFileWritesTheWholeFileUnderTheRootWithMode0600) {
  testing::TempDir dir;
  auto host = HostRootedAt(dir.path());
  ASSERT_TRUE(host->MakeDirectory("/etc/iscsi", 0755).ok());
  ASSERT_TRUE(host->OverwriteFile("/etc/iscsi/record", "old contents, longer than the new").ok());
  ASSERT_EQ(::chmod(dir.Join("etc/iscsi/record").c_str(), 0644), 0);
  ASSERT_TRUE(host->ReplaceFile("/etc/iscsi/record", "new").ok());
  EXPECT_EQ(*ReadFileToString(dir.Join("etc/iscsi/record")), "new");
  struct stat st {};
  ASSERT_EQ(::stat(dir.Join("etc/iscsi/record").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(*host->ListDir("/etc/iscsi"), std::vector<std::string>{"record"});
}

// The node refuses a path whose real path differs from it: every link on
// the way must show, also a dangling one (mkdir or open(O_CREAT) would
// follow it) and one above a part that does not exist yet.
TEST(HostTest, RealPathResolvesEveryLinkUnderTheRoot) {
  testing::TempDir dir;
  auto host = HostRootedAt(dir.path());
  ASSERT_TRUE(host->MakeDirectory("/kubelet/pods/p1", 0755).ok());
  ASSERT_TRUE(host->MakeDirectory("/etc/cron.d", 0755).ok());
  auto real = [&](const std::string& path) {
    auto r = host->RealPath(path);
    EXPECT_TRUE(r.ok()) << path << ": " << r.status().ToString();
    return r.ok() ? *r : "";
  };
  EXPECT_EQ(real("/kubelet/pods/p1"), "/kubelet/pods/p1");
  EXPECT_EQ(real("/kubelet/pods/p1/volumes/pv/mount"), "/kubelet/pods/p1/volumes/pv/mount") << "a missing tail";
  ASSERT_TRUE(host->Symlink(dir.Join("etc/cron.d"), "/kubelet/pods/p2").ok());
  EXPECT_EQ(real("/kubelet/pods/p2"), "/etc/cron.d");
  EXPECT_EQ(real("/kubelet/pods/p2/volumes/pv/mount"), "/etc/cron.d/volumes/pv/mount");
  ASSERT_TRUE(host->Symlink("../../etc/new", "/kubelet/pods/p3").ok());
  EXPECT_EQ(real("/kubelet/pods/p3"), "/etc/new") << "a dangling relative link";
  ASSERT_TRUE(host->Symlink("/outside-the-root", "/kubelet/pods/p4").ok());
  EXPECT_NE(real("/kubelet/pods/p4/mount"), "/kubelet/pods/p4/mount");
}

TEST(HostTest, KindTellsASocketFromAFile) {
  testing::TempDir dir;
  auto host = HostRootedAt(dir.path());
  const std::string socket_path = dir.Join("s.sock");
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  EXPECT_EQ(host->Kind("/s.sock"), PathKind::kSocket);
  ::close(fd);
  ASSERT_TRUE(host->OverwriteFile("/f", "x").ok());
  EXPECT_EQ(host->Kind("/f"), PathKind::kFile);
  EXPECT_EQ(host->Kind("/none"), PathKind::kMissing);
}

TEST(HostTest, WatchExitBecomesReadableWhenTheProcessExits) {
  int go[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(go[1]);  // else its own write end keeps the pipe open
    char c = 0;
    // Exits once the test lets it (or once the test process is gone).
    (void)!::read(go[0], &c, 1);
    ::_exit(0);
  }
  ::close(go[0]);
  // A rooted host watches the machine's processes: they have no root.
  auto host = HostRootedAt("/nonexistent-root");
  auto fd = host->WatchExit(child);
  if (!fd.ok() && fd.status().code() == StatusCode::kUnimplemented) {
    ::close(go[1]);
    ::waitpid(child, nullptr, 0);
    GTEST_SKIP() << "this kernel has no pidfd_open: " << fd.status().message();
  }
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_FALSE(Readable(*fd, 0)) << "the process still runs";
  ::close(go[1]);  // the child reads EOF and exits
  bool exited = Readable(*fd, 60'000);
  EXPECT_TRUE(exited) << "its exit is an event on the fd";
  if (!exited) ::kill(child, SIGKILL);  // never leave the child behind
  ::close(*fd);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);

  // Reaped: the pid names no process any more.
  EXPECT_EQ(host->WatchExit(child).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(host->WatchExit(0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace blockcsi
