#include "common/endpoint.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "common/atomic_file.h"
#include "support/test_util.h"

namespace blockcsi {
namespace {

int BindSocket(const std::string& path, bool listen_on_it) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  if (listen_on_it) {
    EXPECT_EQ(::listen(fd, 1), 0);
  }
  return fd;
}

TEST(EndpointTest, ParsesUnixEndpoints) {
  EXPECT_EQ(*ParseUnixEndpoint("unix:///tmp/x/csi.sock"), "/tmp/x/csi.sock");
  EXPECT_EQ(*ParseUnixEndpoint("unix:/tmp/csi.sock"), "/tmp/csi.sock");
  EXPECT_FALSE(ParseUnixEndpoint("tcp://1.2.3.4:5").ok());
  EXPECT_FALSE(ParseUnixEndpoint("unix://relative.sock").ok());
  EXPECT_FALSE(ParseUnixEndpoint("/tmp/csi.sock").ok());
}

TEST(EndpointTest, StaleSocketIsRemoved) {
  testing::TempDir dir;
  std::string path = dir.Join("csi.sock");
  int fd = BindSocket(path, /*listen_on_it=*/false);
  ::close(fd);  // the file stays, nobody answers: stale
  ASSERT_EQ(::access(path.c_str(), F_OK), 0);
  EXPECT_TRUE(PrepareUnixSocket(*HostRootedAt(dir.path()), "/csi.sock").ok());
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

TEST(EndpointTest, LiveServerIsNotDisplaced) {
  testing::TempDir dir;
  std::string path = dir.Join("csi.sock");
  int fd = BindSocket(path, /*listen_on_it=*/true);
  // The probe dials the socket under the host's root.
  Status st = PrepareUnixSocket(*HostRootedAt(dir.path()), "/csi.sock");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("already listening"), std::string::npos) << st.message();
  EXPECT_EQ(::access(path.c_str(), F_OK), 0);
  ::close(fd);
}

TEST(EndpointTest, RegularFileIsNeverRemoved) {
  testing::TempDir dir;
  std::string path = dir.Join("csi.sock");
  ASSERT_TRUE(WriteFileAtomically(path, "precious").ok());
  EXPECT_EQ(PrepareUnixSocket(*HostRootedAt(dir.path()), "/csi.sock").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(*ReadFileToString(path), "precious");
}

TEST(EndpointTest, CreatesMissingDirectory) {
  testing::TempDir dir;
  EXPECT_TRUE(PrepareUnixSocket(*HostRootedAt(dir.path()), "/a/b/csi.sock").ok());
  EXPECT_EQ(::access(dir.Join("a/b").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace blockcsi
