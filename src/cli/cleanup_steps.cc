#include "cli/cleanup_steps.h"

#include "attach/attacher_factory.h"
#include "common/mounter.h"
#include "contract/initiator.h"
#include "node/volume_crypt.h"

namespace blockcsi::cli {
namespace {

// The node id only shapes new logins (Connect: the iSCSI initiator name, the
// rbd fencing id); cleanup never connects, so a record that names none
// (a krbd record has no initiator) gets this stand-in.
constexpr char kCleanupNodeId[] = "blockctl-cleanup";

AttacherOptions OptionsFor(const NodeSnapshot& snapshot, const std::string& connector, const AttachRecord* record,
                           const CleanupSeams& seams) {
  AttacherOptions o;
  o.connector = connector;
  o.state_dir = snapshot.state_dir;
  o.node_id = kCleanupNodeId;
  if (record != nullptr) {
    if (auto id = NodeIdFromInitiatorIqn(record->initiator_iqn); id && ValidateNodeId(*id).ok()) o.node_id = *id;
  }
  o.executor = seams.executor;
  o.host_fs = seams.host_fs;
  o.state_files = seams.state_files;
  // One volume only: no reconcile, which would stop or adopt the others.
  o.adopt = false;
  return o;
}

}  // namespace

Status ApplyCleanupStep(const NodeSnapshot& snapshot, const CleanupStep& step, const CleanupSeams& seams) {
  using Kind = CleanupStep::Kind;
  switch (step.kind) {
    case Kind::kUnmount: {
      Status st = MakeLibmountMounter()->Unmount(step.target);
      return st.code() == StatusCode::kNotFound ? OkStatus() : st;
    }
    case Kind::kDetachRecord: {
      const AttachRecord* record = nullptr;
      for (const auto& r : snapshot.records) {
        if (r.volume_id == step.target) record = &r;
      }
      // The record's own connector name picks the connector family: "iscsi"
      // is the kernel one, which routes by the record's transport (iSCSI
      // through open-iscsi, rbd through krbd), as in the plugin.
      std::string connector = record != nullptr ? record->connector : "userspace";
      BLOCKCSI_ASSIGN_OR_RETURN(std::unique_ptr<VolumeAttacher> attacher,
                                MakeVolumeAttacher(OptionsFor(snapshot, connector, record, seams)));
      return attacher->Detach(step.target);
    }
    case Kind::kStopBridge: {
      AttachRecord record;
      record.volume_id = step.target;
      record.connector = "userspace";
      for (const auto& b : snapshot.bridges) {
        if (b.volume_id != step.target) continue;
        record.connector_state = {
            {"bridge_dir", b.dir}, {"control_socket", b.control_socket}, {"mountpoint", b.mountpoint}};
      }
      BLOCKCSI_ASSIGN_OR_RETURN(std::unique_ptr<Connector> connector,
                                MakeConnector(OptionsFor(snapshot, "userspace", nullptr, seams)));
      return connector->Disconnect(record);
    }
    case Kind::kDetachLoop: {
      auto executor = seams.executor ? seams.executor : std::shared_ptr<Executor>(MakeProcessExecutor());
      auto r = RunChecked(*executor, Command("losetup").Arg("-d").Arg(step.target).Timeout(std::chrono::seconds(60)));
      return r.status();
    }
    case Kind::kCloseMapping: {
      // Before the detach of its volume (PlanCleanup's order): the mapping
      // is flushed and let go while its device is still there.
      auto executor = seams.executor ? seams.executor : std::shared_ptr<Executor>(MakeProcessExecutor());
      return CloseLuks(*executor, *seams.host_fs, step.subject, step.target);
    }
    case Kind::kManual:
      return OkStatus();
  }
  return Internal("unknown cleanup step");
}

}  // namespace blockcsi::cli
