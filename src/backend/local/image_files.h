// ImageFiles: every effect the pool has on the host's file system (issue
// #16: no system call in pool.cc) — its lock, its sparse image files, its
// crash-safe records and the fsyncs that order them. The real one works on
// the machine (MakeImageFiles); a test one derives from it and changes what
// a test must control (the file system's free space, a failing step) or
// records the order of the durable steps (test/support/recording_image_files.h).
// Paths are absolute. Implementations are thread-safe (stateless here).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace blockcsi {

// How an image was copied: for logs and tests.
enum class CopyMethod { kNone, kReflink, kSparseCopy };

// The size of the file system that holds the pool, in bytes.
struct PoolSpace {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;  // to an unprivileged writer (f_bavail)
};

// A lock held as long as this object lives.
class HeldLock {
 public:
  virtual ~HeldLock() = default;
};

class ImageFiles {
 public:
  virtual ~ImageFiles() = default;

  // ---- the pool's directories and lock
  // Exclusive lock on the file `path` (made if missing), for as long as the
  // returned object lives; FAILED_PRECONDITION when another process holds it.
  virtual StatusOr<std::unique_ptr<HeldLock>> Lock(const std::string& path) = 0;
  // mkdir -p, 0700 for what it makes.
  virtual Status MakeDirectory(const std::string& path) = 0;
  // The names in `dir` ("." and ".." left out), in no particular order.
  virtual StatusOr<std::vector<std::string>> List(const std::string& dir) = 0;
  // fsync of a directory: names made, renamed or removed in it are durable.
  virtual Status SyncDirectory(const std::string& dir) = 0;
  virtual StatusOr<PoolSpace> Space(const std::string& dir) = 0;
  // The directory can be read, written and searched.
  virtual Status CheckAccess(const std::string& dir) = 0;

  // ---- images
  // A new sparse file of `size_bytes` at `path` (replacing one left there),
  // not fsynced (Pool::PlaceImage says why). A failure leaves no file.
  virtual Status Create(const std::string& path, uint64_t size_bytes) = 0;
  // A new file `to` (which must not exist) with `from`'s bytes: FICLONE when
  // the file system can share extents, else only the data extents copied
  // (holes stay holes); then sized to `size_bytes` (>= `from`'s size) and
  // fsynced. What was used goes to *method (if not null).
  virtual Status Clone(const std::string& from, const std::string& to, uint64_t size_bytes, CopyMethod* method) = 0;
  // NOT_FOUND when there is no such file.
  virtual StatusOr<uint64_t> Size(const std::string& path) = 0;
  // The bytes the file system has allocated to the file (st_blocks * 512):
  // what a sparse image really takes, which a trim from the node lowers.
  // NOT_FOUND when there is no such file.
  virtual StatusOr<uint64_t> AllocatedBytes(const std::string& path) = 0;
  // Sets the file's size and fsyncs it: the size is durable on return.
  virtual Status Resize(const std::string& path, uint64_t size_bytes) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // unlink; a missing file is OK. Its directory is not fsynced.
  virtual Status Remove(const std::string& path) = 0;

  // ---- records (common/atomic_file.h)
  // Temp file, fsync, rename, fsync of the directory: after a crash the
  // record is the old one or the new one, never a mix, and the new one once
  // this returned.
  virtual Status WriteRecord(const std::string& path, std::string_view contents) = 0;
  virtual StatusOr<std::string> ReadRecord(const std::string& path) = 0;
  // unlink and fsync of the directory; a missing file is OK.
  virtual Status RemoveDurably(const std::string& path) = 0;
};

// The machine's file system.
class HostImageFiles : public ImageFiles {
 public:
  StatusOr<std::unique_ptr<HeldLock>> Lock(const std::string& path) override;
  Status MakeDirectory(const std::string& path) override;
  StatusOr<std::vector<std::string>> List(const std::string& dir) override;
  Status SyncDirectory(const std::string& dir) override;
  StatusOr<PoolSpace> Space(const std::string& dir) override;
  Status CheckAccess(const std::string& dir) override;
  Status Create(const std::string& path, uint64_t size_bytes) override;
  Status Clone(const std::string& from, const std::string& to, uint64_t size_bytes, CopyMethod* method) override;
  StatusOr<uint64_t> Size(const std::string& path) override;
  StatusOr<uint64_t> AllocatedBytes(const std::string& path) override;
  Status Resize(const std::string& path, uint64_t size_bytes) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Status WriteRecord(const std::string& path, std::string_view contents) override;
  StatusOr<std::string> ReadRecord(const std::string& path) override;
  Status RemoveDurably(const std::string& path) override;
};

std::shared_ptr<ImageFiles> MakeImageFiles();

}  // namespace blockcsi
