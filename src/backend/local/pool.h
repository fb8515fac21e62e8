// Pool: the durable half of the target backend — a directory holding one
// sparse image file and one metadata record per volume and per snapshot.
//
//   <pool>/.lock                 flock'ed while a process owns the pool
//   <pool>/volumes/<vol-id>.json  VolumeRecord (never a secret)
//   <pool>/snapshots/<snap-id>.json
//   <pool>/images/<id>.img        sparse image of a volume or snapshot
//   <pool>/tmp/                   images being built; emptied at Open
//   <pool>/fences/<node-id>.json  FenceRecord of a fenced node (backend.h)
//
// Crash safety: an object becomes visible only when its record is written
// (WriteFileAtomically), and its image is complete and fsynced, under its
// final name, before that (a new empty volume's image only under its name:
// its size is restored by Open() from the record, see PlaceImage). Deletion
// removes the record first, durably. So after a crash at any step, Open()
// finds whole objects plus, at worst, an image with no record, which it
// removes. Snapshots and clones use FICLONE where
// the filesystem supports it (xfs, btrfs), else a SEEK_DATA/SEEK_HOLE copy.
//
// Thread-safety: the in-memory index is guarded by a mutex; callers
// serialise operations on one object (LocalBackend's per-key locks).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/local/image_files.h"
#include "common/fault_points.h"
#include "common/mutex.h"
#include "common/status.h"

namespace blockcsi {

struct PoolOptions {
  // Test-only: sees the pool's fault points (common/fault_points.h:
  // controller.create.image-staged, .image-placed, controller.delete.record-removed,
  // controller.snapshot.image-staged, .image-placed,
  // controller.delete-snapshot.record-removed); an error stops the operation
  // right there, leaving the disk as a crash at that point would.
  FaultHook fault_hook;
  // Thin provisioning: images are sparse, so the pool may provision (the
  // sizes of all its volumes and snapshots) up to its file system's size
  // times this ratio, and one new volume or growth may take up to the free
  // space times it; RESOURCE_EXHAUSTED past either, OUT_OF_RANGE for more
  // than the whole file system times it (no delete would make room).
  // 1.0: never more than the disk holds; 3.0: up to three times it.
  double overcommit_ratio = 1.0;
  // The most volumes the pool holds (0: no limit); CreateVolume past it is
  // RESOURCE_EXHAUSTED. Each exported volume costs the target daemon threads
  // and memory (a tgtd LUN takes its I/O threads, each a pid), so without a
  // cap one class's author could exhaust the storage host's pids.
  size_t max_volumes = 0;
  // Where the pool's files live; null: the machine's (MakeImageFiles).
  // Tests pass one that controls free space or records the durable steps.
  std::shared_ptr<ImageFiles> files;
};

// Parses an overcommit ratio flag: a finite number in (0, 1000].
StatusOr<double> ParseOvercommitRatio(std::string_view text);

class Pool {
 public:
  // Creates the layout if missing, takes the pool lock (FAILED_PRECONDITION
  // when another process holds it), loads every record and removes what a
  // crash left half-made.
  static StatusOr<std::unique_ptr<Pool>> Open(const std::string& dir, PoolOptions options = {});
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  const std::string& dir() const { return dir_; }
  std::string ImagePath(std::string_view id) const;
  // The size of the image file of a volume or snapshot; NOT_FOUND without one.
  StatusOr<uint64_t> ImageSize(std::string_view id) const;

  // ---- volumes ----
  std::optional<VolumeRecord> GetVolume(const std::string& id) const;
  std::optional<VolumeRecord> FindVolumeByName(const std::string& name) const;
  std::vector<VolumeRecord> ListVolumes() const;  // ordered by id
  // One page, ordered by id: up to `max_entries` (0: all) records from the
  // first id >= `start_id`; *next_id is the id the next page starts at, empty
  // after the last. Costs the page, not the pool (a ListVolumes page of 100
  // copied all 1,000 records).
  std::vector<VolumeRecord> ListVolumesFrom(const std::string& start_id, size_t max_entries,
                                            std::string* next_id) const;
  // Builds the image (empty sparse file, or a copy of `source_image`, grown
  // to the record's size), then commits the record. ALREADY_EXISTS if the id is taken.
  Status CreateVolume(const VolumeRecord& record, const std::string& source_image, CopyMethod* method = nullptr);
  // Rewrites the record (grants, size after a grow, wrapped data key).
  Status UpdateVolume(const VolumeRecord& record);
  // Grows the image file; never shrinks it.
  Status GrowImage(const std::string& id, uint64_t size_bytes);
  // Record first, then the image: a crash in between leaves an orphan image.
  Status DeleteVolume(const std::string& id);

  // ---- snapshots ----
  std::optional<SnapshotRecord> GetSnapshot(const std::string& id) const;
  std::optional<SnapshotRecord> FindSnapshotByName(const std::string& name) const;
  std::vector<SnapshotRecord> ListSnapshots() const;  // ordered by id
  Status CreateSnapshot(const SnapshotRecord& record, CopyMethod* method = nullptr);
  // Rewrites the record of an existing snapshot (its wrapped data key).
  Status UpdateSnapshot(const SnapshotRecord& record);
  Status DeleteSnapshot(const std::string& id);

  // ---- fences (pool_fences.cc): one durable record per fenced node
  std::optional<FenceRecord> GetFence(const std::string& node_id) const;
  std::vector<FenceRecord> ListFences() const;  // ordered by node id
  // The fence of the node a grant names (by node id or by initiator), if any.
  std::optional<FenceRecord> FenceOf(std::string_view node_id, std::string_view initiator_iqn) const;
  bool Fenced(std::string_view node_id, std::string_view initiator_iqn) const {
    return FenceOf(node_id, initiator_iqn).has_value();
  }
  // Durable (fsynced) on return.
  Status PutFence(const FenceRecord& record);
  // Durable on return; no record → OK.
  Status RemoveFence(const std::string& node_id);

  // The largest new volume the overcommit policy allows now (pool_space.cc,
  // GetCapacity), the least of two rooms, with R the ratio:
  //   promised: R * the file system's size, less what is provisioned
  //             (volumes, snapshots, and those being made or grown);
  //   backed:   R * the file system's free space, less what R expects the
  //             volumes still to write: for each, its size less R * what its
  //             image has allocated (never below 0).
  // So space a trim gives back counts again once a volume holds more than
  // R expects, and free space that something else took counts against the
  // pool. CreateVolume, snapshots and grows are checked against the same.
  StatusOr<uint64_t> AvailableBytes() const;
  // The file system the pool is on, as it is (no overcommit): for metrics.
  StatusOr<PoolSpace> FileSystemSpace() const;
  // Every volume's and snapshot's size, and those being made or grown.
  uint64_t ProvisionedBytes() const;
  // What the image of a volume or snapshot takes on disk (st_blocks * 512);
  // NOT_FOUND without one.
  StatusOr<uint64_t> ImageAllocatedBytes(std::string_view id) const;
  // The sum of that over every volume and snapshot.
  uint64_t AllocatedBytes() const;
  // The pool directory is readable and writable.
  Status Healthy() const;

  // Serialisation of records, exposed for tests.
  static std::string VolumeToJson(const VolumeRecord& record);
  static StatusOr<VolumeRecord> VolumeFromJson(std::string_view text);
  static std::string SnapshotToJson(const SnapshotRecord& record);
  static StatusOr<SnapshotRecord> SnapshotFromJson(std::string_view text);

 private:
  Pool(std::string dir, PoolOptions options, std::unique_ptr<HeldLock> lock);
  Status Load();
  Status LoadFences();
  std::string FenceRecordPath(std::string_view node_id) const;
  Status Fault(std::string_view point) const;
  // The fault points of one PlaceImage: reached once the image is staged
  // in tmp/, then once it is renamed into images/. Whole names, so that
  // hack/check_fault_points.py finds every point in the source.
  struct PlaceImagePoints {
    std::string_view staged;
    std::string_view placed;
  };
  // Builds tmp/<id>.img, fsyncs it and renames it to images/<id>.img.
  Status PlaceImage(const PlaceImagePoints& points, const std::string& id, uint64_t size_bytes,
                    const std::string& source_image, CopyMethod* method);
  // Room for `bytes` more of sparse image under the overcommit policy (and,
  // for a new volume, under max_volumes), held for the caller until the
  // returned reservation is destroyed, by which time the record that
  // accounts for it is indexed: concurrent calls are checked against each
  // other's bytes, not each against the pool alone. `what` names the object.
  class RoomReservation {
   public:
    RoomReservation(Pool* pool, uint64_t bytes, bool volume) : pool_(pool), bytes_(bytes), volume_(volume) {}
    RoomReservation(RoomReservation&& other) noexcept
        : pool_(std::exchange(other.pool_, nullptr)), bytes_(other.bytes_), volume_(other.volume_) {}
    RoomReservation& operator=(RoomReservation&&) = delete;
    RoomReservation(const RoomReservation&) = delete;
    RoomReservation& operator=(const RoomReservation&) = delete;
    ~RoomReservation();

   private:
    Pool* pool_;
    uint64_t bytes_;
    bool volume_;
  };
  StatusOr<RoomReservation> ReserveRoom(uint64_t bytes, bool new_volume, const std::string& what);
  uint64_t ProvisionedBytesLocked() const REQUIRES(mu_);
  // Allocated bytes by image id (volumes and snapshots), stat'ed unlocked.
  std::map<std::string, uint64_t> AllocatedByImage() const EXCLUDES(mu_);
  uint64_t UnwrittenLocked(const std::map<std::string, uint64_t>& allocated) const REQUIRES(mu_);
  // The two rooms of AvailableBytes, and the most the pool can ever hold.
  struct Room {
    uint64_t limit = 0;     // R * the file system's size
    uint64_t promised = 0;  // limit less what is provisioned
    uint64_t backed = 0;    // R * free space less what the volumes are expected still to write
  };
  Room RoomLocked(const PoolSpace& space, const std::map<std::string, uint64_t>& allocated) const REQUIRES(mu_);
  std::string VolumeRecordPath(std::string_view id) const;
  std::string SnapshotRecordPath(std::string_view id) const;
  // Puts `record` in the in-memory index (replacing the one of its id) /
  // takes it out.
  void IndexVolumeLocked(const VolumeRecord& record) REQUIRES(mu_);
  void UnindexVolumeLocked(const std::string& id) REQUIRES(mu_);

  const std::string dir_;
  const PoolOptions options_;
  ImageFiles& files_;                     // *options_.files
  const std::unique_ptr<HeldLock> lock_;  // the pool's lock, held while this object lives
  mutable Mutex mu_;
  std::map<std::string, VolumeRecord> volumes_ GUARDED_BY(mu_);  // by id
  // (name, id) of every volume: FindVolumeByName without a scan of the pool
  // (the first id of a name, as a scan in id order would find).
  std::set<std::pair<std::string, std::string>> volume_names_ GUARDED_BY(mu_);
  std::map<std::string, SnapshotRecord> snapshots_ GUARDED_BY(mu_);  // by id
  std::map<std::string, FenceRecord> fences_ GUARDED_BY(mu_);        // by node id
  // Held by RoomReservations in flight.
  uint64_t reserved_bytes_ GUARDED_BY(mu_) = 0;
  size_t reserved_volumes_ GUARDED_BY(mu_) = 0;
};

}  // namespace blockcsi
