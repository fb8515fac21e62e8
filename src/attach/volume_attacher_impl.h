// The VolumeAttacher behind MakeVolumeAttacher: records + one Connector +
// the LUN identity check. Thread-safe for different volumes; the caller
// holds each volume for its operations (volume_attacher.h says who).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "attach/attach_record_store.h"
#include "attach/connector.h"
#include "attach/volume_attacher.h"
#include "common/fault_points.h"
#include "common/host.h"

namespace blockcsi {

class VolumeAttacherImpl final : public VolumeAttacher {
 public:
  // `state_files`: the host the state dir (its records) is on.
  VolumeAttacherImpl(std::string state_dir, std::shared_ptr<const Host> state_files,
                     std::unique_ptr<Connector> connector, FaultHook fault_hook = {});
  VolumeAttacherImpl(const VolumeAttacherImpl&) = delete;
  VolumeAttacherImpl& operator=(const VolumeAttacherImpl&) = delete;

  // Creates the record directory and reconciles records with reality.
  Status Start();

  using VolumeAttacher::Attach;
  StatusOr<AttachRecord> Attach(const AttachSpec& spec, const std::optional<AttachRecord>& earlier) override;
  Status Detach(const std::string& volume_id) override;
  StatusOr<AttachRecord> Get(const std::string& volume_id) override;
  StatusOr<std::vector<AttachRecord>> List() override;
  Status Annotate(const std::string& volume_id, const std::string& key, const std::string& value) override;
  StatusOr<uint64_t> Rescan(const std::string& volume_id) override;
  AttachHealth Check(const std::string& volume_id) override;

 private:
  // What an earlier record of the volume means for this attach: a healthy
  // attachment of the same LUN to reuse, one to attach again (kept as
  // `in_use` so a failure puts it back), or nothing (an earlier attempt of
  // another shape is undone here).
  struct EarlierAttach {
    std::optional<AttachRecord> reuse;
    std::optional<AttachRecord> resume;
    std::optional<AttachRecord> in_use;
  };
  StatusOr<AttachRecord> AttachOver(const AttachSpec& spec, const std::optional<AttachRecord>& existing);
  StatusOr<EarlierAttach> ExamineEarlierAttach(const AttachSpec& spec, const std::optional<AttachRecord>& existing);
  // A reused attachment gets the spec's annotations in one write, as a
  // new one gets them in the write that marks it attached.
  StatusOr<AttachRecord> Reuse(AttachRecord record, const AttachSpec& spec);
  Status DetachRecorded(const std::string& volume_id);
  // Disconnects and removes the record after a failed attach; the first
  // error is what the caller sees, cleanup trouble is logged.
  void Abandon(const AttachRecord& record, const Status& why);
  // Abandon for a fresh attach; for a re-attach of a volume that was in use,
  // restore its previous record and leave its devices alone.
  void KeepOrAbandon(const std::optional<AttachRecord>& in_use, const AttachRecord& record, const Status& why);

  AttachRecordStore store_;
  std::unique_ptr<Connector> connector_;
  FaultHook fault_hook_;
};

// True when `record` describes the same LUN, through the same portals, as `spec`.
bool RecordMatchesSpec(const AttachRecord& record, const AttachSpec& spec);

}  // namespace blockcsi
