#include "bridge/fuse_ring.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "common/logging.h"

namespace blockcsi::bridge_internal {

using fuse_ring::CmdReq;
using fuse_ring::RingParse;

FuseRing::FuseRing(int fuse_fd, unsigned queues, unsigned depth, size_t payload_size, Dispatch dispatch)
    : fuse_fd_(fuse_fd),
      queues_(queues),
      depth_(depth),
      payload_size_(payload_size),
      dispatch_(std::move(dispatch)),
      headers_(size_t{queues} * depth),
      entries_(new Entry[size_t{queues} * depth]) {}

StatusOr<std::unique_ptr<FuseRing>> FuseRing::Create(int fuse_fd, unsigned queues, unsigned depth, size_t payload_size,
                                                     Dispatch dispatch) {
  std::unique_ptr<FuseRing> r(new FuseRing(fuse_fd, queues, depth, payload_size, std::move(dispatch)));
  const unsigned n = queues * depth;
  io_uring_params p{};
  // The kernel reads the command (CmdReq) from the big SQE's extra bytes.
  p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE;
  p.cq_entries = 2 * n;  // one completion per entry at most, with room
  int rc = io_uring_queue_init_params(n, &r->ring_, &p);
  if (rc < 0) return ErrnoToStatus(-rc, "io_uring_setup for FUSE");
  r->ring_ready_ = true;
  r->slot_size_ = (fuse_ring::kPrefixRoom + payload_size + 4095) / 4096 * 4096 + 4096;
  r->slots_bytes_ = r->slot_size_ * n;
  // Reserved, not committed: a 4 KiB request makes one page resident.
  void* slots =
      ::mmap(nullptr, r->slots_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (slots == MAP_FAILED) return ErrnoToStatus(errno, "mmap FUSE ring buffers");
  r->slots_ = slots;
  // A no-op completes inline, with no task work: the ring's fd is readable
  // and the serving thread's first ServeCompletions registers the entries.
  io_uring_sqe* sqe = io_uring_get_sqe(&r->ring_);
  io_uring_prep_nop(sqe);
  io_uring_sqe_set_data(sqe, nullptr);
  rc = io_uring_submit(&r->ring_);
  if (rc < 0) return ErrnoToStatus(-rc, "io_uring_submit for FUSE");
  return r;
}

Status FuseRing::AwaitRegistration(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(reg_mu_);
  while (!reg_done_) {
    if (!reg_cv_.WaitUntil(reg_mu_, deadline) && !reg_done_) {
      return DeadlineExceeded("FUSE io_uring entries not registered in time");
    }
  }
  return reg_status_;
}

bool FuseRing::RegisterHere() {
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) io_uring_cqe_seen(&ring_, cqe);  // the no-op
  Status st = Register();
  registered_ = true;
  ended_ = !st.ok();
  MutexLock lock(reg_mu_);
  reg_status_ = st;
  reg_done_ = true;
  reg_cv_.SignalAll();
  return st.ok();
}

Status FuseRing::Register() {
  const unsigned n = queues_ * depth_;
  for (unsigned i = 0; i < n; ++i) {
    Entry& e = entries_[i];
    e.header = &headers_[i];
    // The payload starts a page into its slot; the request's header and
    // argument are laid out just before it (LayOutRequest).
    e.payload = static_cast<char*>(slots_) + i * slot_size_ + 4096;
    e.qid = static_cast<uint16_t>(i / depth_);
    e.iov[0] = {e.header, sizeof(fuse_ring::ReqHeader)};
    e.iov[1] = {e.payload, payload_size_};
    Submit(&e, fuse_ring::kCmdRegister);
  }
  // A refused registration completes at once (an accepted one when a
  // request comes): an error completion now means the ring is not used.
  io_uring_cqe* cqe = nullptr;
  if (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr && cqe->res < 0) {
    return ErrnoToStatus(-cqe->res, "registering FUSE io_uring entries");
  }
  return OkStatus();
}

FuseRing::~FuseRing() {
  // Closing the ring cancels the entries the kernel still holds.
  if (ring_ready_) io_uring_queue_exit(&ring_);
  if (slots_ != nullptr) ::munmap(slots_, slots_bytes_);
}

void FuseRing::Submit(Entry* entry, uint32_t cmd) {
  MutexLock lock(sq_mu_);
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  // Never empty: each entry has at most one command in the kernel and the
  // queue has one slot per entry.
  if (sqe == nullptr) {
    LogError("FUSE io_uring submission queue full", {});
    return;
  }
  std::memset(sqe, 0, 128);
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fuse_fd_;
  sqe->cmd_op = cmd;
  if (cmd == fuse_ring::kCmdRegister) {
    sqe->addr = reinterpret_cast<uint64_t>(entry->iov);
    sqe->len = 2;
  }
  CmdReq req{};
  req.commit_id = cmd == fuse_ring::kCmdRegister ? 0 : entry->commit_id;
  req.qid = entry->qid;
  std::memcpy(sqe->cmd, &req, sizeof req);
  io_uring_sqe_set_data(sqe, entry);
  io_uring_submit(&ring_);
}

bool FuseRing::ServeCompletions() {
  if (!registered_) return RegisterHere();
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
    auto* entry = static_cast<Entry*>(io_uring_cqe_get_data(cqe));
    int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    if (entry != nullptr) Serve(entry, res);
  }
  return !ended_;
}

bool FuseRing::WaitAndServe(int timeout_ms) {
  __kernel_timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000LL};
  io_uring_cqe* cqe = nullptr;
  (void)io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
  return ServeCompletions();
}

void FuseRing::Serve(Entry* entry, int res) {
  if (res == -EINTR || res == -EAGAIN) {
    Submit(entry, fuse_ring::kCmdCommitAndFetch);
    return;
  }
  if (res < 0) {
    // ENOTCONN/ECONNABORTED: unmounted or aborted, the end of the session.
    if (res != -ENOTCONN && res != -ECONNABORTED) {
      LogWarn("FUSE io_uring entry failed", {{"error", std::strerror(-res)}});
    }
    ended_ = true;
    return;
  }
  entry->commit_id = entry->header->ent.commit_id;
  fuse_ring::RingRequest req;
  RingParse parsed = fuse_ring::ParseRingRequest(*entry->header, entry->payload, payload_size_, &req);
  entry->unique.store(req.in.unique, std::memory_order_release);
  if (parsed != RingParse::kOk) {
    Answer(entry, parsed == RingParse::kUnsupported ? -ENOSYS : -EIO, 0);
    return;
  }
  requests_.fetch_add(1, std::memory_order_relaxed);
  char* start = fuse_ring::LayOutRequest(*entry->header, req, entry->payload);
  dispatch_(start, sizeof(fuse_in_header) + req.arg_size + req.payload_size);
}

FuseRing::Entry* FuseRing::Holding(uint64_t unique) {
  if (unique == 0) return nullptr;
  for (unsigned i = 0; i < queues_ * depth_; ++i) {
    if (entries_[i].unique.load(std::memory_order_acquire) == unique) return &entries_[i];
  }
  return nullptr;
}

bool FuseRing::Reply(const struct iovec* iov, int count) {
  if (count < 1 || iov[0].iov_len < sizeof(fuse_out_header)) return false;
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof out);
  Entry* entry = Holding(out.unique);
  if (entry == nullptr) return false;
  size_t size = 0;
  for (int i = 1; i < count; ++i) {
    size_t len = iov[i].iov_len;
    if (size + len > payload_size_) return Answer(entry, -EIO, 0), true;
    // A handler that produced its answer in place is not copied.
    if (iov[i].iov_base != entry->payload + size) std::memcpy(entry->payload + size, iov[i].iov_base, len);
    size += len;
  }
  Answer(entry, out.error, size);
  return true;
}

void FuseRing::Answer(Entry* entry, int error, size_t payload_size) {
  fuse_out_header out{};
  out.unique = entry->unique.load(std::memory_order_relaxed);
  out.error = error;
  out.len = static_cast<uint32_t>(sizeof out + payload_size);
  std::memcpy(entry->header->in_out, &out, sizeof out);
  entry->header->ent.payload_sz = static_cast<uint32_t>(payload_size);
  entry->unique.store(0, std::memory_order_release);
  Submit(entry, fuse_ring::kCmdCommitAndFetch);
}

}  // namespace blockcsi::bridge_internal
