// The bridge's iSCSI transport: one LUN through libiscsi, over one session
// (with many commands in flight) or several, used in turn. Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "bridge/bridge_transport.h"
#include "bridge/discard_plan.h"
#include "bridge/libiscsi_session.h"

namespace blockcsi {

class IscsiBridgeTransport final : public BridgeTransport {
 public:
  // Logs in with the first portal that answers (see LibIscsiSession::Connect
  // for the codes). Only one session: call AddSessions once the LUN's
  // identity was verified, so a wrong LUN costs one login, not many.
  static StatusOr<std::unique_ptr<IscsiBridgeTransport>> Connect(const LibIscsiOptions& options);
  ~IscsiBridgeTransport() override;
  IscsiBridgeTransport(const IscsiBridgeTransport&) = delete;
  IscsiBridgeTransport& operator=(const IscsiBridgeTransport&) = delete;

  // Opens up to `extra` more sessions to the portal of the first; a failure
  // is logged and leaves fewer sessions, never an error.
  void AddSessions(int extra, const std::string& volume_id);

  std::string name() const override { return "iscsi"; }
  std::string location() const override { return session_ ? session_->portal() : ""; }
  uint32_t block_size() const override { return session_ ? session_->block_size() : 512; }
  uint64_t size_bytes() const override { return session_ ? session_->size_bytes() : 0; }
  Status Read(uint64_t offset, size_t length, char* out) override;
  Status Write(uint64_t offset, size_t length, const char* in) override;
  Status Flush() override;
  void ReadAsync(uint64_t offset, size_t length, char* out, Done done) override;
  void WriteAsync(uint64_t offset, size_t length, const char* in, Done done) override;
  void FlushAsync(Done done) override;
  // UNMAP, where the LUN is thin and unmapped blocks read back as zeros
  // (UnmapSupport); zero writes for the partial granules at the ends.
  bool can_punch_hole() const override { return unmap_.enabled; }
  void PunchHoleAsync(uint64_t offset, uint64_t length, Done done) override;
  uint32_t discard_granularity() const override;
  // On the first session's event-loop thread.
  bool Watch(int fd, std::function<bool()> on_ready, std::function<void()> on_idle) override;
  void Unwatch() override;
  Status RefreshSize() override;
  StatusOr<LunIdentity> ReadIdentity() override;
  Status Health() const override { return OkStatus(); }
  void Close() override;
  uint64_t reconnects() const override {
    uint64_t n = session_ ? session_->reconnects() : 0;
    for (const auto& s : extra_sessions_) n += s->reconnects();
    return n;
  }
  uint64_t connection_drops() const override {
    uint64_t n = session_ ? session_->drops() : 0;
    for (const auto& s : extra_sessions_) n += s->drops();
    return n;
  }

 private:
  explicit IscsiBridgeTransport(LibIscsiOptions options) : options_(std::move(options)) {}
  UnmapSupport ReadUnmapSupport();
  LibIscsiSession& IoSession() {
    size_t n = next_session_++ % (1 + extra_sessions_.size());
    return n == 0 ? *session_ : *extra_sessions_[n - 1];
  }

  LibIscsiOptions options_;
  std::unique_ptr<LibIscsiSession> session_;                      // control commands and I/O
  std::vector<std::unique_ptr<LibIscsiSession>> extra_sessions_;  // I/O only; fixed after AddSessions
  std::atomic<size_t> next_session_{0};
  UnmapSupport unmap_;  // fixed at Connect
};

}  // namespace blockcsi
