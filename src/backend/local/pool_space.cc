#include <sys/types.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "backend/local/pool.h"

// The pool's space accounting: what is provisioned, what its images really
// take, and how much more the overcommit policy allows (pool.h,
// AvailableBytes and ReserveRoom share one formula, so GetCapacity never
// promises a volume CreateVolume would refuse).
namespace blockcsi {
namespace {

// Bytes times the ratio, saturating instead of overflowing.
uint64_t Scaled(uint64_t bytes, double ratio) {
  long double v = static_cast<long double>(bytes) * ratio;
  if (v >= static_cast<long double>(std::numeric_limits<uint64_t>::max())) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(v);
}

std::string RatioText(double ratio) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", ratio);
  return text;
}

}  // namespace

Pool::RoomReservation::~RoomReservation() {
  if (pool_ == nullptr) return;
  MutexLock lock(pool_->mu_);
  pool_->reserved_bytes_ -= bytes_;
  if (volume_) --pool_->reserved_volumes_;
}

uint64_t Pool::ProvisionedBytes() const {
  MutexLock lock(mu_);
  return ProvisionedBytesLocked();
}

uint64_t Pool::ProvisionedBytesLocked() const {
  uint64_t total = reserved_bytes_;
  for (const auto& [id, record] : volumes_) total += record.size_bytes;
  for (const auto& [id, record] : snapshots_) total += record.size_bytes;
  return total;
}

StatusOr<uint64_t> Pool::ImageAllocatedBytes(std::string_view id) const { return files_.AllocatedBytes(ImagePath(id)); }

std::map<std::string, uint64_t> Pool::AllocatedByImage() const {
  std::vector<std::string> ids;
  {
    MutexLock lock(mu_);
    for (const auto& [id, record] : volumes_) ids.push_back(id);
    for (const auto& [id, record] : snapshots_) ids.push_back(id);
  }
  // Stat'ed outside the lock: one stat per image, which CreateVolume's
  // callers must not queue behind. An image gone in between (deleted) is
  // left out; so is its record, by then.
  std::map<std::string, uint64_t> out;
  for (const auto& id : ids) {
    if (auto bytes = files_.AllocatedBytes(ImagePath(id)); bytes.ok()) out[id] = *bytes;
  }
  return out;
}

uint64_t Pool::AllocatedBytes() const {
  uint64_t total = 0;
  for (const auto& [id, bytes] : AllocatedByImage()) total += bytes;
  return total;
}

StatusOr<PoolSpace> Pool::FileSystemSpace() const { return files_.Space(dir_); }

// What the ratio expects the volumes still to write, in bytes of volume:
// each volume's size less the ratio times what its image has allocated,
// never below 0 (a volume already fuller than the ratio expects counts 0,
// its excess is already gone from the free space), plus every reservation
// in flight (a volume being made has written nothing yet). Snapshots are
// left out: they never grow.
uint64_t Pool::UnwrittenLocked(const std::map<std::string, uint64_t>& allocated) const {
  uint64_t total = reserved_bytes_;
  for (const auto& [id, record] : volumes_) {
    auto it = allocated.find(id);
    const uint64_t expected_written = Scaled(it == allocated.end() ? 0 : it->second, options_.overcommit_ratio);
    if (record.size_bytes > expected_written) total += record.size_bytes - expected_written;
  }
  return total;
}

Pool::Room Pool::RoomLocked(const PoolSpace& space, const std::map<std::string, uint64_t>& allocated) const {
  Room room;
  room.limit = Scaled(space.total_bytes, options_.overcommit_ratio);
  const uint64_t provisioned = ProvisionedBytesLocked();
  room.promised = room.limit > provisioned ? room.limit - provisioned : 0;
  const uint64_t backed = Scaled(space.available_bytes, options_.overcommit_ratio);
  const uint64_t unwritten = UnwrittenLocked(allocated);
  room.backed = backed > unwritten ? backed - unwritten : 0;
  return room;
}

StatusOr<uint64_t> Pool::AvailableBytes() const {
  std::map<std::string, uint64_t> allocated = AllocatedByImage();
  BLOCKCSI_ASSIGN_OR_RETURN(PoolSpace space, files_.Space(dir_));
  MutexLock lock(mu_);
  Room room = RoomLocked(space, allocated);
  return std::min(room.promised, room.backed);
}

StatusOr<Pool::RoomReservation> Pool::ReserveRoom(uint64_t bytes, bool new_volume, const std::string& what) {
  std::map<std::string, uint64_t> allocated = AllocatedByImage();
  BLOCKCSI_ASSIGN_OR_RETURN(PoolSpace space, files_.Space(dir_));
  const std::string ratio = RatioText(options_.overcommit_ratio);
  MutexLock lock(mu_);
  const Room room = RoomLocked(space, allocated);
  if (bytes > static_cast<uint64_t>(std::numeric_limits<off_t>::max()) || bytes > room.limit) {
    return OutOfRange(what + ": " + std::to_string(bytes) + " bytes is more than the pool can ever hold (" +
                      std::to_string(room.limit) + " bytes: its file system times the overcommit ratio " + ratio + ")");
  }
  if (bytes > room.promised) {
    return ResourceExhausted(what + ": " + std::to_string(bytes) + " bytes more would provision " +
                             std::to_string(ProvisionedBytesLocked() + bytes) + " bytes, more than the pool allows (" +
                             std::to_string(room.limit) + " bytes: its file system times the overcommit ratio " +
                             ratio + ")");
  }
  if (bytes > room.backed) {
    return ResourceExhausted(
        what + ": " + std::to_string(bytes) + " bytes is more than the pool's free space backs now (" +
        std::to_string(room.backed) + " bytes: its free space " + std::to_string(space.available_bytes) +
        " times the overcommit ratio " + ratio + ", less what that ratio expects its volumes still to write)");
  }
  if (new_volume && options_.max_volumes != 0 && volumes_.size() + reserved_volumes_ >= options_.max_volumes) {
    return ResourceExhausted(what + ": the pool holds " + std::to_string(volumes_.size() + reserved_volumes_) +
                             " volumes, the most it is allowed (--max-volumes " + std::to_string(options_.max_volumes) +
                             ")");
  }
  reserved_bytes_ += bytes;
  if (new_volume) ++reserved_volumes_;
  return RoomReservation(this, bytes, new_volume);
}

}  // namespace blockcsi
