#include "backend/volume_id.h"

#include <cstdio>

#include "common/random.h"

namespace blockcsi {
namespace {

constexpr size_t kHexDigits = 16;

bool HasIdShape(std::string_view id, std::string_view prefix) {
  if (id.size() != prefix.size() + kHexDigits || id.substr(0, prefix.size()) != prefix) return false;
  for (char c : id.substr(prefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string NewId(std::string_view prefix) {
  // From the kernel's CSPRNG: ids are unguessable and, at 64 bits, collide
  // only in theory (the pool still refuses an existing id).
  const uint64_t value = RandomU64();
  char hex[kHexDigits + 1];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(value));
  return std::string(prefix) + hex;
}

}  // namespace

bool IsVolumeId(std::string_view id) { return HasIdShape(id, kVolumeIdPrefix); }
bool IsSnapshotId(std::string_view id) { return HasIdShape(id, kSnapshotIdPrefix); }

std::string QuoteId(std::string_view id) {
  std::string out = "\"";
  for (size_t i = 0; i < id.size() && i < 64; ++i) {
    char c = id[i];
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (id.size() > 64) out += "...";
  return out + "\"";
}

Status ValidateVolumeId(std::string_view id) {
  if (IsVolumeId(id)) return OkStatus();
  return InvalidArgument("volume id " + QuoteId(id) + " is not a target-backend volume id (vol-<16 hex digits>)");
}

Status ValidateSnapshotId(std::string_view id) {
  if (IsSnapshotId(id)) return OkStatus();
  return InvalidArgument("snapshot id " + QuoteId(id) + " is not a target-backend snapshot id (snap-<16 hex digits>)");
}

std::string NewVolumeId() { return NewId(kVolumeIdPrefix); }
std::string NewSnapshotId() { return NewId(kSnapshotIdPrefix); }

std::string_view IdHex(std::string_view id) { return id.size() >= kHexDigits ? id.substr(id.size() - kHexDigits) : id; }

}  // namespace blockcsi
