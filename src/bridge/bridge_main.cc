#define FUSE_USE_VERSION 31

#include "bridge/bridge_main.h"

#include <fcntl.h>
#include <fuse.h>
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
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bridge/bridge_cgroup.h"
#include "bridge/bridge_protocol.h"
#include "bridge/bridge_transport.h"
#include "bridge/iscsi_bridge_transport.h"
#include "bridge/libiscsi_session.h"
#include "bridge/rbd_bridge_transport.h"
#include "common/atomic_file.h"
#include "common/executor.h"
#include "common/filesystem.h"
#include "common/logging.h"
#include "common/loop_devices.h"
#include "common/lun_identity.h"

namespace blockcsi {
namespace {

// Largest FUSE request; the iSCSI transport splits bigger ones again.
constexpr uint32_t kMaxTransferBytes = 1024 * 1024;

struct BridgeArgs {
  std::string transport = "iscsi";  // "iscsi" | "rbd"
  std::string volume_id;
  std::string control_socket;
  std::string mountpoint;
  std::vector<std::string> portals;
  std::string target_iqn;
  int lun = 0;
  std::string initiator_iqn;
  std::string expected_serial;
  std::string expected_wwn;
  bool read_only = false;
  bool secrets_on_stdin = false;
  int io_timeout_s = 30;
  int reconnect_retries = 3;
  // iSCSI sessions for data: a libiscsi context runs one command at a time,
  // so several sessions let the loop device keep several requests in flight.
  int sessions = 1;
  std::string log_format = "text";
  // Transport "rbd": the image, the monitors (empty: ceph_conf's), the
  // cephx id, and the node id under which the client registers for fencing.
  // expected_serial carries the image id.
  std::string rbd_pool;
  std::string rbd_image;
  std::string ceph_monitors;
  std::string ceph_user = "admin";
  std::string ceph_conf = "/etc/ceph/ceph.conf";
  std::string node_id;
  // A cgroup v2 directory outside the plugin container's: the bridge moves
  // itself there before it opens anything, so that the runtime's kill of
  // the plugin's container does not reach it.
  std::string cgroup;
};

// What arrives on stdin (JSON), never in argv: /proc/<pid>/cmdline is
// readable by every user of the node.
struct BridgeSecrets {
  ChapCredentials chap;
  std::string ceph_key;
};

Status ParseArgs(int argc, char** argv, BridgeArgs* a) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> StatusOr<std::string> {
      if (i + 1 >= argc) return InvalidArgument("bridge: " + flag + " needs a value");
      return std::string(argv[++i]);
    };
    auto as_int = [&](int* out) -> Status {
      BLOCKCSI_ASSIGN_OR_RETURN(std::string v, value());
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
      if (ec != std::errc() || p != v.data() + v.size()) return InvalidArgument("bridge: " + flag + " wants a number");
      return OkStatus();
    };
    if (flag == "--transport") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->transport, value());
    } else if (flag == "--rbd-pool") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->rbd_pool, value());
    } else if (flag == "--rbd-image") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->rbd_image, value());
    } else if (flag == "--ceph-monitors") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->ceph_monitors, value());
    } else if (flag == "--ceph-user") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->ceph_user, value());
    } else if (flag == "--ceph-conf") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->ceph_conf, value());
    } else if (flag == "--node-id") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->node_id, value());
    } else if (flag == "--cgroup") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->cgroup, value());
    } else if (flag == "--volume-id") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->volume_id, value());
    } else if (flag == "--control-socket") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->control_socket, value());
    } else if (flag == "--mountpoint") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->mountpoint, value());
    } else if (flag == "--portal") {
      BLOCKCSI_ASSIGN_OR_RETURN(std::string p, value());
      a->portals.push_back(p);
    } else if (flag == "--target") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->target_iqn, value());
    } else if (flag == "--lun") {
      BLOCKCSI_RETURN_IF_ERROR(as_int(&a->lun));
    } else if (flag == "--initiator") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->initiator_iqn, value());
    } else if (flag == "--expected-serial") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->expected_serial, value());
    } else if (flag == "--expected-wwn") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->expected_wwn, value());
    } else if (flag == "--read-only") {
      a->read_only = true;
    } else if (flag == "--secrets-on-stdin") {
      a->secrets_on_stdin = true;
    } else if (flag == "--io-timeout-seconds") {
      BLOCKCSI_RETURN_IF_ERROR(as_int(&a->io_timeout_s));
    } else if (flag == "--sessions") {
      BLOCKCSI_RETURN_IF_ERROR(as_int(&a->sessions));
      if (a->sessions < 1 || a->sessions > 16) return InvalidArgument("bridge: --sessions wants 1..16");
    } else if (flag == "--reconnect-retries") {
      BLOCKCSI_RETURN_IF_ERROR(as_int(&a->reconnect_retries));
    } else if (flag == "--log-format") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->log_format, value());
    } else {
      return InvalidArgument("bridge: unknown flag " + flag);
    }
  }
  if (a->transport == "rbd") {
    if (a->volume_id.empty() || a->control_socket.empty() || a->mountpoint.empty() || a->rbd_pool.empty() ||
        a->rbd_image.empty() || a->expected_serial.empty()) {
      return InvalidArgument(
          "bridge: --volume-id, --control-socket, --mountpoint, --rbd-pool, --rbd-image and --expected-serial (the "
          "image id) are required for --transport rbd");
    }
    return OkStatus();
  }
  if (a->transport != "iscsi") return InvalidArgument("bridge: --transport wants iscsi or rbd");
  if (a->volume_id.empty() || a->control_socket.empty() || a->mountpoint.empty() || a->portals.empty() ||
      a->target_iqn.empty() || a->initiator_iqn.empty()) {
    return InvalidArgument(
        "bridge: --volume-id, --control-socket, --mountpoint, --portal, --target and --initiator are required");
  }
  return OkStatus();
}

StatusOr<BridgeSecrets> ReadSecretsFromStdin() {
  std::string text;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "read secrets from stdin");
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  BridgeSecrets secrets;
  if (text.empty()) return secrets;
  try {
    auto j = nlohmann::json::parse(text);
    secrets.chap.username = j.value("username", "");
    secrets.chap.password = j.value("password", "");
    secrets.chap.mutual_username = j.value("mutual_username", "");
    secrets.chap.mutual_password = j.value("mutual_password", "");
    secrets.ceph_key = j.value("ceph_key", "");
  } catch (const nlohmann::json::exception&) {
    // Not the parser's message: it may quote the secret.
    return InvalidArgument("bridge: the secrets on stdin are not valid JSON");
  }
  return secrets;
}

class Bridge {
 public:
  explicit Bridge(BridgeArgs args) : args_(std::move(args)), executor_(MakeProcessExecutor()) {}

  Status Start(const BridgeSecrets& secrets);
  // Serves the control socket until a shutdown succeeds.
  void Serve();
  // Detaches the loop device, unmounts FUSE and logs out; FAILED_PRECONDITION
  // (and nothing torn down) while the loop device is still mounted.
  Status Teardown(bool check_in_use);
  nlohmann::json StatusReply(bool refresh_identity);

  // FUSE handlers.
  int Read(char* buf, size_t size, off_t off);
  int Write(const char* buf, size_t size, off_t off);
  int Fsync();
  int ReadUncounted(char* buf, size_t size, off_t off);
  int WriteUncounted(const char* buf, size_t size, off_t off);
  uint64_t size() const { return size_.load(); }
  bool read_only() const { return args_.read_only; }

  const std::string& device() const { return device_; }
  const LunIdentity& identity() const { return identity_; }

 private:
  StatusOr<std::unique_ptr<BridgeTransport>> OpenIscsi(const ChapCredentials& chap);
  StatusOr<std::unique_ptr<BridgeTransport>> OpenRbd(const std::string& key);
  Status MountFuse();
  Status SetUpLoop();
  Status ListenControl();
  nlohmann::json Handle(const nlohmann::json& request, bool* stop);
  void NoteIoError(const Status& st);

  BridgeArgs args_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<BridgeTransport> transport_;  // set by Start, reset by Teardown
  LunIdentity identity_;
  std::atomic<uint64_t> size_{0};
  struct fuse* fuse_ = nullptr;
  std::thread fuse_thread_;
  bool fuse_mounted_ = false;
  std::string device_;
  int listen_fd_ = -1;
  std::mutex rmw_mu_;  // serialises unaligned read-modify-write
  std::atomic<uint64_t> io_errors_{0};
  // I/O figures for `status` (the plugin's metrics, blockctl io): counted
  // here, where every FUSE read and write passes, with lock-free atomics.
  struct IoCounters {
    std::atomic<uint64_t> ops{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> errors{0};
    std::atomic<uint64_t> micros{0};                                        // summed latency
    std::array<std::atomic<uint64_t>, kIoLatencyBuckets.size()> buckets{};  // per bucket, not cumulative
    void Record(size_t size, std::chrono::steady_clock::duration took, bool ok);
    nlohmann::json ToJson() const;
  };
  IoCounters reads_, writes_, flushes_;
  // Failed writes and flushes since this bridge started: unlike a failed
  // read, each may have lost data the filesystem counted on, so the volume
  // stays abnormal until it is restaged (a new bridge).
  std::atomic<uint64_t> write_errors_{0};
  std::mutex err_mu_;
  std::string last_error_;                               // guarded by err_mu_
  std::chrono::steady_clock::time_point last_error_at_;  // guarded by err_mu_
};

void Bridge::IoCounters::Record(size_t size, std::chrono::steady_clock::duration took, bool ok) {
  ++ops;
  if (ok) {
    bytes += size;
  } else {
    ++errors;
  }
  double seconds = std::chrono::duration<double>(took).count();
  micros += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(took).count());
  for (size_t i = 0; i < kIoLatencyBuckets.size(); ++i) {
    if (seconds <= kIoLatencyBuckets[i]) {
      ++buckets[i];
      break;
    }
  }
}

nlohmann::json Bridge::IoCounters::ToJson() const {
  nlohmann::json j;
  j["ops"] = ops.load();
  j["bytes"] = bytes.load();
  j["errors"] = errors.load();
  j["latency_seconds_sum"] = static_cast<double>(micros.load()) / 1e6;
  nlohmann::json counts = nlohmann::json::array();
  for (const auto& b : buckets) counts.push_back(b.load());
  j["latency_bucket_counts"] = counts;
  return j;
}

Bridge* Self() { return static_cast<Bridge*>(fuse_get_context()->private_data); }

void* FuseInit(fuse_conn_info* conn, fuse_config* cfg) {
  // Large requests keep the per-command overhead of iSCSI small.
  conn->max_write = kMaxTransferBytes;
  conn->max_read = kMaxTransferBytes;
  cfg->direct_io = 1;
  cfg->kernel_cache = 0;
  cfg->attr_timeout = 0;
  cfg->entry_timeout = 0;
  return fuse_get_context()->private_data;
}

int FuseGetattr(const char* path, struct stat* st, fuse_file_info*) {
  std::memset(st, 0, sizeof *st);
  if (std::strcmp(path, "/") == 0) {
    st->st_mode = S_IFDIR | 0700;
    st->st_nlink = 2;
    return 0;
  }
  if (std::strcmp(path, "/lun") == 0) {
    st->st_mode = S_IFREG | (Self()->read_only() ? 0400 : 0600);
    st->st_nlink = 1;
    st->st_size = static_cast<off_t>(Self()->size());
    st->st_blksize = 4096;
    return 0;
  }
  return -ENOENT;
}

int FuseReaddir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*, fuse_readdir_flags) {
  if (std::strcmp(path, "/") != 0) return -ENOENT;
  fill(buf, ".", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  fill(buf, "..", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  fill(buf, "lun", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  return 0;
}

int FuseOpen(const char* path, fuse_file_info* fi) {
  if (std::strcmp(path, "/lun") != 0) return -ENOENT;
  if (Self()->read_only() && (fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  // No page cache in the bridge: the loop device and the filesystem above
  // cache already, and write-back through FUSE's cache is much slower.
  fi->direct_io = 1;
  return 0;
}

int FuseRead(const char* path, char* buf, size_t size, off_t off, fuse_file_info*) {
  if (std::strcmp(path, "/lun") != 0) return -ENOENT;
  return Self()->Read(buf, size, off);
}

int FuseWrite(const char* path, const char* buf, size_t size, off_t off, fuse_file_info*) {
  if (std::strcmp(path, "/lun") != 0) return -ENOENT;
  if (Self()->read_only()) return -EROFS;
  return Self()->Write(buf, size, off);
}

int FuseFsync(const char*, int, fuse_file_info*) { return Self()->Fsync(); }
int FuseFlush(const char*, fuse_file_info*) { return 0; }

void Bridge::NoteIoError(const Status& st) {
  io_errors_++;
  std::lock_guard<std::mutex> lock(err_mu_);
  if (last_error_ != st.message()) {
    LogError(args_.transport == "rbd" ? "I/O error on the rbd image" : "I/O error on the iSCSI session",
             {{"volume_id", args_.volume_id}, {"error", st.message()}});
  }
  last_error_ = st.message();
  last_error_at_ = std::chrono::steady_clock::now();
}

int Bridge::Read(char* buf, size_t size, off_t off) {
  auto start_time = std::chrono::steady_clock::now();
  int r = ReadUncounted(buf, size, off);
  reads_.Record(r > 0 ? static_cast<size_t>(r) : 0, std::chrono::steady_clock::now() - start_time, r >= 0);
  return r;
}

int Bridge::Write(const char* buf, size_t size, off_t off) {
  auto start_time = std::chrono::steady_clock::now();
  int r = WriteUncounted(buf, size, off);
  writes_.Record(r > 0 ? static_cast<size_t>(r) : 0, std::chrono::steady_clock::now() - start_time, r >= 0);
  return r;
}

int Bridge::ReadUncounted(char* buf, size_t size, off_t off) {
  uint64_t total = size_.load();
  if (off < 0) return -EINVAL;
  if (static_cast<uint64_t>(off) >= total) return 0;
  size = static_cast<size_t>(std::min<uint64_t>(size, total - static_cast<uint64_t>(off)));
  uint32_t bs = transport_->block_size();
  uint64_t start = static_cast<uint64_t>(off);
  Status st;
  if (start % bs == 0 && size % bs == 0) {
    st = transport_->Read(start, size, buf);
  } else {
    // The loop device sends whole sectors; other readers (cat, dd) may not.
    uint64_t a = start / bs * bs;
    uint64_t b = (start + size + bs - 1) / bs * bs;
    std::vector<char> tmp(b - a);
    st = transport_->Read(a, tmp.size(), tmp.data());
    if (st.ok()) std::memcpy(buf, tmp.data() + (start - a), size);
  }
  if (!st.ok()) {
    NoteIoError(st);
    return -EIO;
  }
  return static_cast<int>(size);
}

int Bridge::WriteUncounted(const char* buf, size_t size, off_t off) {
  uint64_t total = size_.load();
  if (off < 0) return -EINVAL;
  if (static_cast<uint64_t>(off) >= total) return -ENOSPC;
  size = static_cast<size_t>(std::min<uint64_t>(size, total - static_cast<uint64_t>(off)));
  uint32_t bs = transport_->block_size();
  uint64_t start = static_cast<uint64_t>(off);
  Status st;
  if (start % bs == 0 && size % bs == 0) {
    st = transport_->Write(start, size, buf);
  } else {
    std::lock_guard<std::mutex> lock(rmw_mu_);
    uint64_t a = start / bs * bs;
    uint64_t b = (start + size + bs - 1) / bs * bs;
    std::vector<char> tmp(b - a);
    st = transport_->Read(a, tmp.size(), tmp.data());
    if (st.ok()) {
      std::memcpy(tmp.data() + (start - a), buf, size);
      st = transport_->Write(a, tmp.size(), tmp.data());
    }
  }
  if (!st.ok()) {
    write_errors_++;
    NoteIoError(st);
    return -EIO;
  }
  return static_cast<int>(size);
}

int Bridge::Fsync() {
  auto start_time = std::chrono::steady_clock::now();
  Status st = transport_->Flush();
  flushes_.Record(0, std::chrono::steady_clock::now() - start_time, st.ok());
  if (!st.ok()) {
    write_errors_++;
    NoteIoError(st);
    return -EIO;
  }
  return 0;
}

StatusOr<std::unique_ptr<BridgeTransport>> Bridge::OpenIscsi(const ChapCredentials& chap) {
  LibIscsiOptions o;
  o.portals = args_.portals;
  o.target_iqn = args_.target_iqn;
  o.lun = args_.lun;
  o.initiator_iqn = args_.initiator_iqn;
  o.chap = chap;
  o.command_timeout = std::chrono::seconds(args_.io_timeout_s);
  o.reconnect_retries = args_.reconnect_retries;
  BLOCKCSI_ASSIGN_OR_RETURN(std::unique_ptr<IscsiBridgeTransport> t, IscsiBridgeTransport::Connect(o));
  LogInfo("bridge logged in", {{"volume_id", args_.volume_id},
                               {"portal", t->location()},
                               {"target", args_.target_iqn},
                               {"size_bytes", std::to_string(t->size_bytes())}});
  BLOCKCSI_ASSIGN_OR_RETURN(identity_, t->ReadIdentity());
  // Checked here too, before the LUN is exposed at all: a wrong LUN never
  // becomes a block device on this node (and costs one login, not many).
  Status id = VerifyLunIdentity(args_.volume_id, args_.expected_serial, args_.expected_wwn, identity_);
  if (!id.ok()) {
    LogError("WRONG LUN: refusing to expose it", {{"volume_id", args_.volume_id}, {"error", id.message()}});
    return id;
  }
  t->AddSessions(args_.sessions - 1, args_.volume_id);
  return std::unique_ptr<BridgeTransport>(std::move(t));
}

StatusOr<std::unique_ptr<BridgeTransport>> Bridge::OpenRbd(const std::string& key) {
  RbdTransportOptions o;
  o.volume_id = args_.volume_id;
  o.pool = args_.rbd_pool;
  o.image = args_.rbd_image;
  o.image_id = args_.expected_serial;
  o.monitors = args_.ceph_monitors;
  o.ceph_conf = args_.ceph_conf;
  o.user = args_.ceph_user;
  o.key = key;
  o.node_id = args_.node_id;
  o.read_only = args_.read_only;
  o.io_timeout = std::chrono::seconds(args_.io_timeout_s);
  // The transport verifies the image id itself, before it locks the image
  // or registers this client: a wrong image is never touched.
  auto t = RbdBridgeTransport::Open(o);
  if (!t.ok()) {
    if (t.status().code() == StatusCode::kFailedPrecondition) {
      LogError("refusing to expose the rbd image", {{"volume_id", args_.volume_id}, {"error", t.status().message()}});
    }
    return t.status();
  }
  LogInfo("bridge opened rbd image", {{"volume_id", args_.volume_id},
                                      {"image", (*t)->location()},
                                      {"client", (*t)->client_addresses()},
                                      {"read_only", args_.read_only ? "true" : "false"},
                                      {"size_bytes", std::to_string((*t)->size_bytes())}});
  BLOCKCSI_ASSIGN_OR_RETURN(identity_, (*t)->ReadIdentity());
  BLOCKCSI_RETURN_IF_ERROR(VerifyLunIdentity(args_.volume_id, args_.expected_serial, "", identity_));
  return std::unique_ptr<BridgeTransport>(std::move(*t));
}

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

Status Bridge::MountFuse() {
  BLOCKCSI_RETURN_IF_ERROR(MakeDirectories(args_.mountpoint, 0700));
  std::string fsname = "fsname=blockcsi-bridge";
  std::vector<std::string> storage = {
      "blockcsi-bridge", "-o", fsname, "-o", "subtype=blockcsi", "-o", "max_read=" + std::to_string(kMaxTransferBytes)};
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  static fuse_operations ops = [] {
    fuse_operations o{};
    o.init = FuseInit;
    o.getattr = FuseGetattr;
    o.readdir = FuseReaddir;
    o.open = FuseOpen;
    o.read = FuseRead;
    o.write = FuseWrite;
    o.fsync = FuseFsync;
    o.flush = FuseFlush;
    return o;
  }();
  fuse_ = fuse_new(&args, &ops, sizeof ops, this);
  fuse_opt_free_args(&args);
  if (fuse_ == nullptr) return Internal("bridge: fuse_new failed for volume " + args_.volume_id);
  if (fuse_mount(fuse_, args_.mountpoint.c_str()) != 0) {
    fuse_destroy(fuse_);
    fuse_ = nullptr;
    return Internal("bridge: cannot mount FUSE at " + args_.mountpoint + " (is /dev/fuse available?)");
  }
  fuse_mounted_ = true;
  fuse_thread_ = std::thread([this] { fuse_loop_mt(fuse_, 0); });
  return OkStatus();
}

Status Bridge::SetUpLoop() {
  std::string file = args_.mountpoint + "/lun";
  Command cmd("losetup");
  cmd.Arg("--find").Arg("--show").Arg("--direct-io=on");
  cmd.Arg("--sector-size").Arg(std::to_string(transport_->block_size()));
  if (args_.read_only) cmd.Arg("--read-only");
  cmd.Arg(file).Timeout(std::chrono::seconds(60));
  BLOCKCSI_ASSIGN_OR_RETURN(CommandResult r, RunChecked(*executor_, cmd, StatusCode::kInternal));
  device_ = r.stdout_text.substr(0, r.stdout_text.find('\n'));
  if (!device_.starts_with("/dev/loop")) return Internal("losetup printed no loop device for " + file);
  LogInfo("bridge loop device ready", {{"volume_id", args_.volume_id}, {"device", device_}});
  return OkStatus();
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
  io["reconnects"] = transport_ ? transport_->reconnects() : 0;
  io["latency_buckets"] = kIoLatencyBuckets;
  j["io"] = io;
  std::lock_guard<std::mutex> lock(err_mu_);
  j["last_error"] = last_error_;
  if (!last_error_.empty()) {
    j["last_error_age_ms"] =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - last_error_at_)
            .count();
  }
  return j;
}

Status Bridge::Teardown(bool check_in_use) {
  auto fs = MakeRootedFilesystem("");
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
    auto r = executor_->Run(Command("losetup").Arg("-d").Arg(device_).Timeout(std::chrono::seconds(60)));
    if (!r.ok() || !r->ok()) {
      // Already detached (by an admin, or a previous attempt) is fine.
      bool still = !FindLoopDevicesBackedBy(*fs, args_.mountpoint + "/lun").empty();
      if (still) {
        return Internal("cannot detach " + device_ + ": " +
                        (r.ok() ? FirstMeaningfulLine(r->stderr_text) : r.status().message()));
      }
    }
    LogInfo("bridge loop device detached", {{"volume_id", args_.volume_id}, {"device", device_}});
    device_.clear();
  }
  if (fuse_ != nullptr) {
    fuse_exit(fuse_);
    if (fuse_mounted_) {
      // Right after losetup -d the kernel may hold the file a moment longer.
      int err = 0;
      for (int i = 0; i < 50; ++i) {
        if (::umount2(args_.mountpoint.c_str(), 0) == 0) {
          err = 0;
          break;
        }
        err = errno;
        if (err == EINVAL || err == ENOENT) break;  // not mounted any more
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (err == EBUSY) ::umount2(args_.mountpoint.c_str(), MNT_DETACH);
      fuse_mounted_ = false;
    }
    if (fuse_thread_.joinable()) fuse_thread_.join();
    fuse_destroy(fuse_);
    fuse_ = nullptr;
    ::rmdir(args_.mountpoint.c_str());
  }
  if (transport_) {
    Status st = transport_->Flush();
    if (!st.ok()) LogWarn("final flush failed", {{"volume_id", args_.volume_id}, {"error", st.message()}});
    transport_->Close();
    transport_.reset();
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

int RunBridgeMain(int argc, char** argv) {
  // Terminal and plugin signals must not take a mounted volume down with
  // them: the bridge stops only through its control socket (or SIGKILL).
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);
  ::umask(077);
  BridgeArgs args;
  Status st = ParseArgs(argc, argv, &args);
  auto format = ParseLogFormat(args.log_format);
  InitLogging("blockcsi-bridge", format.ok() ? *format : LogFormat::kText, LogLevel::kInfo);
  if (!st.ok()) {
    std::cerr << st.message() << "\n";
    WriteReadyLine(ReplyFromStatus(st));
    return 2;
  }
  if (!args.cgroup.empty()) {
    // First, before any session, mount or loop device exists: a bridge that
    // cannot leave the plugin's cgroup would die with the plugin's container
    // and fail the filesystem above it, so it refuses to start instead.
    auto fs = MakeRootedFilesystem("");
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
