// FuseRing: the bridge's FUSE session served over io_uring. Entries are
// registered on the session's /dev/fuse per queue (the kernel keeps one
// queue per possible CPU and needs all of them before it routes requests to
// the ring); each request is laid out in its entry's own buffer and handed
// to `dispatch` (libfuse's handlers), and its answer goes back with
// COMMIT_AND_FETCH, which also waits for the entry's next request: no
// read() or write() on /dev/fuse per request.
// Thread-safety: ServeCompletions runs on one thread at a time; Reply may
// be called from any thread (the transport's completions), concurrently.
#pragma once

#include <liburing.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "bridge/fuse_ring_request.h"
#include "common/mutex.h"
#include "common/status.h"

namespace blockcsi::bridge_internal {

class FuseRing {
 public:
  // A contiguous FUSE request (fuse_in_header first); must not block.
  using Dispatch = std::function<void(char* request, size_t size)>;

  // Prepares `depth` entries on each of `queues` queues of the session on
  // `fuse_fd` (after its INIT reply accepted the ring), each with a payload
  // buffer of `payload_size` (the kernel refuses less than its max_write),
  // and makes fd() readable at once: the entries are registered by the
  // first ServeCompletions, on the thread that serves the ring. That thread
  // must be one that never does I/O on the mount: the kernel hands each
  // request to an entry in the context of the thread that submitted the
  // entry's command, and a submitter blocked on the mount would deadlock
  // with itself (unkillably).
  static StatusOr<std::unique_ptr<FuseRing>> Create(int fuse_fd, unsigned queues, unsigned depth, size_t payload_size,
                                                    Dispatch dispatch);
  // Waits for that registration's outcome. An error leaves nothing in use:
  // the caller serves /dev/fuse instead (the kernel does so as long as the
  // ring is incomplete).
  Status AwaitRegistration(std::chrono::milliseconds timeout);
  ~FuseRing();
  FuseRing(const FuseRing&) = delete;
  FuseRing& operator=(const FuseRing&) = delete;

  // Pollable: readable while completions wait.
  int fd() const { return ring_.ring_fd; }
  // Takes every waiting completion and dispatches its request; false once
  // the kernel ended the ring (unmount, abort).
  bool ServeCompletions();
  // Waits up to `timeout_ms` for a completion, then serves what came.
  bool WaitAndServe(int timeout_ms);
  // An answer as libfuse writes it (iov[0] is the fuse_out_header): true
  // and sent when it answers a request of this ring, false when it is not
  // one (the caller writes it to /dev/fuse).
  bool Reply(const struct iovec* iov, int count);

  unsigned queues() const { return queues_; }
  unsigned depth() const { return depth_; }
  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  // Bytes mapped for the entries (headers and payloads); only what requests
  // touched is resident.
  size_t mapped_bytes() const { return slots_bytes_; }

 private:
  struct Entry {
    fuse_ring::ReqHeader* header = nullptr;
    char* payload = nullptr;
    uint16_t qid = 0;
    uint64_t commit_id = 0;
    std::atomic<uint64_t> unique{0};  // the request it holds; 0 while the kernel has it
    struct iovec iov[2]{};
  };
  FuseRing(int fuse_fd, unsigned queues, unsigned depth, size_t payload_size, Dispatch dispatch);
  Status Register();
  bool RegisterHere();
  void Serve(Entry* entry, int res);
  void Submit(Entry* entry, uint32_t cmd);
  void Answer(Entry* entry, int error, size_t payload_size);
  Entry* Holding(uint64_t unique);

  int fuse_fd_;
  unsigned queues_;
  unsigned depth_;
  size_t payload_size_;
  Dispatch dispatch_;
  struct io_uring ring_ {};
  bool ring_ready_ = false;
  void* slots_ = nullptr;  // per entry: kPrefixRoom-aligned prefix, then the payload
  size_t slots_bytes_ = 0;
  size_t slot_size_ = 0;
  std::vector<fuse_ring::ReqHeader> headers_;
  std::unique_ptr<Entry[]> entries_;
  Mutex sq_mu_;  // the submission queue: replies come from any thread
  std::atomic<uint64_t> requests_{0};
  bool ended_ = false;       // the serving thread's
  bool registered_ = false;  // the serving thread's
  Mutex reg_mu_;
  CondVar reg_cv_;
  bool reg_done_ GUARDED_BY(reg_mu_) = false;
  Status reg_status_ GUARDED_BY(reg_mu_);
};

}  // namespace blockcsi::bridge_internal
