// Connector: one way of turning an AttachSpec into a local block device
// (open-iscsi kernel initiator, userspace libiscsi bridge, later krbd). The
// VolumeAttacher facade owns the records and the identity check; connectors
// own the mechanics and put whatever they need to undo their work into
// record->connector_state. Implementations must be thread-safe for
// different volumes; the facade serialises calls for one volume.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attach/attach_spec.h"
#include "attach/volume_attacher.h"
#include "common/lun_identity.h"
#include "common/status.h"

namespace blockcsi {

struct ConnectResult {
  std::string device_path;
  uint64_t size_bytes = 0;
  LunIdentity identity;  // as read from the attached LUN (VPD 0x80/0x83)
};

class Connector {
 public:
  virtual ~Connector() = default;
  // The connector family this one belongs to: stamped on each record it
  // makes (record.connector) and required of a record it attaches again.
  // "iscsi" for the kernel family (open-iscsi, and krbd behind the
  // TransportRouter: record.transport tells which), "userspace" for the
  // bridge; a connector used on its own is its own family.
  virtual std::string family() const = 0;

  // Called before the "attaching" record is first written: records the
  // names (sockets, mount points, iface) under which this attempt's
  // leftovers can be found after a crash. Creates nothing.
  virtual void Prepare(const AttachSpec& spec, AttachRecord* record) = 0;
  // Attaches (reusing what an earlier attempt left, when it is healthy) and
  // reads the LUN's identity. May update record->connector_state. On error
  // the facade calls Disconnect with the record.
  virtual StatusOr<ConnectResult> Connect(const AttachSpec& spec, AttachRecord* record) = 0;
  // Undoes everything the record names; each step tolerates "already gone".
  virtual Status Disconnect(const AttachRecord& record) = 0;
  // Re-reads the identity of the attached LUN.
  virtual StatusOr<LunIdentity> ReadIdentity(const AttachRecord& record) = 0;
  virtual StatusOr<uint64_t> Rescan(AttachRecord* record) = 0;
  virtual AttachHealth Check(const AttachRecord& record) = 0;
  // At plugin start, with every record: reports and cleans what no record
  // names (orphan bridges, sessions of ours), and refreshes records whose
  // live state moved (returned for rewriting).
  virtual Status Reconcile(std::vector<AttachRecord>* records) = 0;
};

}  // namespace blockcsi
