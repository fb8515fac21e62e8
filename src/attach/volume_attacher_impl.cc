#include "attach/volume_attacher_impl.h"

#include <optional>

#include "common/logging.h"
#include "common/metrics.h"

namespace blockcsi {

bool RecordMatchesSpec(const AttachRecord& r, const AttachSpec& s) {
  return r.transport == s.transport && r.portals == s.portals && r.target_iqn == s.target_iqn && r.lun == s.lun &&
         r.expected_serial == s.expected_serial && r.expected_wwn == s.expected_wwn &&
         r.initiator_iqn == s.initiator_iqn && r.read_only == s.read_only && r.static_volume == s.static_volume &&
         r.rbd_pool == s.rbd.pool && r.rbd_image == s.rbd.image && r.rbd_monitors == s.rbd.monitors &&
         r.rbd_user == s.rbd.user;
}

// What the volume is on the storage side, for messages and logs.
std::string DescribeSource(const std::string& transport, const std::string& target_iqn, int lun,
                           const std::string& rbd_pool, const std::string& rbd_image) {
  if (transport == "rbd") return "rbd image " + rbd_pool + "/" + rbd_image;
  return target_iqn + " lun " + std::to_string(lun);
}

VolumeAttacherImpl::VolumeAttacherImpl(std::string state_dir, std::shared_ptr<const Host> state_files,
                                       std::unique_ptr<Connector> connector, FaultHook fault_hook)
    : store_(std::move(state_dir), std::move(state_files), fault_hook),
      connector_(std::move(connector)),
      fault_hook_(std::move(fault_hook)) {}

Status VolumeAttacherImpl::Start() {
  BLOCKCSI_RETURN_IF_ERROR(store_.Init());
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<AttachRecord> records, store_.List());
  std::vector<AttachRecord> before = records;
  Status st = connector_->Reconcile(&records);
  if (!st.ok()) LogWarn("reconciling attach records with the node", {{"error", st.ToString()}});
  for (size_t i = 0; i < records.size() && i < before.size(); ++i) {
    if (AttachRecordToJson(records[i]) != AttachRecordToJson(before[i])) {
      BLOCKCSI_RETURN_IF_ERROR(store_.Put(records[i]));
    }
  }
  for (const auto& r : records) {
    LogInfo("attach record found at start",
            {{"volume_id", r.volume_id}, {"state", r.state}, {"device", r.device_path}, {"connector", r.connector}});
  }
  return OkStatus();
}

void VolumeAttacherImpl::Abandon(const AttachRecord& record, const Status& why) {
  Status st = connector_->Disconnect(record);
  if (!st.ok()) {
    // The record stays so that NodeUnstage (or a retry) can finish the cleanup.
    LogError("cleanup after a failed attach is incomplete; keeping the attach record",
             {{"volume_id", record.volume_id}, {"attach_error", why.ToString()}, {"cleanup_error", st.ToString()}});
    return;
  }
  Status rm = store_.Remove(record.volume_id);
  if (!rm.ok()) LogError("cannot remove attach record", {{"volume_id", record.volume_id}, {"error", rm.ToString()}});
}

void VolumeAttacherImpl::KeepOrAbandon(const std::optional<AttachRecord>& in_use, const AttachRecord& record,
                                       const Status& why) {
  if (!in_use) {
    Abandon(record, why);
    return;
  }
  LogError("re-attaching an attached volume failed; keeping its attachment and record for unstage",
           {{"volume_id", record.volume_id}, {"error", why.ToString()}});
  Status put = store_.Put(*in_use);
  if (!put.ok()) LogError("cannot restore attach record", {{"volume_id", record.volume_id}, {"error", put.ToString()}});
}

AttachRecord NewAttachRecord(const AttachSpec& spec, const std::string& connector) {
  AttachRecord record;
  record.volume_id = spec.volume_id;
  record.connector = connector;
  record.transport = spec.transport;
  record.portals = spec.portals;
  record.target_iqn = spec.target_iqn;
  record.lun = spec.lun;
  record.expected_serial = spec.expected_serial;
  record.expected_wwn = spec.expected_wwn;
  record.initiator_iqn = spec.initiator_iqn;
  record.rbd_pool = spec.rbd.pool;
  record.rbd_image = spec.rbd.image;
  record.rbd_monitors = spec.rbd.monitors;
  record.rbd_user = spec.rbd.user;
  record.read_only = spec.read_only;
  record.static_volume = spec.static_volume;
  return record;
}

StatusOr<VolumeAttacherImpl::EarlierAttach> VolumeAttacherImpl::ExamineEarlierAttach(
    const AttachSpec& spec, const std::optional<AttachRecord>& existing) {
  EarlierAttach out;
  if (!existing) return out;
  if (!RecordMatchesSpec(*existing, spec) || existing->connector != connector_->family()) {
    if (existing->state == kAttachStateAttached) {
      return FailedPrecondition("volume \"" + spec.volume_id + "\" is already attached on this node as " +
                                DescribeSource(existing->transport, existing->target_iqn, existing->lun,
                                               existing->rbd_pool, existing->rbd_image) +
                                " through " + existing->connector + "; detach it first");
    }
    // A half-done attempt of another shape: undo it before starting over.
    LogWarn("cleaning up an earlier, different attach attempt", {{"volume_id", spec.volume_id}});
    BLOCKCSI_RETURN_IF_ERROR(connector_->Disconnect(*existing));
    BLOCKCSI_RETURN_IF_ERROR(store_.Remove(spec.volume_id));
    return out;
  }
  out.resume = *existing;
  if (existing->state != kAttachStateAttached) return out;
  AttachHealth health = connector_->Check(*existing);
  if (!health.abnormal) {
    auto identity = connector_->ReadIdentity(*existing);
    if (identity.ok() && VerifyLunIdentity(spec.volume_id, spec.expected_serial, spec.expected_wwn, *identity).ok()) {
      LogInfo("volume already attached; reusing", {{"volume_id", spec.volume_id}, {"device", existing->device_path}});
      out.reuse = *existing;
      return out;
    }
  }
  LogWarn("existing attachment is not healthy; attaching again",
          {{"volume_id", spec.volume_id}, {"reason", health.message}});
  // Mounts and pods may still use it, so a failure must not tear it down or
  // drop its record (NodeUnstage needs the record to clean up); the
  // previous record is put back instead.
  out.in_use = *existing;
  return out;
}

StatusOr<AttachRecord> VolumeAttacherImpl::Reuse(AttachRecord record, const AttachSpec& spec) {
  bool changed = false;
  for (const auto& [key, value] : spec.annotations) {
    std::string& held = record.annotations[key];
    changed = changed || held != value;
    held = value;
  }
  if (changed) BLOCKCSI_RETURN_IF_ERROR(store_.Put(record));
  return record;
}

StatusOr<AttachRecord> VolumeAttacherImpl::Attach(const AttachSpec& spec, const std::optional<AttachRecord>& earlier) {
  if (earlier && earlier->volume_id != spec.volume_id) {
    return Internal("attach of volume \"" + spec.volume_id + "\" was handed the record of \"" + earlier->volume_id +
                    "\"");
  }
  auto attached = AttachOver(spec, earlier);
  RecordOperation("attach", attached.status());
  return attached;
}

StatusOr<AttachRecord> VolumeAttacherImpl::AttachOver(const AttachSpec& spec,
                                                      const std::optional<AttachRecord>& existing) {
  BLOCKCSI_ASSIGN_OR_RETURN(EarlierAttach earlier, ExamineEarlierAttach(spec, existing));
  if (earlier.reuse) return Reuse(std::move(*earlier.reuse), spec);
  const std::optional<AttachRecord>& in_use = earlier.in_use;
  AttachRecord record = earlier.resume ? *earlier.resume : NewAttachRecord(spec, connector_->family());
  record.state = kAttachStateAttaching;
  connector_->Prepare(spec, &record);
  // Written before anything exists on the node, so that a crash from here
  // on leaves a record that names what to clean up.
  BLOCKCSI_RETURN_IF_ERROR(store_.Put(record));

  LogInfo("attaching volume",
          {{"volume_id", spec.volume_id},
           {"connector", connector_->family()},
           {"source", DescribeSource(spec.transport, spec.target_iqn, spec.lun, spec.rbd.pool, spec.rbd.image)}});
  auto connected = connector_->Connect(spec, &record);
  if (!connected.ok()) {
    KeepOrAbandon(in_use, record, connected.status());
    return connected.status();
  }
  if (Status st = FaultPoint("node.stage.after-connect", fault_hook_); !st.ok()) {
    KeepOrAbandon(in_use, record, st);
    return st;
  }

  Status identity = VerifyLunIdentity(spec.volume_id, spec.expected_serial, spec.expected_wwn, connected->identity);
  if (!identity.ok()) {
    LogError("WRONG LUN: the attached device is not the published volume; detaching it and refusing to use it",
             {{"volume_id", spec.volume_id},
              {"device", connected->device_path},
              {"target", spec.target_iqn},
              {"lun", std::to_string(spec.lun)},
              {"error", identity.message()}});
    KeepOrAbandon(in_use, record, identity);
    return identity;
  }
  record.device_path = connected->device_path;
  record.size_bytes = connected->size_bytes;
  record.state = kAttachStateAttached;
  for (const auto& [key, value] : spec.annotations) record.annotations[key] = value;
  // The directory is not synced after this write (one fsync fewer per
  // attach): the "attaching" record written above is durable and
  // names everything that outlives a reboot (connector_state from Prepare:
  // the iscsi iface, the krbd key file, the bridge dir); what this one adds
  // (device, session, bridge pid, staged facts) does not outlive one. If a
  // power loss rolls the rename back, the restaged volume resumes from
  // "attaching" as after a crash inside Connect. The temp file is still
  // synced: never a torn record.
  Status put = store_.Put(record, /*sync_directory=*/false);
  if (!put.ok()) {
    Abandon(record, put);
    return put;
  }
  LogInfo("volume attached", {{"volume_id", spec.volume_id},
                              {"device", record.device_path},
                              {"size_bytes", std::to_string(record.size_bytes)},
                              {"identity", connected->identity.Describe()}});
  return record;
}

Status VolumeAttacherImpl::Detach(const std::string& volume_id) {
  Status st = DetachRecorded(volume_id);
  RecordOperation("detach", st);
  return st;
}

Status VolumeAttacherImpl::DetachRecorded(const std::string& volume_id) {
  auto record = store_.Get(volume_id);
  if (!record.ok()) {
    if (record.status().code() == StatusCode::kNotFound) return OkStatus();
    return record.status();
  }
  LogInfo("detaching volume", {{"volume_id", volume_id}, {"device", record->device_path}, {"state", record->state}});
  BLOCKCSI_RETURN_IF_ERROR(connector_->Disconnect(*record));
  BLOCKCSI_RETURN_IF_ERROR(store_.Remove(volume_id));
  LogInfo("volume detached", {{"volume_id", volume_id}});
  return OkStatus();
}

StatusOr<AttachRecord> VolumeAttacherImpl::Get(const std::string& volume_id) { return store_.Get(volume_id); }

StatusOr<std::vector<AttachRecord>> VolumeAttacherImpl::List() { return store_.List(); }

Status VolumeAttacherImpl::Annotate(const std::string& volume_id, const std::string& key, const std::string& value) {
  BLOCKCSI_ASSIGN_OR_RETURN(AttachRecord record, store_.Get(volume_id));
  if (value.empty()) {
    record.annotations.erase(key);
  } else {
    record.annotations[key] = value;
  }
  // The annotations name the volume's mounts (publish targets), and a power
  // loss ends every mount: a version of the record from before the last
  // rename describes a machine that is just as gone. So the directory is not
  // synced (the file still is, so the record is never torn); a plugin crash
  // does not undo a rename. This halves the cost a publish adds.
  return store_.Put(record, /*sync_directory=*/false);
}

StatusOr<uint64_t> VolumeAttacherImpl::Rescan(const std::string& volume_id) {
  BLOCKCSI_ASSIGN_OR_RETURN(AttachRecord record, store_.Get(volume_id));
  if (record.state != kAttachStateAttached) {
    return FailedPrecondition("volume \"" + volume_id + "\" is not attached (state " + record.state + ")");
  }
  BLOCKCSI_ASSIGN_OR_RETURN(uint64_t size, connector_->Rescan(&record));
  record.size_bytes = size;
  BLOCKCSI_RETURN_IF_ERROR(store_.Put(record));
  return size;
}

AttachHealth VolumeAttacherImpl::Check(const std::string& volume_id) {
  auto record = store_.Get(volume_id);
  if (!record.ok()) return {true, record.status().message()};
  if (record->state != kAttachStateAttached) return {true, "attachment is incomplete (state " + record->state + ")"};
  AttachHealth health = connector_->Check(*record);
  if (health.abnormal) return health;
  auto identity = connector_->ReadIdentity(*record);
  if (!identity.ok()) return {true, "cannot read the LUN's identity: " + identity.status().message()};
  Status st = VerifyLunIdentity(volume_id, record->expected_serial, record->expected_wwn, *identity);
  if (!st.ok()) return {true, st.message()};
  return {};
}

}  // namespace blockcsi
