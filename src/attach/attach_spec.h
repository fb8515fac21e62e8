// AttachSpec: everything a connector needs to attach one volume on this
// node, parsed and strictly validated from publish_context, the node-stage
// secrets and this node's initiator name. A value type.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/chap.h"
#include "common/status.h"

namespace blockcsi {

// Where an RBD image lives and who opens it (transport "rbd"). The key is
// a secret: it comes from the node-stage secrets, reaches librbd or the
// kernel through stdin or a 0600 file, and is never logged or persisted.
struct RbdSource {
  std::string pool;
  std::string image;
  std::string image_id;  // rbd_get_id(); the image's identity
  // mon_host as the controller's librados saw it (e.g.
  // "[v2:10.0.0.1:3300/0,v1:10.0.0.1:6789/0]"); empty: the node's ceph.conf.
  std::string monitors;
  std::string user;  // cephx id without "client."
  std::string key;   // cephx key (base64); empty: the node's keyring
};

struct AttachSpec {
  std::string volume_id;
  std::string transport = "iscsi";   // publish_context::kTransport
  std::vector<std::string> portals;  // validated "host:port" / "[v6]:port"
  std::string target_iqn;            // validated IQN or EUI (RFC 3720)
  int lun = 0;
  std::string expected_serial;  // VPD 0x80
  std::string expected_wwn;     // NAA from VPD 0x83, lower-case hex
  bool read_only = false;
  std::string initiator_iqn;  // this node's, see initiator.h
  ChapCredentials chap;       // from node-stage secrets when chapRequired
  // A LUN blockcsi did not create (publish_context static=true, see
  // static_volume.h): serial/wwn may be empty, and initiator_iqn may be the
  // PV's initiatorName instead of this node's.
  bool static_volume = false;
  // Transport "rbd" only; portals/target_iqn/lun stay empty and
  // expected_serial carries the image id, so the shared identity check
  // (VerifyLunIdentity against what the connector reads) covers both.
  RbdSource rbd;
  // Set on the record in the same durable write that marks it attached
  // (the node service's staged facts), so that a stage does not write and
  // fsync the record once more before it formats or mounts.
  std::map<std::string, std::string> annotations;
};

// INVALID_ARGUMENT with a precise message naming the volume and the key for
// any missing or malformed value; never echoes a secret.
StatusOr<AttachSpec> ParseAttachSpec(const std::string& volume_id,
                                     const std::map<std::string, std::string>& publish_context,
                                     const std::map<std::string, std::string>& secrets,
                                     const std::string& initiator_iqn);

}  // namespace blockcsi
