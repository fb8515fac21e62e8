// The bridge's FUSE side, on libfuse's low-level API: one directory with
// one file ("lun"), addressed by inode number, so the I/O path never looks
// up a path; reads and writes are handed to the transport and replied to
// from their completions, so the loop device's requests (direct I/O, async
// in the kernel) are in flight together.
#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <fcntl.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "bridge/bridge_internal.h"

namespace blockcsi::bridge_internal {
namespace {

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;
constexpr fuse_ino_t kLunIno = 2;
constexpr char kLunName[] = "lun";
// Async direct I/O requests the kernel keeps in flight to the bridge
// (libfuse's default of 12 would cap the loop device's queue depth); the
// iSCSI session bounds what reaches the target.
constexpr unsigned kMaxBackground = 64;
// FUSE workers, for a transport without an I/O thread to serve /dev/fuse
// (RBD: librbd runs its own). One worker takes a request off /dev/fuse,
// hands it to the transport and goes back for the next, so it keeps many in
// flight; a second bought nothing measurable (attach_bench and
// datapath_qd_bench, one build against the other) and each
// keeps a receive buffer of up to max_write + 4 KiB for its life.
constexpr unsigned kFuseWorkers = 1;
// Requests read per wake-up of the iSCSI session's thread before it looks
// at its socket again: enough for the loop device's whole queue, few
// enough that replies are not held back behind a long batch.
constexpr int kFuseBatch = 32;
// Large request buffers kept while I/O flows: the loop device splits a
// 1 MiB request into two of 512 KiB (its 128 segments), so two cover
// sequential I/O at queue depth 1, four leave room for a deeper queue.
// Each costs what its largest request touched, only while busy.
constexpr size_t kKeptBuffers = 4;

Bridge* Self(fuse_req_t req) { return static_cast<Bridge*>(fuse_req_userdata(req)); }

struct stat Attributes(Bridge* b, fuse_ino_t ino) {
  struct stat st {};
  st.st_ino = ino;
  if (ino == kRootIno) {
    st.st_mode = S_IFDIR | 0700;
    st.st_nlink = 2;
  } else {
    st.st_mode = S_IFREG | (b->read_only() ? 0400 : 0600);
    st.st_nlink = 1;
    st.st_size = static_cast<off_t>(b->size());
    st.st_blksize = 4096;
  }
  return st;
}

void FuseInit(void*, fuse_conn_info* conn) {
  // Large requests keep the per-command overhead of iSCSI small.
  conn->max_write = kMaxTransferBytes;
  conn->max_read = kMaxTransferBytes;
  conn->max_background = kMaxBackground;
  conn->congestion_threshold = kMaxBackground * 3 / 4;
  // The loop device's direct I/O is async; without this the kernel turns
  // each into a synchronous FUSE request and the loop's queue depth is 1.
  if ((conn->capable & FUSE_CAP_ASYNC_DIO) != 0) conn->want |= FUSE_CAP_ASYNC_DIO;
}

void FuseLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (parent != kRootIno || std::strcmp(name, kLunName) != 0) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_entry_param e{};
  e.ino = kLunIno;
  e.generation = 1;
  e.attr = Attributes(Self(req), kLunIno);
  e.entry_timeout = 3600;  // the name never changes
  e.attr_timeout = 0;      // the size does (rescan)
  fuse_reply_entry(req, &e);
}

void FuseGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  if (ino != kRootIno && ino != kLunIno) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct stat st = Attributes(Self(req), ino);
  fuse_reply_attr(req, &st, 0);
}

void FuseReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  if (ino != kRootIno) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  char buf[256];
  size_t used = 0;
  const char* names[] = {".", "..", kLunName};
  const fuse_ino_t inos[] = {kRootIno, kRootIno, kLunIno};
  for (off_t i = off; i < 3; ++i) {
    struct stat st {};
    st.st_ino = inos[i];
    st.st_mode = i == 2 ? S_IFREG : S_IFDIR;
    size_t need = fuse_add_direntry(req, buf + used, sizeof buf - used, names[i], &st, i + 1);
    if (used + need > std::min(size, sizeof buf)) break;
    used += need;
  }
  fuse_reply_buf(req, buf, used);
}

void FuseOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (ino != kLunIno) {
    fuse_reply_err(req, ino == kRootIno ? EISDIR : ENOENT);
    return;
  }
  if (Self(req)->read_only() && (fi->flags & O_ACCMODE) != O_RDONLY) {
    fuse_reply_err(req, EROFS);
    return;
  }
  // No page cache in the bridge: the loop device and the filesystem above
  // cache already, and write-back through FUSE's cache is much slower.
  fi->direct_io = 1;
  fi->keep_cache = 0;
  fuse_reply_open(req, fi);
}

void FuseRead(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info*) {
  Self(req)->ServeRead(req, size, off);
}

void FuseWrite(fuse_req_t req, fuse_ino_t, const char* buf, size_t size, off_t off, fuse_file_info*) {
  if (Self(req)->read_only()) {
    fuse_reply_err(req, EROFS);
    return;
  }
  Self(req)->ServeWrite(req, buf, size, off);
}

void FuseFsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) { Self(req)->ServeFsync(req); }
// close(): the same guarantee as fsync, so that a writer that only closes
// (losetup -d, dd without conv=fsync) still has its data on the target.
void FuseFlush(fuse_req_t req, fuse_ino_t, fuse_file_info*) { Self(req)->ServeFsync(req); }

void FuseFallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t length, fuse_file_info*) {
  if (ino != kLunIno || Self(req)->read_only()) {
    fuse_reply_err(req, ino != kLunIno ? EISDIR : EROFS);
    return;
  }
  Self(req)->ServeFallocate(req, mode, off, length);
}

// The loop device takes its discard granularity from the backing file's
// f_bsize (and advertises discard at all only because FUSE files have
// fallocate): the storage's allocation unit, so that fstrim and
// blkdiscard send whole units.
void FuseStatfs(fuse_req_t req, fuse_ino_t) {
  struct statvfs st {};
  st.f_bsize = Self(req)->discard_granularity();
  st.f_frsize = st.f_bsize;
  st.f_namemax = 255;
  fuse_reply_statfs(req, &st);
}

const fuse_lowlevel_ops kOps = [] {
  fuse_lowlevel_ops o{};
  o.init = FuseInit;
  o.lookup = FuseLookup;
  o.getattr = FuseGetattr;
  o.readdir = FuseReaddir;
  o.open = FuseOpen;
  o.read = FuseRead;
  o.write = FuseWrite;
  o.fsync = FuseFsync;
  o.flush = FuseFlush;
  o.fallocate = FuseFallocate;
  o.statfs = FuseStatfs;
  return o;
}();

}  // namespace

Status Bridge::MountFuse() {
  BLOCKCSI_RETURN_IF_ERROR(MakeDirectories(args_.mountpoint, 0700));
  std::vector<std::string> storage = {"blockcsi-bridge",
                                      "-o",
                                      "fsname=blockcsi-bridge",
                                      "-o",
                                      "subtype=blockcsi",
                                      "-o",
                                      "max_read=" + std::to_string(kMaxTransferBytes)};
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  fuse_ = fuse_session_new(&args, &kOps, sizeof kOps, this);
  fuse_opt_free_args(&args);
  if (fuse_ == nullptr) return Internal("bridge: fuse_session_new failed for volume " + args_.volume_id);
  if (fuse_session_mount(fuse_, args_.mountpoint.c_str()) != 0) {
    fuse_session_destroy(fuse_);
    fuse_ = nullptr;
    return Internal("bridge: cannot mount FUSE at " + args_.mountpoint + " (is /dev/fuse available?)");
  }
  fuse_mounted_ = true;
  BLOCKCSI_RETURN_IF_ERROR(ServeInit());
  if (ring_accepted_) StartRing();
  if (ring_) {
    buffers_.set_keep(fuse_watched_ ? kKeptBuffers : 0);
    return OkStatus();
  }
  // iSCSI: the session's event-loop thread reads /dev/fuse too, so a
  // request is read, sent, and replied to from its completion on one
  // thread, with no wake-up of a second one in between (at
  // queue depth 1 each hand-over cost more than the target's own latency).
  int fd = fuse_session_fd(fuse_);
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0) {
    // Large buffers are kept for reuse while I/O flows and returned
    // when the volume is idle (BufferPool).
    if (transport_->Watch(
            fd, [this] { return ServeFuseRequests(); }, [this] { buffers_.Trim(); })) {
      fuse_watched_ = true;
      buffers_.set_keep(kKeptBuffers);
      return OkStatus();
    }
    ::fcntl(fd, F_SETFL, flags);
  }
  fuse_thread_ = std::thread([this] {
    fuse_loop_config* config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(config, kFuseWorkers);
    fuse_loop_cfg_set_idle_threads(config, kFuseWorkers);
    fuse_session_loop_mt(fuse_, config);
    fuse_loop_cfg_destroy(config);
  });
  return OkStatus();
}

bool Bridge::ServeFuseRequests() {
  for (int i = 0; i < kFuseBatch; ++i) {
    int n = fuse_session_receive_buf(fuse_, &fuse_in_);
    if (n == -EAGAIN) return true;
    if (n == -EINTR) continue;
    // 0: unmounted (ENODEV) or fuse_session_exit; < 0: what libfuse's own
    // loop also treats as the end.
    if (n <= 0 || fuse_session_exited(fuse_) != 0) return false;
    fuse_session_process_buf(fuse_, &fuse_in_);
  }
  return true;
}

// Unmounts and stops reading /dev/fuse; the session itself goes after the
// transport closed (its completions still reply to FUSE until then).
void Bridge::StopFuse() {
  if (fuse_ == nullptr) return;
  fuse_session_exit(fuse_);
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
  StopRing();
  if (fuse_watched_) {
    transport_->Unwatch();
    fuse_watched_ = false;
  }
  std::free(fuse_in_.mem);  // the receive buffer libfuse allocated for ServeFuseRequests
  fuse_in_.mem = nullptr;
  ::rmdir(args_.mountpoint.c_str());
}

}  // namespace blockcsi::bridge_internal
