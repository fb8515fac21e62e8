// Identifiers of the target backend's objects, and the one place they are
// validated. A volume id is "vol-" + 16 lower-case hex digits, a snapshot id
// "snap-" + 16: short, valid as an IQN suffix and as a file name, and never
// able to name a path outside the pool ("../../etc" is rejected here, before
// any file is touched). Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace blockcsi {

inline constexpr std::string_view kVolumeIdPrefix = "vol-";
inline constexpr std::string_view kSnapshotIdPrefix = "snap-";

// True when `id` is exactly prefix + 16 lower-case hex digits.
bool IsVolumeId(std::string_view id);
bool IsSnapshotId(std::string_view id);

// INVALID_ARGUMENT naming the id (quoted, truncated) when it is not one of ours.
Status ValidateVolumeId(std::string_view id);
Status ValidateSnapshotId(std::string_view id);

// Fresh random ids (64 bits from the OS random source).
std::string NewVolumeId();
std::string NewSnapshotId();

// The 16 hex digits of an id (its prefix dropped). `id` must be valid.
std::string_view IdHex(std::string_view id);

// The id quoted for a message: at most 64 characters, non-printables as '?'.
std::string QuoteId(std::string_view id);

}  // namespace blockcsi
