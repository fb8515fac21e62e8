// LocalBackend::SetWrappedDataKey: the compare-and-set of a volume's or a
// snapshot's wrapped data key (backend.h), durable in the pool's record.
#include <string_view>

#include "backend/local/local_backend.h"
#include "backend/volume_id.h"
#include "common/keyed_lock.h"
#include "common/logging.h"

namespace blockcsi {
namespace {

// The wrapped form is short base64 text ("v1." + 80 characters); anything
// that could not be one is refused before it reaches a record.
constexpr size_t kMaxWrappedKeyBytes = 256;

Status CheckWrappedKeyText(std::string_view wrapped, const std::string& id) {
  if (wrapped.empty() || wrapped.size() > kMaxWrappedKeyBytes) {
    return InvalidArgument("wrapped data key of " + QuoteId(id) + " is empty or longer than " +
                           std::to_string(kMaxWrappedKeyBytes) + " bytes");
  }
  for (char c : wrapped) {
    if (c < 0x21 || c > 0x7e) return InvalidArgument("wrapped data key of " + QuoteId(id) + " is not printable text");
  }
  return OkStatus();
}

// Whether `current` may become `wrapped`: OK to write, a retry (already
// done), or someone else changed it since the caller read it.
enum class KeySwap { kWrite, kAlreadyDone };
StatusOr<KeySwap> CompareKey(const std::string& current, const std::string& expected, const std::string& wrapped,
                             const std::string& what) {
  if (current == wrapped) return KeySwap::kAlreadyDone;
  if (current != expected) {
    return Aborted("the wrapped data key of " + what +
                   " is not the one this call read (changed meanwhile); re-read it");
  }
  return KeySwap::kWrite;
}

}  // namespace

Status LocalBackend::SetWrappedDataKey(const std::string& id, const std::string& expected, const std::string& wrapped) {
  BLOCKCSI_RETURN_IF_ERROR(CheckWrappedKeyText(wrapped, id));
  ReaderMutexLock op(reconcile_mu_);
  // Every operation on a volume or snapshot holds its id's lock: the
  // compare and the write see no other change in between.
  auto id_lock = locks_->Lock(id);
  if (IsVolumeId(id)) {
    auto record = pool_->GetVolume(id);
    if (!record) return NotFound("volume " + QuoteId(id) + " not found");
    BLOCKCSI_ASSIGN_OR_RETURN(KeySwap swap,
                              CompareKey(record->wrapped_data_key, expected, wrapped, "volume " + QuoteId(id)));
    if (swap == KeySwap::kAlreadyDone) return OkStatus();
    record->wrapped_data_key = wrapped;
    BLOCKCSI_RETURN_IF_ERROR(pool_->UpdateVolume(*record));
    LogInfo("wrapped data key stored", {{"volume", id}, {"first", expected.empty() ? "true" : "false"}});
    return OkStatus();
  }
  if (IsSnapshotId(id)) {
    auto record = pool_->GetSnapshot(id);
    if (!record) return NotFound("snapshot " + QuoteId(id) + " not found");
    BLOCKCSI_ASSIGN_OR_RETURN(KeySwap swap,
                              CompareKey(record->wrapped_data_key, expected, wrapped, "snapshot " + QuoteId(id)));
    if (swap == KeySwap::kAlreadyDone) return OkStatus();
    record->wrapped_data_key = wrapped;
    BLOCKCSI_RETURN_IF_ERROR(pool_->UpdateSnapshot(*record));
    LogInfo("wrapped data key stored", {{"snapshot", id}, {"first", expected.empty() ? "true" : "false"}});
    return OkStatus();
  }
  return NotFound("volume or snapshot " + QuoteId(id) + " not found (not a target-backend id)");
}

}  // namespace blockcsi
