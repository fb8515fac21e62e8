// VolumeAttacher: the attach layer's face to the node service. It turns an
// AttachSpec into a verified local block device and back, keeping a
// crash-safe attach record per volume (<state-dir>/attachments/<id>.json,
// mode 0600, no secrets) so that a retry or a restarted plugin finds and
// reuses — or cleans up — what an earlier attempt left.
//
// Who serialises what: the caller holds a volume for the whole of each
// Attach, Detach, Annotate and Rescan of it (the node service: its
// per-volume in-flight guard, the one lock per volume, which also answers a
// second CSI call with ABORTED; blockctl: it runs alone on the volume it
// cleans up, the plugin's adoption runs at start before any call). The
// attacher takes no lock of its own per volume, so one operation costs one
// serialisation. Get, List and Check only read and may run beside an
// operation (they see the record before or after its write, never a torn
// one). Different volumes proceed in parallel: implementations are
// thread-safe for them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attach/attach_spec.h"
#include "common/status.h"

namespace blockcsi {

struct AttachRecord {
  std::string volume_id;
  // The connector that attached it: "iscsi" (the kernel path, also for rbd
  // through krbd: record.transport tells which) or "userspace".
  std::string connector;
  std::string transport;  // "iscsi" | "rbd"
  std::vector<std::string> portals;
  std::string target_iqn;
  int lun = 0;
  std::string expected_serial;
  std::string expected_wwn;
  std::string initiator_iqn;
  // Transport "rbd": where the image is (never the cephx key).
  std::string rbd_pool;
  std::string rbd_image;
  std::string rbd_monitors;
  std::string rbd_user;
  bool read_only = false;
  // A LUN blockcsi did not create (a static PV): shown as such
  // by blockctl; the identity fields may be empty.
  bool static_volume = false;
  // "attaching" (written before login) → "attached" (device known and verified).
  std::string state;
  std::string device_path;  // e.g. /dev/loop3, /dev/sdc, /dev/dm-2; empty until known
  uint64_t size_bytes = 0;
  // Connector-private facts (bridge pid and control socket, loop device,
  // session ids) needed to find and undo the attachment after a restart.
  std::map<std::string, std::string> connector_state;
  // Node-service facts (staging path, fs type, access type), set through
  // Annotate so that one record describes the whole volume on this node.
  std::map<std::string, std::string> annotations;
};

// The record of a first attach of `spec` through `connector`: what the spec
// says, with state and device still empty. Every attacher writes it first.
AttachRecord NewAttachRecord(const AttachSpec& spec, const std::string& connector);

struct AttachHealth {
  bool abnormal = false;
  std::string message;  // why, for VolumeCondition and blockctl
};

class VolumeAttacher {
 public:
  virtual ~VolumeAttacher() = default;

  // Attaches and verifies the LUN's serial/WWN against the spec. Idempotent:
  // an existing healthy attachment of the same volume is reused. Identity
  // mismatch → detach, FAILED_PRECONDITION. CHAP rejected → PERMISSION_DENIED
  // or FAILED_PRECONDITION with a clear message; unreachable → UNAVAILABLE.
  // The record returned (and stored) carries spec.annotations, also when an
  // attachment is reused.
  // `earlier`: the volume's record as the caller read it (Get) while
  // holding the volume, nullopt when it has none: the caller decided on it
  // already, so the attacher does not read it again.
  virtual StatusOr<AttachRecord> Attach(const AttachSpec& spec, const std::optional<AttachRecord>& earlier) = 0;
  // The same for a caller that has not read the record.
  StatusOr<AttachRecord> Attach(const AttachSpec& spec) {
    auto earlier = Get(spec.volume_id);
    if (!earlier.ok() && earlier.status().code() != StatusCode::kNotFound) return earlier.status();
    return Attach(spec, earlier.ok() ? std::optional<AttachRecord>(std::move(*earlier)) : std::nullopt);
  }
  // Undoes everything the record names; each step tolerates "already gone";
  // removes the record last. No record → OK.
  virtual Status Detach(const std::string& volume_id) = 0;
  virtual StatusOr<AttachRecord> Get(const std::string& volume_id) = 0;  // NOT_FOUND without record
  virtual StatusOr<std::vector<AttachRecord>> List() = 0;
  // Sets annotations[key] = value (empty value erases) and persists the record
  // (never torn; after a power loss it may be the version before: annotations
  // only describe mounts, which a power loss ends).
  virtual Status Annotate(const std::string& volume_id, const std::string& key, const std::string& value) = 0;
  // Re-reads the LUN's capacity (userspace: READ CAPACITY + loop resize;
  // kernel: session rescan) and returns the new device size.
  virtual StatusOr<uint64_t> Rescan(const std::string& volume_id) = 0;
  // Device present, session/bridge alive, identity unchanged.
  virtual AttachHealth Check(const std::string& volume_id) = 0;
};

}  // namespace blockcsi
