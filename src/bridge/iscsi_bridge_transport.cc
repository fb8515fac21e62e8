#include "bridge/iscsi_bridge_transport.h"

#include <algorithm>

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
  return t;
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

// The target flushes the whole LU whichever session asks; completed writes
// on every session are covered.
Status IscsiBridgeTransport::Flush() { return session_->SynchronizeCache(); }

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
