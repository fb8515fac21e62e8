#include "bridge/rbd_bridge_transport.h"

#include <rados/librados.h>
#include <rbd/librbd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "common/ceph_lazy.h"
#include "common/logging.h"

namespace blockcsi {
namespace {

// librados says "blocklisted" with ESHUTDOWN (its EBLOCKLISTED).
constexpr int kBlocklisted = ESHUTDOWN;

std::string ErrnoText(int r) { return std::strerror(r < 0 ? -r : r); }

// rados_getaddrs prints "127.0.0.1:0/123" or, with several, "[v2:…/123,v1:…/123]";
// watcher and locker lists print the bare form, which is what the controller
// compares with: strip the brackets and type prefixes.
std::string BareAddresses(std::string text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
  std::string out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    for (const char* prefix : {"any:", "v1:", "v2:"}) {
      if (item.starts_with(prefix)) item = item.substr(std::strlen(prefix));
    }
    if (!item.empty() && out.find(item) == std::string::npos) out += (out.empty() ? "" : ",") + item;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

std::string RbdClientMetadataKey(const std::string& node_id) { return "blockcsi.client." + node_id; }

StatusOr<std::unique_ptr<RbdBridgeTransport>> RbdBridgeTransport::Open(const RbdTransportOptions& options) {
  // Loaded on first use (common/ceph_lazy.h): an iSCSI bridge never maps them.
  if (Status st = LoadCephLibraries(); !st.ok()) return st.WithContext("volume \"" + options.volume_id + "\"");
  std::unique_ptr<RbdBridgeTransport> t(new RbdBridgeTransport(options));
  Status st = t->Connect();
  t->options_.key.clear();  // librados holds it now; nothing else may
  if (st.ok()) st = t->OpenImage();
  if (st.ok() && !t->options_.read_only) st = t->LockAndRegister();
  if (!st.ok()) {
    t->Close();
    return st;
  }
  if (options.probe_interval.count() > 0) t->probe_thread_ = std::thread([p = t.get()] { p->ProbeLoop(); });
  return t;
}

void RbdBridgeTransport::ProbeLoop() {
  while (!fenced_) {
    {
      MutexLock lock(probe_mu_);
      const auto deadline = std::chrono::steady_clock::now() + options_.probe_interval;
      while (!probe_stop_ && probe_cv_.WaitUntil(probe_mu_, deadline)) {
      }
      if (probe_stop_) return;
    }
    uint64_t size = 0;
    time_t mtime = 0;
    int r = rados_stat(io_, header_object_.c_str(), &size, &mtime);
    if (r == -kBlocklisted && !fenced_.exchange(true)) {
      LogError("rbd client fenced", {{"volume_id", options_.volume_id}, {"image", location()}, {"client", addrs_}});
    }
  }
}

RbdBridgeTransport::~RbdBridgeTransport() { Close(); }

Status RbdBridgeTransport::Connect() {
  const std::string where = "volume \"" + options_.volume_id + "\": ";
  const std::string who = "client." + options_.user;
  rados_t cluster = nullptr;
  int r = rados_create2(&cluster, "ceph", who.c_str(), 0);
  if (r < 0) return Internal(where + "cannot create a rados handle for " + who + ": " + ErrnoText(r));
  cluster_ = cluster;
  if (options_.monitors.empty()) {
    r = rados_conf_read_file(cluster, options_.ceph_conf.c_str());
    if (r < 0) {
      return FailedPrecondition(where + "publish_context names no ceph monitors and the node's " + options_.ceph_conf +
                                " cannot be read: " + ErrnoText(r));
    }
  } else {
    r = rados_conf_set(cluster, "mon_host", options_.monitors.c_str());
    if (r < 0) return InvalidArgument(where + "ceph monitors \"" + options_.monitors + "\" refused: " + ErrnoText(r));
  }
  if (!options_.key.empty()) {
    // Not the value in the message: librados may have quoted it.
    r = rados_conf_set(cluster, "key", options_.key.c_str());
    if (r < 0) return InvalidArgument(where + "the cephx key of " + who + " was refused by librados");
  }
  // No call of ours may hang on a sick cluster longer than the I/O timeout:
  // the FUSE request behind it would hang the loop device and its users.
  const std::string timeout = std::to_string(std::max<int64_t>(1, options_.io_timeout.count()));
  for (const char* option : {"rados_osd_op_timeout", "rados_mon_op_timeout", "client_mount_timeout"}) {
    r = rados_conf_set(cluster, option, timeout.c_str());
    if (r < 0) return Internal(where + "cannot set " + option + ": " + ErrnoText(r));
  }
  r = rados_connect(cluster);
  if (r == -EACCES || r == -EPERM) {
    return PermissionDenied(where + "the ceph cluster refused cephx user " + who + " (" + ErrnoText(r) +
                            "): check the node-stage secret userKey/userID");
  }
  if (r < 0) {
    std::string mons =
        options_.monitors.empty() ? "the monitors of " + options_.ceph_conf : "monitors " + options_.monitors;
    return Unavailable(where + "cannot reach the ceph cluster at " + mons + " as " + who + ": " + ErrnoText(r));
  }
  rados_ioctx_t io = nullptr;
  r = rados_ioctx_create(cluster, options_.pool.c_str(), &io);
  if (r == -ENOENT) return NotFound(where + "rbd pool " + options_.pool + " does not exist");
  if (r < 0) return IoError(r, "open pool");
  io_ = io;
  char* addrs = nullptr;
  r = rados_getaddrs(cluster, &addrs);
  if (r == 0 && addrs != nullptr) addrs_ = BareAddresses(addrs);
  rados_buffer_free(addrs);
  return OkStatus();
}

Status RbdBridgeTransport::OpenImage() {
  const std::string where = "volume \"" + options_.volume_id + "\": ";
  rbd_image_t image = nullptr;
  int r = options_.read_only ? rbd_open_read_only(io_, options_.image.c_str(), &image, nullptr)
                             : rbd_open(io_, options_.image.c_str(), &image, nullptr);
  if (r == -ENOENT) return NotFound(where + "rbd image " + location() + " does not exist");
  if (r < 0) return IoError(r, "open rbd image");
  image_ = image;
  char id[128] = {};
  r = rbd_get_id(image, id, sizeof id);
  if (r < 0) return IoError(r, "read the id of rbd image");
  if (options_.image_id != id) {
    // A re-created image of the same name is another volume: never expose it.
    return FailedPrecondition(where + "rbd image " + location() + " has id " + id + " but publish_context expects " +
                              options_.image_id + " (another image of the same name); refusing to use it");
  }
  header_object_ = std::string("rbd_header.") + id;
  uint64_t size = 0;
  r = rbd_get_size(image, &size);
  if (r < 0) return IoError(r, "read the size of rbd image");
  size_ = size;
  return OkStatus();
}

Status RbdBridgeTransport::LockAndRegister() {
  const std::string where = "volume \"" + options_.volume_id + "\": ";
  // Taken explicitly, the lock is not handed over when another client asks
  // for it: a second writer (another node, a stale attachment) is refused
  // instead of the two taking turns.
  int r = rbd_lock_acquire(image_, RBD_LOCK_MODE_EXCLUSIVE);
  if (r == -EROFS || r == -EBUSY) {
    std::string holder;
    rbd_lock_mode_t mode;
    char* owners[8];
    size_t n = 8;
    if (rbd_lock_get_owners(image_, &mode, owners, &n) == 0) {
      for (size_t i = 0; i < n; ++i) holder += (holder.empty() ? "" : ", ") + std::string(owners[i]);
      rbd_lock_get_owners_cleanup(owners, n);
    }
    return FailedPrecondition(where + "rbd image " + location() + " is locked for writing by another client" +
                              (holder.empty() ? std::string() : " (" + holder + ")") +
                              "; it is still attached elsewhere");
  }
  if (r == -EINVAL || r == -EOPNOTSUPP) {
    return FailedPrecondition(where + "rbd image " + location() +
                              " has no exclusive-lock feature, so two writers could not be kept apart");
  }
  if (r < 0) return IoError(r, "take the exclusive lock of rbd image");
  if (options_.node_id.empty() || addrs_.empty()) {
    LogWarn("rbd attachment not registered for fencing (no node id or client address)",
            {{"volume_id", options_.volume_id}});
    return OkStatus();
  }
  r = rbd_metadata_set(image_, RbdClientMetadataKey(options_.node_id).c_str(), addrs_.c_str());
  if (r < 0) return IoError(r, "record this client in the metadata of rbd image");
  registered_ = true;
  LogInfo("rbd image locked", {{"volume_id", options_.volume_id}, {"image", location()}, {"client", addrs_}});
  return OkStatus();
}

Status RbdBridgeTransport::IoError(int r, const char* what) {
  const std::string where = "volume \"" + options_.volume_id + "\": " + what + " " + location() + ": ";
  if (r == -kBlocklisted) {
    fenced_ = true;
    return Unavailable(where + kRbdFencedMessage);
  }
  if (r == -ENOENT) return NotFound(where + "gone (" + ErrnoText(r) + ")");
  if (r == -EACCES || r == -EPERM) return PermissionDenied(where + ErrnoText(r));
  if (r == -EROFS) return FailedPrecondition(where + "read-only or not the lock owner (" + ErrnoText(r) + ")");
  if (r == -ETIMEDOUT || r == -ENOTCONN || r == -ECONNREFUSED || r == -EAGAIN || r == -EIO) {
    return Unavailable(where + ErrnoText(r));
  }
  return Internal(where + ErrnoText(r));
}

Status RbdBridgeTransport::Read(uint64_t offset, size_t length, char* out) {
  ssize_t n = rbd_read2(image_, offset, length, out, 0);
  if (n < 0) return IoError(static_cast<int>(n), "read");
  // Past the end librbd reads short; the bridge clamps to size, but a
  // shrink racing a read must not leak old buffer contents.
  if (static_cast<size_t>(n) < length) std::memset(out + n, 0, length - static_cast<size_t>(n));
  return OkStatus();
}

Status RbdBridgeTransport::Write(uint64_t offset, size_t length, const char* in) {
  ssize_t n = rbd_write2(image_, offset, length, in, 0);
  if (n < 0) return IoError(static_cast<int>(n), "write");
  if (static_cast<size_t>(n) != length) return Unavailable("volume \"" + options_.volume_id + "\": short write");
  return OkStatus();
}

Status RbdBridgeTransport::Flush() {
  int r = rbd_flush(image_);
  if (r < 0) return IoError(r, "flush");
  return OkStatus();
}

struct RbdBridgeTransport::Aio {
  RbdBridgeTransport* self;
  const char* what;  // "read" | "write" | "flush" | "discard"
  uint64_t offset;
  size_t length;
  char* out;
  const char* in;
  Done done;
};

void RbdBridgeTransport::StartAio(Aio* aio, int (*start)(Aio*, void* completion)) {
  rbd_completion_t c = nullptr;
  int r = rbd_aio_create_completion(aio, &RbdBridgeTransport::OnAioComplete, &c);
  if (r >= 0) {
    r = start(aio, c);
    if (r < 0) rbd_aio_release(c);
  }
  if (r < 0) {
    std::unique_ptr<Aio> owned(aio);
    owned->done(IoError(r, aio->what));
  }
}

void RbdBridgeTransport::OnAioComplete(void* completion, void* arg) {
  std::unique_ptr<Aio> aio(static_cast<Aio*>(arg));
  ssize_t n = rbd_aio_get_return_value(completion);
  rbd_aio_release(completion);
  Status st = OkStatus();
  if (n < 0) {
    st = aio->self->IoError(static_cast<int>(n), aio->what);
  } else if (aio->out != nullptr && static_cast<size_t>(n) < aio->length) {
    // As Read: a shrink racing a read must not leak old buffer contents.
    std::memset(aio->out + n, 0, aio->length - static_cast<size_t>(n));
  }
  aio->done(st);
}

void RbdBridgeTransport::ReadAsync(uint64_t offset, size_t length, char* out, Done done) {
  StartAio(new Aio{this, "read", offset, length, out, nullptr, std::move(done)},
           [](Aio* a, void* c) { return rbd_aio_read2(a->self->image_, a->offset, a->length, a->out, c, 0); });
}

void RbdBridgeTransport::WriteAsync(uint64_t offset, size_t length, const char* in, Done done) {
  StartAio(new Aio{this, "write", offset, length, nullptr, in, std::move(done)},
           [](Aio* a, void* c) { return rbd_aio_write2(a->self->image_, a->offset, a->length, a->in, c, 0); });
}

void RbdBridgeTransport::FlushAsync(Done done) {
  StartAio(new Aio{this, "flush", 0, 0, nullptr, nullptr, std::move(done)},
           [](Aio* a, void* c) { return rbd_aio_flush(a->self->image_, c); });
}

// rbd_aio_write_zeroes without flags is librbd's discard with no
// granularity: whole objects are removed, partial ones zeroed. Not
// rbd_aio_discard, which skips what is smaller than
// rbd_discard_granularity_bytes (64 KiB) and leaves the old data there: a
// punched hole (the loop device's write-zeroes too) must read back as zeros.
void RbdBridgeTransport::PunchHoleAsync(uint64_t offset, uint64_t length, Done done) {
  StartAio(new Aio{this, "discard", offset, static_cast<size_t>(length), nullptr, nullptr, std::move(done)},
           [](Aio* a, void* c) { return rbd_aio_write_zeroes(a->self->image_, a->offset, a->length, c, 0, 0); });
}

Status RbdBridgeTransport::RefreshSize() {
  // rbd_get_size refreshes the header first when a resize was announced.
  uint64_t size = 0;
  int r = rbd_get_size(image_, &size);
  if (r < 0) return IoError(r, "read the size of");
  size_ = size;
  return OkStatus();
}

StatusOr<LunIdentity> RbdBridgeTransport::ReadIdentity() {
  char id[128] = {};
  int r = rbd_get_id(image_, id, sizeof id);
  if (r < 0) return IoError(r, "read the id of");
  LunIdentity identity;
  identity.serial = id;
  return identity;
}

Status RbdBridgeTransport::Health() const {
  if (fenced_)
    return Unavailable("volume \"" + options_.volume_id + "\": rbd image " + location() + ": " + kRbdFencedMessage);
  return OkStatus();
}

void RbdBridgeTransport::Close() {
  MutexLock lock(close_mu_);
  {
    MutexLock probe_lock(probe_mu_);
    probe_stop_ = true;
  }
  probe_cv_.SignalAll();
  if (probe_thread_.joinable()) probe_thread_.join();
  if (image_ != nullptr) {
    if (registered_ && !fenced_) {
      // Detached cleanly: nothing to fence any more. A fenced client cannot
      // write; the controller's RevokeAccess removes the key then.
      int r = rbd_metadata_remove(image_, RbdClientMetadataKey(options_.node_id).c_str());
      if (r < 0 && r != -ENOENT) {
        LogWarn("cannot remove this client from the rbd image's metadata",
                {{"volume_id", options_.volume_id}, {"error", ErrnoText(r)}});
      }
    }
    registered_ = false;
    // Closing releases the exclusive lock.
    int r = rbd_close(image_);
    if (r < 0) LogWarn("closing the rbd image failed", {{"volume_id", options_.volume_id}, {"error", ErrnoText(r)}});
    image_ = nullptr;
  }
  if (io_ != nullptr) {
    rados_ioctx_destroy(io_);
    io_ = nullptr;
  }
  if (cluster_ != nullptr) {
    rados_shutdown(cluster_);
    cluster_ = nullptr;
  }
}

}  // namespace blockcsi
