#include "attach/attacher_factory.h"

#include <map>

#include "attach/iscsi_connector.h"
#include "attach/krbd_connector.h"
#include "attach/transport_router.h"
#include "attach/userspace_connector.h"
#include "attach/volume_attacher_impl.h"
#include "bridge/bridge_cgroup.h"
#include "contract/initiator.h"

namespace blockcsi {

StatusOr<std::unique_ptr<Connector>> MakeConnector(const AttacherOptions& options) {
  if (options.state_dir.empty()) return InvalidArgument("attacher: state dir is empty");
  BLOCKCSI_RETURN_IF_ERROR(ValidateNodeId(options.node_id));
  if (!options.bridge_cgroup.empty() && options.connector != "userspace") {
    return InvalidArgument(
        "--bridge-cgroup applies to --connector userspace only (the kernel connector has no bridges)");
  }
  std::shared_ptr<Executor> executor = options.executor ? options.executor : MakeProcessExecutor();
  if (!options.host_fs || !options.state_files) {
    return InvalidArgument("attacher: the host seams (host_fs, state_files) are required");
  }
  const std::shared_ptr<Host>& host_fs = options.host_fs;
  std::shared_ptr<Clock> clock = options.clock ? options.clock : RealClock();
  std::unique_ptr<Connector> connector;
  if (options.connector == "userspace") {
    UserspaceConnectorOptions o;
    o.state_dir = options.state_dir;
    o.bridge_dir = options.bridge_dir;
    o.host_fs = host_fs;
    o.state_files = options.state_files;
    o.clock = clock;
    o.io_timeout = options.bridge_io_timeout;
    o.start_timeout = options.bridge_start_timeout;
    o.sessions_per_volume = options.bridge_sessions;
    o.node_id = options.node_id;
    o.ceph_conf = options.ceph_conf;
    if (!options.bridge_cgroup.empty()) {
      // Checked (and created) before any bridge is adopted or started: a
      // wrong path fails the plugin's start, not every later NodeStage.
      BLOCKCSI_RETURN_IF_ERROR(PrepareBridgeCgroup(*host_fs, options.bridge_cgroup));
      o.bridge_cgroup = options.bridge_cgroup;
    }
    connector = MakeUserspaceConnector(std::move(o));
  } else if (options.connector == "kernel" || options.connector == "iscsi") {
    IscsiConnectorOptions o;
    o.executor = executor;
    o.host_fs = host_fs;
    o.clock = clock;
    o.iface = options.iscsi_iface;
    o.nodes_dir = options.iscsi_nodes_dir;
    o.initiator_iqn = InitiatorIqnForNode(options.node_id);
    o.login_timeout = options.login_timeout;
    o.login_retries = options.login_retries;
    o.device_wait = options.device_wait;
    o.multipath_wait = options.multipath_wait;
    KrbdConnectorOptions k;
    k.executor = executor;
    k.host_fs = host_fs;
    k.state_files = options.state_files;
    k.state_dir = options.state_dir;
    k.ceph_conf = options.ceph_conf;
    k.command_timeout = options.rbd_command_timeout;
    k.map_options = options.rbd_map_options;
    // The kernel connector family: records keep the name "iscsi" whatever
    // their transport (see transport_router.h), so iSCSI records of earlier
    // plugin versions stay valid.
    std::map<std::string, std::unique_ptr<Connector>> routes;
    routes["iscsi"] = MakeIscsiConnector(std::move(o));
    routes["rbd"] = MakeKrbdConnector(std::move(k));
    connector = MakeTransportRouter("iscsi", std::move(routes));
  } else {
    return InvalidArgument("attacher: unknown connector \"" + options.connector +
                           "\" (want kernel, iscsi or userspace)");
  }
  return connector;
}

StatusOr<std::unique_ptr<VolumeAttacher>> MakeVolumeAttacher(const AttacherOptions& options) {
  BLOCKCSI_ASSIGN_OR_RETURN(std::unique_ptr<Connector> connector, MakeConnector(options));
  auto attacher = std::make_unique<VolumeAttacherImpl>(options.state_dir, options.state_files, std::move(connector),
                                                       options.fault_hook);
  if (options.adopt) BLOCKCSI_RETURN_IF_ERROR(attacher->Start());
  return std::unique_ptr<VolumeAttacher>(std::move(attacher));
}

}  // namespace blockcsi
