#define FUSE_USE_VERSION 312

#include "bridge/bridge_main.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/falloc.h>
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
#include <cstdlib>
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
#include "bridge/write_zeroes.h"
#include "common/atomic_file.h"
#include "common/executor.h"
#include "common/host.h"
#include "common/logging.h"
#include "common/loop_devices.h"
#include "common/lun_identity.h"

// The bridge's reads, writes and flushes with their counters, and the
// transports (iSCSI, RBD) they go to.
namespace blockcsi::bridge_internal {

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

void Bridge::NoteIoError(const Status& st) {
  io_errors_++;
  MutexLock lock(err_mu_);
  if (last_error_ != st.message()) {
    LogError(args_.transport == "rbd" ? "I/O error on the rbd image" : "I/O error on the iSCSI session",
             {{"volume_id", args_.volume_id}, {"error", st.message()}});
  }
  last_error_ = st.message();
  last_error_at_ = std::chrono::steady_clock::now();
}

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

void Bridge::NoteWriteError(const Status& st) {
  write_errors_++;
  NoteIoError(st);
}

void Bridge::ServeRead(fuse_req_t req, size_t size, off_t off) {
  auto start_time = Clock::now();
  uint64_t total = size_.load();
  if (off < 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  if (static_cast<uint64_t>(off) >= total) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  size = static_cast<size_t>(std::min<uint64_t>(size, total - static_cast<uint64_t>(off)));
  // Whole blocks around the request: the same for the loop device's
  // aligned requests and for an unaligned reader (cat, dd).
  uint64_t bs = transport_->block_size();
  uint64_t first = static_cast<uint64_t>(off) / bs * bs;
  uint64_t end = (static_cast<uint64_t>(off) + size + bs - 1) / bs * bs;
  size_t skip = static_cast<size_t>(static_cast<uint64_t>(off) - first);
  size_t length = static_cast<size_t>(end - first);
  // The completion owns the buffer and returns it once the reply copied it.
  char* data = buffers_.Take(length);
  if (data == nullptr) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  transport_->ReadAsync(first, length, data, [this, req, size, skip, length, start_time, data](const Status& st) {
    reads_.Record(st.ok() ? size : 0, Clock::now() - start_time, st.ok());
    if (st.ok()) {
      fuse_reply_buf(req, data + skip, size);
    } else {
      NoteIoError(st);
      fuse_reply_err(req, EIO);
    }
    buffers_.Give(data, length);
  });
}

void Bridge::ServeWrite(fuse_req_t req, const char* in, size_t size, off_t off) {
  auto start_time = Clock::now();
  uint64_t total = size_.load();
  if (off < 0 || static_cast<uint64_t>(off) >= total) {
    fuse_reply_err(req, off < 0 ? EINVAL : ENOSPC);
    return;
  }
  size = static_cast<size_t>(std::min<uint64_t>(size, total - static_cast<uint64_t>(off)));
  uint32_t bs = transport_->block_size();
  uint64_t ticket = write_order_.Begin();
  if (static_cast<uint64_t>(off) % bs != 0 || size % bs != 0) {
    WriteUnaligned({req, std::string(in, size), static_cast<uint64_t>(off), ticket, start_time});
    return;
  }
  // A copy: the FUSE receive buffer is reused for the next request as
  // soon as this handler returns.
  char* data = buffers_.Take(size);
  if (data == nullptr) {
    write_order_.End(ticket);
    fuse_reply_err(req, ENOMEM);
    return;
  }
  std::memcpy(data, in, size);
  transport_->WriteAsync(static_cast<uint64_t>(off), size, data,
                         [this, req, size, start_time, ticket, data](const Status& st) {
                           buffers_.Give(data, size);
                           writes_.Record(st.ok() ? size : 0, Clock::now() - start_time, st.ok());
                           if (!st.ok()) NoteWriteError(st);
                           // Replied before the ticket returns: a flush waiting for this write
                           // replies after it.
                           st.ok() ? fuse_reply_write(req, size) : fuse_reply_err(req, EIO);
                           write_order_.End(ticket);
                         });
}

void Bridge::ServeFsync(fuse_req_t req) {
  auto start_time = Clock::now();
  write_order_.AfterPriorWrites([this, req, start_time] {
    transport_->FlushAsync([this, req, start_time](const Status& st) {
      flushes_.Record(0, Clock::now() - start_time, st.ok());
      if (!st.ok()) NoteWriteError(st);
      fuse_reply_err(req, st.ok() ? 0 : EIO);
    });
  });
}

void Bridge::ServeFallocate(fuse_req_t req, int mode, off_t off, off_t length) {
  auto start_time = Clock::now();
  const bool punch = mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE);
  const bool zero = (mode & ~FALLOC_FL_KEEP_SIZE) == FALLOC_FL_ZERO_RANGE;
  if (!punch && !zero) {
    fuse_reply_err(req, EOPNOTSUPP);  // the size is the volume's: nothing to allocate or collapse
    return;
  }
  if (punch && !transport_->can_punch_hole()) {
    fuse_reply_err(req, EOPNOTSUPP);
    return;
  }
  uint64_t total = size_.load();
  uint64_t bs = transport_->block_size();
  if (off < 0 || length <= 0 || static_cast<uint64_t>(off) % bs != 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  // Past the end there is nothing (KEEP_SIZE); a length that ends inside a
  // block is refused, as the loop device never sends one.
  uint64_t begin = std::min<uint64_t>(static_cast<uint64_t>(off), total);
  uint64_t end = std::min<uint64_t>(begin + static_cast<uint64_t>(length), total);
  if (end < total && end % bs != 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  if (begin == end) {
    fuse_reply_err(req, 0);
    return;
  }
  // A ticket as for a write: a flush (and close) waits for it.
  uint64_t ticket = write_order_.Begin();
  auto finish = [this, req, start_time, ticket, bytes = end - begin](const Status& st) {
    discards_.Record(st.ok() ? bytes : 0, Clock::now() - start_time, st.ok());
    // Counted as an I/O error, not a lost write: the caller (the loop
    // device, then fstrim, blkdiscard or the filesystem's zeroout) is told.
    if (!st.ok()) NoteIoError(st);
    fuse_reply_err(req, st.ok() ? 0 : EIO);
    write_order_.End(ticket);
  };
  if (punch) {
    transport_->PunchHoleAsync(begin, end - begin, std::move(finish));
  } else {
    WriteZeroesAsync(*transport_, begin, end - begin, std::move(finish));
  }
}

// Serialised with each other (two could share a block); the loop device
// never sends these, so they do not race its aligned writes in practice.
void Bridge::WriteUnaligned(RmwWrite job) {
  bool idle = false;
  {
    MutexLock lock(rmw_mu_);
    rmw_queue_.push_back(std::move(job));
    idle = rmw_queue_.size() == 1;
  }
  if (idle) StartRmw();
}

void Bridge::StartRmw() {
  const RmwWrite* job = nullptr;
  {
    MutexLock lock(rmw_mu_);
    job = &rmw_queue_.front();  // stays put until FinishRmw pops it
  }
  uint64_t bs = transport_->block_size();
  uint64_t first = job->offset / bs * bs;
  size_t length = static_cast<size_t>((job->offset + job->data.size() + bs - 1) / bs * bs - first);
  auto* blocks = static_cast<char*>(std::malloc(length));
  if (blocks == nullptr) {
    FinishRmw(ResourceExhausted("no memory for a read-modify-write"), nullptr);
    return;
  }
  transport_->ReadAsync(first, length, blocks, [this, job, first, length, blocks](const Status& st) {
    if (!st.ok()) {
      FinishRmw(st, blocks);
      return;
    }
    std::copy(job->data.begin(), job->data.end(), blocks + (job->offset - first));
    transport_->WriteAsync(first, length, blocks,
                           [this, blocks](const Status& written) { FinishRmw(written, blocks); });
  });
}

void Bridge::FinishRmw(const Status& st, char* blocks) {
  std::free(blocks);
  RmwWrite job;
  bool more = false;
  {
    MutexLock lock(rmw_mu_);
    job = std::move(rmw_queue_.front());
    rmw_queue_.pop_front();
    more = !rmw_queue_.empty();
  }
  writes_.Record(st.ok() ? job.data.size() : 0, Clock::now() - job.start, st.ok());
  if (!st.ok()) NoteWriteError(st);
  st.ok() ? fuse_reply_write(job.req, job.data.size()) : fuse_reply_err(job.req, EIO);
  write_order_.End(job.ticket);
  if (more) StartRmw();
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
  o.queue_depth = args_.queue_depth;
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

}  // namespace blockcsi::bridge_internal
