#include "node/node_wiring.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "attach/attacher_factory.h"
#include "common/atomic_file.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/mounter.h"
#include "node/fault_points.h"
#include "node/staged_facts.h"

namespace blockcsi {
namespace {

// Staged and published volumes are read from their sources at each scrape
// (the attach records and the mount table), never counted as calls pass:
// a count kept in memory would be wrong after a restart or a lost call.
// A volume's publishes are the mounts of its device other than its staging
// mount (filesystem volumes), plus binds of its device node (block volumes,
// which have no staging mount).
void CollectNodeVolumes(VolumeAttacher& attacher, Mounter& mounter, MetricsRegistry& registry) {
  auto& staged = registry.Gauge("blockcsi_node_staged_volumes", "Volumes staged on this node (NodeStageVolume done)");
  auto& attached = registry.Gauge("blockcsi_node_attached_volumes",
                                  "Volumes attached on this node (an attach record exists), staged or not");
  auto& published = registry.Gauge("blockcsi_node_published_volumes",
                                   "Publishes (NodePublishVolume target paths) of this node's staged volumes");
  auto records = attacher.List();
  auto table = mounter.List();
  if (!records.ok() || !table.ok()) return;  // the gauges keep their last reading
  size_t staged_count = 0;
  size_t published_count = 0;
  for (const auto& record : *records) {
    if (record.annotations.count(kStagedAnnotation) == 0) continue;
    ++staged_count;
    struct stat st {};
    if (record.device_path.empty() || ::stat(record.device_path.c_str(), &st) != 0) continue;
    std::string major_minor = std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev));
    std::string node_root = record.device_path.substr(record.device_path.rfind('/'));
    size_t fs_mounts = 0;
    for (const auto& entry : *table) {
      if (entry.fs_type == "devtmpfs" && entry.root == node_root) ++published_count;
      if (entry.fs_type != "devtmpfs" && entry.major_minor == major_minor) ++fs_mounts;
    }
    if (fs_mounts > 0) published_count += fs_mounts - 1;
  }
  staged.Set({}, static_cast<double>(staged_count));
  attached.Set({}, static_cast<double>(records->size()));
  published.Set({}, static_cast<double>(published_count));
}

}  // namespace

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

  std::shared_ptr<VolumeAttacher> shared_attacher(std::move(*attacher));
  Metrics().AddCollector([weak = std::weak_ptr<VolumeAttacher>(shared_attacher),
                          mounter = std::shared_ptr<Mounter>(MakeLibmountMounter())](MetricsRegistry& registry) {
    if (auto live = weak.lock()) CollectNodeVolumes(*live, *mounter, registry);
  });

  NodeServiceOptions options;
  options.node_id = wiring.node_id;
  options.max_volumes_per_node = wiring.max_volumes_per_node;
  options.attacher = std::move(shared_attacher);
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
