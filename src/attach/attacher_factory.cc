#include "attach/attacher_factory.h"

#include "attach/initiator.h"
#include "attach/iscsi_connector.h"
#include "attach/userspace_connector.h"
#include "attach/volume_attacher_impl.h"

namespace blockcsi {

StatusOr<std::unique_ptr<VolumeAttacher>> MakeVolumeAttacher(const AttacherOptions& options) {
  if (options.state_dir.empty()) return InvalidArgument("attacher: state dir is empty");
  BLOCKCSI_RETURN_IF_ERROR(ValidateNodeId(options.node_id));
  std::shared_ptr<Executor> executor = options.executor ? options.executor : MakeProcessExecutor();
  std::shared_ptr<Filesystem> host_fs = options.host_fs ? options.host_fs : MakeRootedFilesystem("");
  std::shared_ptr<Clock> clock = options.clock ? options.clock : RealClock();
  std::unique_ptr<Connector> connector;
  if (options.connector == "userspace") {
    UserspaceConnectorOptions o;
    o.state_dir = options.state_dir;
    o.blockcsi_binary = options.blockcsi_binary.empty() ? "/proc/self/exe" : options.blockcsi_binary;
    o.host_fs = host_fs;
    o.io_timeout = options.bridge_io_timeout;
    o.start_timeout = options.bridge_start_timeout;
    o.sessions_per_volume = options.bridge_sessions;
    connector = MakeUserspaceConnector(std::move(o));
  } else if (options.connector == "iscsi") {
    IscsiConnectorOptions o;
    o.executor = executor;
    o.host_fs = host_fs;
    o.clock = clock;
    o.iface = options.iscsi_iface;
    o.initiator_iqn = InitiatorIqnForNode(options.node_id);
    o.login_timeout = options.login_timeout;
    o.login_retries = options.login_retries;
    o.device_wait = options.device_wait;
    o.multipath_wait = options.multipath_wait;
    connector = MakeIscsiConnector(std::move(o));
  } else {
    return InvalidArgument("attacher: unknown connector \"" + options.connector + "\" (want iscsi or userspace)");
  }
  auto attacher = std::make_unique<VolumeAttacherImpl>(options.state_dir, std::move(connector), options.step_hook);
  BLOCKCSI_RETURN_IF_ERROR(attacher->Start());
  return std::unique_ptr<VolumeAttacher>(std::move(attacher));
}

}  // namespace blockcsi
