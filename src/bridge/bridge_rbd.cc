// Bridge::OpenRbd: the bridge's RBD side. librbd/librados are loaded only
// here, on first use (rbd_bridge_transport.cc, common/ceph_lazy.h), so an
// iSCSI bridge never maps them.
#include "bridge/bridge_internal.h"
#include "bridge/rbd_bridge_transport.h"

namespace blockcsi::bridge_internal {

StatusOr<std::unique_ptr<BridgeTransport>> Bridge::OpenRbd(const std::string& key) {
  RbdTransportOptions o;
  o.volume_id = args_.volume_id;
  o.pool = args_.rbd_pool;
  o.image = args_.rbd_image;
  o.image_id = args_.expected_serial;
  o.monitors = args_.ceph_monitors;
  o.ceph_conf = args_.ceph_conf;
  o.user = args_.ceph_user;
  o.key = key;
  o.node_id = args_.node_id;
  o.read_only = args_.read_only;
  o.io_timeout = std::chrono::seconds(args_.io_timeout_s);
  // The transport verifies the image id itself, before it locks the image
  // or registers this client: a wrong image is never touched.
  auto t = RbdBridgeTransport::Open(o);
  if (!t.ok()) {
    if (t.status().code() == StatusCode::kFailedPrecondition) {
      LogError("refusing to expose the rbd image", {{"volume_id", args_.volume_id}, {"error", t.status().message()}});
    }
    return t.status();
  }
  LogInfo("bridge opened rbd image", {{"volume_id", args_.volume_id},
                                      {"image", (*t)->location()},
                                      {"client", (*t)->client_addresses()},
                                      {"read_only", args_.read_only ? "true" : "false"},
                                      {"size_bytes", std::to_string((*t)->size_bytes())}});
  BLOCKCSI_ASSIGN_OR_RETURN(identity_, (*t)->ReadIdentity());
  BLOCKCSI_RETURN_IF_ERROR(VerifyLunIdentity(args_.volume_id, args_.expected_serial, "", identity_));
  return std::unique_ptr<BridgeTransport>(std::move(*t));
}

}  // namespace blockcsi::bridge_internal
