#include "node/node_wiring.h"

#include "attach/attacher_factory.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "node/fault_points.h"

namespace blockcsi {

StatusOr<std::shared_ptr<NodeService>> BuildNodeService(const NodeWiring& wiring) {
  AttacherOptions attacher_options;
  attacher_options.connector = wiring.connector;
  attacher_options.state_dir = wiring.state_dir;
  attacher_options.node_id = wiring.node_id;
  attacher_options.bridge_io_timeout = wiring.bridge_io_timeout;
  attacher_options.bridge_cgroup = wiring.bridge_cgroup;
  if (!wiring.ceph_conf.empty()) attacher_options.ceph_conf = wiring.ceph_conf;
  attacher_options.rbd_map_options = wiring.rbd_map_options;
  attacher_options.rbd_command_timeout = wiring.rbd_timeout;
  attacher_options.step_hook = [](std::string_view step) { FaultPoint(step); };
  auto attacher = MakeVolumeAttacher(attacher_options);
  if (!attacher.ok()) return attacher.status().WithContext("node service: attacher");
  // For the node admin's tools (blockctl check-target) when the plugin is
  // down: which node this state belongs to. Not fatal: nothing here needs it.
  if (Status st = WriteFileAtomically(wiring.state_dir + "/" + kNodeIdFileName, wiring.node_id + "\n"); !st.ok()) {
    LogWarn("cannot record the node id in the state dir", {{"error", st.ToString()}});
  }

  NodeServiceOptions options;
  options.node_id = wiring.node_id;
  options.max_volumes_per_node = wiring.max_volumes_per_node;
  options.attacher = std::shared_ptr<VolumeAttacher>(std::move(*attacher));
  options.mounter = MakeLibmountMounter();
  options.probe = MakeBlkidProbe();
  options.executor = MakeProcessExecutor();
  options.host = MakeRealNodeHost();
  options.fs_minimum_bytes = wiring.fs_minimum_bytes;
  auto node = std::make_shared<NodeService>(std::move(options));
  node->LogAdoptedVolumes();
  return node;
}

}  // namespace blockcsi
