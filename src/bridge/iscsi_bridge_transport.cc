#include "bridge/iscsi_bridge_transport.h"

#include <algorithm>
#include <atomic>

#include "bridge/split_done.h"
#include "bridge/write_zeroes.h"
#include "common/logging.h"

namespace blockcsi {
namespace {

// Largest single SCSI command the bridge sends; bigger requests are split.
constexpr size_t kMaxTransferBytes = size_t{1024} * 1024;

}  // namespace

StatusOr<std::unique_ptr<IscsiBridgeTransport>> IscsiBridgeTransport::Connect(const LibIscsiOptions& options) {
  std::unique_ptr<IscsiBridgeTransport> t(new IscsiBridgeTransport(options));
  BLOCKCSI_ASSIGN_OR_RETURN(t->session_, LibIscsiSession::Connect(options));
  // Extra sessions go to the portal that answered, not through the list again.
  t->options_.portals = {t->session_->portal()};
  t->unmap_ = t->ReadUnmapSupport();
  return t;
}

// Asked once, at connect: a LUN switched to thin later (tgtd's
// thin_provisioning) is seen by the next bridge, at the next stage. A page
// the target does not have reads as absent, which means no UNMAP.
UnmapSupport IscsiBridgeTransport::ReadUnmapSupport() {
  if (!session_->lbpme()) return {};
  auto b0 = session_->InquiryVpd(0xB0);
  auto b2 = session_->InquiryVpd(0xB2);
  return ParseUnmapSupport(session_->lbpme(), session_->lbprz(), b0.ok() ? *b0 : "", b2.ok() ? *b2 : "");
}

uint32_t IscsiBridgeTransport::discard_granularity() const {
  uint64_t bytes = uint64_t{block_size()} * unmap_.granularity;
  return bytes <= UINT32_MAX ? static_cast<uint32_t>(bytes) : block_size();
}

void IscsiBridgeTransport::PunchHoleAsync(uint64_t offset, uint64_t length, Done done) {
  uint32_t bs = session_->block_size();
  std::vector<DiscardExtent> plan = PlanPunchHole(unmap_, offset / bs, length / bs);
  if (plan.empty()) {
    done(OkStatus());
    return;
  }
  auto split = std::make_shared<SplitDone>(plan.size(), std::move(done));
  for (const DiscardExtent& e : plan) {
    if (e.unmap) {
      IoSession().UnmapAsync(e.lba, static_cast<uint32_t>(e.blocks), SplitDone::Part(split));
    } else {
      WriteZeroesAsync(*this, e.lba * bs, e.blocks * bs, SplitDone::Part(split));
    }
  }
}

IscsiBridgeTransport::~IscsiBridgeTransport() { Close(); }

void IscsiBridgeTransport::AddSessions(int extra, const std::string& volume_id) {
  for (int i = 0; i < extra; ++i) {
    auto session = LibIscsiSession::Connect(options_);
    if (!session.ok()) {
      LogWarn("extra iSCSI session failed; continuing with fewer",
              {{"volume_id", volume_id}, {"error", session.status().message()}});
      break;
    }
    extra_sessions_.push_back(std::move(*session));
  }
}

Status IscsiBridgeTransport::Read(uint64_t offset, size_t length, char* out) {
  uint32_t bs = session_->block_size();
  while (length > 0) {
    size_t chunk = std::min(length, kMaxTransferBytes);
    BLOCKCSI_RETURN_IF_ERROR(IoSession().Read(offset / bs, static_cast<uint32_t>(chunk / bs), out));
    offset += chunk;
    out += chunk;
    length -= chunk;
  }
  return OkStatus();
}

Status IscsiBridgeTransport::Write(uint64_t offset, size_t length, const char* in) {
  uint32_t bs = session_->block_size();
  while (length > 0) {
    size_t chunk = std::min(length, kMaxTransferBytes);
    BLOCKCSI_RETURN_IF_ERROR(IoSession().Write(offset / bs, static_cast<uint32_t>(chunk / bs), in));
    offset += chunk;
    in += chunk;
    length -= chunk;
  }
  return OkStatus();
}

void IscsiBridgeTransport::ReadAsync(uint64_t offset, size_t length, char* out, Done done) {
  uint32_t bs = session_->block_size();
  if (length <= kMaxTransferBytes) {
    IoSession().ReadAsync(offset / bs, static_cast<uint32_t>(length / bs), out, std::move(done));
    return;
  }
  auto split = std::make_shared<SplitDone>((length + kMaxTransferBytes - 1) / kMaxTransferBytes, std::move(done));
  for (size_t at = 0; at < length; at += kMaxTransferBytes) {
    size_t chunk = std::min(length - at, kMaxTransferBytes);
    IoSession().ReadAsync((offset + at) / bs, static_cast<uint32_t>(chunk / bs), out + at, SplitDone::Part(split));
  }
}

void IscsiBridgeTransport::WriteAsync(uint64_t offset, size_t length, const char* in, Done done) {
  uint32_t bs = session_->block_size();
  if (length <= kMaxTransferBytes) {
    IoSession().WriteAsync(offset / bs, static_cast<uint32_t>(length / bs), in, std::move(done));
    return;
  }
  auto split = std::make_shared<SplitDone>((length + kMaxTransferBytes - 1) / kMaxTransferBytes, std::move(done));
  for (size_t at = 0; at < length; at += kMaxTransferBytes) {
    size_t chunk = std::min(length - at, kMaxTransferBytes);
    IoSession().WriteAsync((offset + at) / bs, static_cast<uint32_t>(chunk / bs), in + at, SplitDone::Part(split));
  }
}

// SYNCHRONIZE CACHE covers what completed before it, on every session (the
// target flushes the whole LU); the bridge sends it only once the writes
// it must cover completed.
void IscsiBridgeTransport::FlushAsync(Done done) { session_->SynchronizeCacheAsync(std::move(done)); }

// The target flushes the whole LU whichever session asks; completed writes
// on every session are covered.
Status IscsiBridgeTransport::Flush() { return session_->SynchronizeCache(); }

bool IscsiBridgeTransport::Watch(int fd, std::function<bool()> on_ready, std::function<void()> on_idle) {
  session_->Watch(fd, std::move(on_ready), std::move(on_idle));
  return true;
}

void IscsiBridgeTransport::Unwatch() {
  if (session_) session_->Unwatch();
}

Status IscsiBridgeTransport::RefreshSize() { return session_->RefreshCapacity(); }

StatusOr<LunIdentity> IscsiBridgeTransport::ReadIdentity() {
  BLOCKCSI_ASSIGN_OR_RETURN(std::string p80, session_->InquiryVpd(0x80));
  BLOCKCSI_ASSIGN_OR_RETURN(std::string p83, session_->InquiryVpd(0x83));
  return ParseVpdPages(p80, p83);
}

void IscsiBridgeTransport::Close() {
  for (auto& extra : extra_sessions_) extra->Close();
  extra_sessions_.clear();
  if (session_) {
    session_->Close();
    session_.reset();
  }
}

}  // namespace blockcsi
