// AttachRecordStore: the attach records on disk, one JSON file per volume
// under <state-dir>/attachments, replaced atomically (temp, fsync, rename,
// fsync dir), mode 0600. Records never hold secrets: AttachRecord has no
// field for them. Thread-safe for different volumes; the caller serialises
// writes of one volume.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attach/volume_attacher.h"
#include "common/fault_points.h"
#include "common/host.h"
#include "common/status.h"
#include "common/strings.h"

namespace blockcsi {

inline constexpr char kAttachStateAttaching[] = "attaching";
inline constexpr char kAttachStateAttached[] = "attached";

// JSON (de)serialisation; unknown fields are ignored so an older plugin can
// read a newer record, and a malformed file is DATA_LOSS naming it.
std::string AttachRecordToJson(const AttachRecord& record);
StatusOr<AttachRecord> AttachRecordFromJson(const std::string& text, const std::string& what);

// <state_dir>/attachments/<escaped volume id>.json
std::string AttachRecordPath(const std::string& state_dir, const std::string& volume_id);

class AttachRecordStore {
 public:
  // `files`: the host the state dir is on (its listings go through it).
  // `fault_hook`: also told of the node.record.* points of each Put (tests).
  AttachRecordStore(std::string state_dir, std::shared_ptr<const Host> files, FaultHook fault_hook = {});

  // Creates the directory (0700) and removes the temp files of writes a
  // crash interrupted. Only the directory's owner (the plugin, at start).
  Status Init();
  // Crash-safe; `sync_directory` false: see AtomicWriteOptions.
  Status Put(const AttachRecord& record, bool sync_directory = true);
  StatusOr<AttachRecord> Get(const std::string& volume_id) const;  // NOT_FOUND
  // Every readable record; unreadable ones are logged and skipped so one bad
  // file cannot hide the others.
  StatusOr<std::vector<AttachRecord>> List() const;
  Status Remove(const std::string& volume_id);  // absent: OK
  std::string PathFor(const std::string& volume_id) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::shared_ptr<const Host> files_;
  FaultHook fault_hook_;
};

}  // namespace blockcsi
