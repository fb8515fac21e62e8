#define FUSE_USE_VERSION 312

#include "bridge/bridge_main.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bridge/bridge_cgroup.h"
#include "bridge/bridge_internal.h"
#include "bridge/bridge_protocol.h"
#include "bridge/bridge_transport.h"
#include "bridge/iscsi_bridge_transport.h"
#include "bridge/libiscsi_session.h"
#include "common/atomic_file.h"
#include "common/executor.h"
#include "common/host.h"
#include "common/logging.h"
#include "common/loop_devices.h"
#include "common/lun_identity.h"

namespace blockcsi::bridge_internal {

Status Bridge::Start(const BridgeSecrets& secrets) {
  if (args_.transport == "rbd") {
    BLOCKCSI_ASSIGN_OR_RETURN(transport_, OpenRbd(secrets.ceph_key));
  } else {
    BLOCKCSI_ASSIGN_OR_RETURN(transport_, OpenIscsi(secrets.chap));
  }
  size_ = transport_->size_bytes();
  BLOCKCSI_RETURN_IF_ERROR(MountFuse());
  BLOCKCSI_RETURN_IF_ERROR(SetUpLoop());
  return ListenControl();
}

Status Bridge::ListenControl() {
  UnixSocketAddress addr(args_.control_socket);
  BLOCKCSI_RETURN_IF_ERROR(addr.status());
  ::unlink(args_.control_socket.c_str());
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return ErrnoToStatus(errno, "socket");
  // Created 0600 from the start (umask 077), then made sure.
  if (::bind(listen_fd_, addr.addr(), addr.length()) != 0) {
    return ErrnoToStatus(errno, "bind " + args_.control_socket);
  }
  ::chmod(args_.control_socket.c_str(), 0600);
  if (::listen(listen_fd_, 16) != 0) return ErrnoToStatus(errno, "listen " + args_.control_socket);
  return OkStatus();
}

nlohmann::json Bridge::StatusReply(bool refresh_identity) {
  nlohmann::json j = ReplyFromStatus(OkStatus());
  if (refresh_identity && transport_) {
    auto id = transport_->ReadIdentity();
    if (!id.ok()) return ReplyFromStatus(id.status());
    identity_ = *id;
  }
  j["volume_id"] = args_.volume_id;
  j["pid"] = ::getpid();
  j["device"] = device_;
  j["size_bytes"] = size_.load();
  j["block_size"] = transport_ ? transport_->block_size() : 0;
  j["transport"] = args_.transport;
  // How FUSE requests reach the bridge: "io_uring" or "dev_fuse".
  j["fuse_path"] = fuse_path();
  if (ring_) {
    j["fuse_ring"] = {{"queues", ring_->queues()},
                      {"depth", ring_->depth()},
                      {"requests", ring_->requests()},
                      {"mapped_bytes", ring_->mapped_bytes()}};
  }
  j["location"] = transport_ ? transport_->location() : "";
  j["portal"] = transport_ && args_.transport == "iscsi" ? transport_->location() : "";
  // A lasting condition of the transport (a fenced rbd client): the volume
  // is unusable however long ago the last I/O error was.
  Status health = transport_ ? transport_->Health() : OkStatus();
  j["healthy"] = health.ok();
  if (!health.ok()) j["health_message"] = health.message();
  j["serial"] = identity_.serial;
  j["naa"] = identity_.naa;
  j["io_errors"] = io_errors_.load();
  j["write_errors"] = write_errors_.load();
  nlohmann::json io;
  io["read"] = reads_.ToJson();
  io["write"] = writes_.ToJson();
  io["flush"] = flushes_.ToJson();
  io["discard"] = discards_.ToJson();
  io["reconnects"] = transport_ ? transport_->reconnects() : 0;
  io["connection_drops"] = transport_ ? transport_->connection_drops() : 0;
  io["latency_buckets"] = kIoLatencyBuckets;
  j["io"] = io;
  MutexLock lock(err_mu_);
  j["last_error"] = last_error_;
  if (!last_error_.empty()) {
    j["last_error_age_ms"] =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - last_error_at_)
            .count();
  }
  return j;
}

Status Bridge::Teardown(bool check_in_use) {
  auto fs = HostRootedAt("");
  if (!device_.empty()) {
    if (check_in_use) {
      auto mountinfo = ReadFileToString("/proc/self/mountinfo");
      if (mountinfo.ok()) {
        auto where = MountPointsOfDevice(*fs, device_, *mountinfo);
        if (!where.empty()) {
          return FailedPrecondition("volume \"" + args_.volume_id + "\": " + device_ + " is still mounted at " +
                                    where.front() + "; unmount it first");
        }
      }
    }
    Status detached = DetachLoop();
    if (!detached.ok()) return Internal("cannot detach " + device_ + ": " + detached.message());
    LogInfo("bridge loop device detached", {{"volume_id", args_.volume_id}, {"device", device_}});
    device_.clear();
  }
  StopFuse();
  if (transport_) {
    // After FUSE stopped: nothing new arrives, and Close lets what is in
    // flight complete (and reply) first.
    Status st = transport_->Flush();
    if (!st.ok()) LogWarn("final flush failed", {{"volume_id", args_.volume_id}, {"error", st.message()}});
    transport_->Close();
    transport_.reset();
  }
  ring_.reset();  // after the transport: its last completions answered through it
  if (fuse_ != nullptr) {
    fuse_session_destroy(fuse_);
    fuse_ = nullptr;
  }
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    ::unlink(args_.control_socket.c_str());
  }
  return OkStatus();
}

nlohmann::json Bridge::Handle(const nlohmann::json& request, bool* stop) {
  std::string op = request.value("op", "");
  if (op == "status") return StatusReply(request.value("refresh_identity", false));
  if (op == "rescan") {
    Status st = transport_->RefreshSize();
    if (!st.ok()) return ReplyFromStatus(st);
    size_ = transport_->size_bytes();
    auto r = RunChecked(*executor_, Command("losetup").Arg("--set-capacity").Arg(device_));
    if (!r.ok()) return ReplyFromStatus(r.status());
    LogInfo("bridge rescanned", {{"volume_id", args_.volume_id}, {"size_bytes", std::to_string(size_.load())}});
    return StatusReply(false);
  }
  if (op == "shutdown") {
    // Keep the listening socket until teardown succeeded, so a failed
    // shutdown can be retried.
    int fd = listen_fd_;
    listen_fd_ = -1;
    Status st = Teardown(true);
    if (!st.ok()) {
      listen_fd_ = fd;
      return ReplyFromStatus(st);
    }
    ::close(fd);
    ::unlink(args_.control_socket.c_str());
    LogInfo("bridge shut down", {{"volume_id", args_.volume_id}});
    *stop = true;
    return ReplyFromStatus(OkStatus());
  }
  return ReplyFromStatus(InvalidArgument("bridge: unknown op \"" + op + "\""));
}

void Bridge::Serve() {
  bool stop = false;
  while (!stop) {
    int conn = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      LogError("bridge control socket failed", {{"volume_id", args_.volume_id}, {"errno", std::strerror(errno)}});
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    std::string line;
    char buf[4096];
    pollfd pfd{conn, POLLIN, 0};
    while (line.find('\n') == std::string::npos && line.size() < 65536) {
      // A client that never finishes its line must not wedge the bridge.
      if (::poll(&pfd, 1, 5000) <= 0) break;
      ssize_t n = ::recv(conn, buf, sizeof buf, 0);
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    nlohmann::json reply;
    try {
      reply = Handle(nlohmann::json::parse(line.substr(0, line.find('\n'))), &stop);
    } catch (const nlohmann::json::exception& e) {
      reply = ReplyFromStatus(InvalidArgument(std::string("bridge: malformed request: ") + e.what()));
    }
    std::string out = reply.dump() + "\n";
    ::send(conn, out.data(), out.size(), MSG_NOSIGNAL);
    ::close(conn);
  }
}

namespace {

// What each bridge holds resident, sized on purpose (docs/performance.md
// section 7, by mapping); a node runs one bridge per volume.
void SizeMemory() {
  // One malloc arena: glibc's default is one per thread (up to 8 x cores),
  // each keeping what its thread freed. A bridge's few threads spend their
  // time in the kernel, so they do not contend for one.
  ::mallopt(M_ARENA_MAX, 1);
  // A fixed mmap threshold (setting it stops glibc from sliding it up to
  // the largest freed block): request-sized buffers are mapped for the
  // request and unmapped after, not kept in the heap once a 256 KiB request
  // has been seen.
  ::mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  ::mallopt(M_TRIM_THRESHOLD, 128 * 1024);
  // libfuse's worker threads: their deepest call chain is a request
  // handler and a libiscsi poll, far from glibc's 8 MiB default stack.
  ::setenv("FUSE_THREAD_STACK", "262144", 0);
}

void WriteReadyLine(const nlohmann::json& j) {
  std::string line = j.dump() + "\n";
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::write(STDOUT_FILENO, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the plugin is gone; the record still leads to us
    off += static_cast<size_t>(n);
  }
}

}  // namespace
}  // namespace blockcsi::bridge_internal

namespace blockcsi {

using namespace bridge_internal;  // NOLINT(google-build-using-namespace): the bridge_*.cc files share these internals

namespace {

// The plugin's log format and level, as far as they parse (text at info
// otherwise): a bad flag is reported through the log it sets up.
void InitBridgeLogging(const BridgeArgs& args) {
  auto format = ParseLogFormat(args.log_format);
  auto level = ParseLogLevel(args.log_level);
  InitLogging("blockcsi-bridge", format.ok() ? *format : LogFormat::kText, level.ok() ? *level : LogLevel::kInfo);
}

}  // namespace

int RunBridgeMain(int argc, char** argv) {
  SizeMemory();
  // Terminal and plugin signals must not take a mounted volume down with
  // them: the bridge stops only through its control socket (or SIGKILL).
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);
  ::umask(077);
  BridgeArgs args;
  Status st = ParseArgs(argc, argv, &args);
  InitBridgeLogging(args);
  if (!st.ok()) {
    std::cerr << st.message() << "\n";
    WriteReadyLine(ReplyFromStatus(st));
    return 2;
  }
  if (!args.cgroup.empty()) {
    // First, before any session, mount or loop device exists: a bridge that
    // cannot leave the plugin's cgroup would die with the plugin's container
    // and fail the filesystem above it, so it refuses to start instead.
    auto fs = HostRootedAt("");
    st = PrepareBridgeCgroup(*fs, args.cgroup);
    if (st.ok()) st = MoveIntoCgroup(*fs, args.cgroup, ::getpid());
    if (!st.ok()) {
      LogError("bridge cannot move into its cgroup", {{"volume_id", args.volume_id}, {"error", st.message()}});
      WriteReadyLine(ReplyFromStatus(
          FailedPrecondition("volume \"" + args.volume_id + "\": bridge refused to start: " + st.message())));
      return 1;
    }
  }
  BridgeSecrets secrets;
  if (args.secrets_on_stdin) {
    auto read = ReadSecretsFromStdin();
    if (!read.ok()) {
      WriteReadyLine(ReplyFromStatus(read.status()));
      return 2;
    }
    secrets = std::move(*read);
  }
  ::close(STDIN_FILENO);
  ::open("/dev/null", O_RDONLY);  // fd 0 again, so it is never reused by accident

  Bridge bridge(args);
  st = bridge.Start(secrets);
  secrets = BridgeSecrets{};
  if (!st.ok()) {
    Status td = bridge.Teardown(false);
    if (!td.ok()) LogError("bridge cleanup after failed start", {{"error", td.ToString()}});
    WriteReadyLine(ReplyFromStatus(st));
    return 1;
  }
  WriteReadyLine(bridge.StatusReply(false));
  int devnull = ::open("/dev/null", O_WRONLY);
  if (devnull >= 0) {
    ::dup2(devnull, STDOUT_FILENO);
    ::close(devnull);
  }
  if (!args.cgroup.empty()) {
    // A bridge meant to outlive the plugin's container must not hold the
    // container's log pipe either: the runtime would wait for its EOF, and
    // once the container is gone nobody reads it. From here on the bridge
    // logs next to its control socket (removed with the bridge's dir).
    std::string log_path = args.control_socket.substr(0, args.control_socket.find_last_of('/') + 1) + "bridge.log";
    int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log_fd >= 0) {
      LogInfo("bridge serving; its log continues in a file",
              {{"volume_id", args.volume_id}, {"device", bridge.device()}, {"log", log_path}});
      std::fflush(stderr);
      ::dup2(log_fd, STDERR_FILENO);
      ::close(log_fd);
    } else {
      LogWarn("bridge keeps logging to the plugin's stderr",
              {{"volume_id", args.volume_id}, {"log", log_path}, {"error", std::strerror(errno)}});
    }
  }
  LogInfo("bridge serving", {{"volume_id", args.volume_id}, {"device", bridge.device()}});
  bridge.Serve();
  return 0;
}

}  // namespace blockcsi
