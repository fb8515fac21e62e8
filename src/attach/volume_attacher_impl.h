// The VolumeAttacher behind MakeVolumeAttacher: records + one Connector +
// the LUN identity check. Thread-safe: a KeyedLock by volume id orders the
// record writes of that volume; different volumes proceed in parallel.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "attach/attach_record_store.h"
#include "attach/connector.h"
#include "attach/volume_attacher.h"
#include "common/keyed_lock.h"

namespace blockcsi {

class VolumeAttacherImpl final : public VolumeAttacher {
 public:
  VolumeAttacherImpl(std::string state_dir, std::unique_ptr<Connector> connector,
                     std::function<void(std::string_view)> step_hook = {});
  VolumeAttacherImpl(const VolumeAttacherImpl&) = delete;
  VolumeAttacherImpl& operator=(const VolumeAttacherImpl&) = delete;

  // Creates the record directory and reconciles records with reality.
  Status Start();

  StatusOr<AttachRecord> Attach(const AttachSpec& spec) override;
  Status Detach(const std::string& volume_id) override;
  StatusOr<AttachRecord> Get(const std::string& volume_id) override;
  StatusOr<std::vector<AttachRecord>> List() override;
  Status Annotate(const std::string& volume_id, const std::string& key, const std::string& value) override;
  StatusOr<uint64_t> Rescan(const std::string& volume_id) override;
  AttachHealth Check(const std::string& volume_id) override;

 private:
  StatusOr<AttachRecord> AttachLocked(const AttachSpec& spec);
  Status DetachLocked(const std::string& volume_id);
  // Disconnects and removes the record after a failed attach; the first
  // error is what the caller sees, cleanup trouble is logged.
  void Abandon(const AttachRecord& record, const Status& why);
  // Abandon for a fresh attach; for a re-attach of a volume that was in use,
  // restore its previous record and leave its devices alone.
  void KeepOrAbandon(const std::optional<AttachRecord>& in_use, const AttachRecord& record, const Status& why);

  AttachRecordStore store_;
  std::unique_ptr<Connector> connector_;
  std::function<void(std::string_view)> step_hook_;
  KeyedLock volume_locks_;  // orders the calls of one volume
};

// True when `record` describes the same LUN, through the same portals, as `spec`.
bool RecordMatchesSpec(const AttachRecord& record, const AttachSpec& spec);

}  // namespace blockcsi
