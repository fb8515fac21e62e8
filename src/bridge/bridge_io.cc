#define FUSE_USE_VERSION 312

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
#include "bridge/bridge_internal.h"
#include "bridge/bridge_protocol.h"
#include "bridge/bridge_transport.h"
#include "bridge/iscsi_bridge_transport.h"
#include "bridge/libiscsi_session.h"
#include "common/atomic_file.h"
#include "common/executor.h"
#include "common/filesystem.h"
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

}  // namespace blockcsi::bridge_internal
