#include "node/node_wiring.h"

#include "attach/attacher_factory.h"
#include "bridge/bridge_protocol.h"
#include "common/atomic_file.h"
#include "common/fault_points.h"
#include "common/host.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/mounter.h"
#include "node/staged_facts.h"

namespace blockcsi {
namespace {

// Staged and published volumes are read from their sources at each scrape
// (the attach records and the mount table), never counted as calls pass:
// a count kept in memory would be wrong after a restart or a lost call.
// A volume's publishes are the mounts of its device other than its staging
// mount (filesystem volumes), plus binds of its device node (block volumes,
// which have no staging mount).
void CollectBridgeIo(const std::vector<AttachRecord>& records, const std::string& state_dir, MetricsRegistry& registry);

void CollectNodeVolumes(VolumeAttacher& attacher, Mounter& mounter, const Host& host, const std::string& state_dir,
                        MetricsRegistry& registry) {
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
    // An encrypted volume's pods use its dm-crypt mapping, not the device.
    const std::string device = DataDevice(record);
    if (device.empty()) continue;
    auto device_number = host.DeviceNumber(device);
    if (!device_number.ok()) continue;
    const std::string& major_minor = *device_number;
    std::string node_root = device.rfind("/dev/", 0) == 0 ? device.substr(4) : device.substr(device.rfind('/'));
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
  CollectBridgeIo(*records, state_dir, registry);
}

// The userspace bridges' I/O figures, asked over each staged volume's
// control socket at scrape time (bounded by what is staged on this node).
// A bridge that does not answer within the timeout has blockcsi_bridge_up 0
// and no I/O series this scrape; one of an older version (adopted after a
// rolling update) answers without figures: up 1, no I/O series.
void CollectBridgeIo(const std::vector<AttachRecord>& records, const std::string& state_dir,
                     MetricsRegistry& registry) {
  std::vector<double> bounds(kIoLatencyBuckets.begin(), kIoLatencyBuckets.end());
  auto& up =
      registry.Gauge("blockcsi_bridge_up", "1 when the volume's userspace bridge answered this scrape", {"volume"});
  auto& ios = registry.Counter("blockcsi_bridge_ios_total", "I/Os the bridge served, by operation", {"volume", "op"});
  auto& bytes = registry.Counter("blockcsi_bridge_io_bytes_total", "Bytes the bridge read or wrote", {"volume", "op"});
  auto& errors = registry.Counter("blockcsi_bridge_io_errors_total", "I/Os that failed (EIO to the loop device)",
                                  {"volume", "op"});
  auto& latency =
      registry.Histogram("blockcsi_bridge_io_duration_seconds",
                         "Time the storage took for one I/O, as the bridge saw it", {"volume", "op"}, bounds);
  auto& reconnects = registry.Counter("blockcsi_bridge_reconnects_total",
                                      "Sessions the bridge re-established after a drop", {"volume"});
  auto& healthy =
      registry.Gauge("blockcsi_bridge_healthy",
                     "0 when the bridge reports a lasting condition, e.g. its RBD client was blocklisted", {"volume"});
  auto& io_uring = registry.Gauge("blockcsi_bridge_fuse_io_uring",
                                  "1 when the bridge serves FUSE over io_uring, 0 over /dev/fuse", {"volume"});
  for (auto* family : {&up, &healthy, &io_uring, &ios, &bytes, &errors, &latency, &reconnects}) family->Clear();
  for (const auto& record : records) {
    if (record.connector != "userspace") continue;
    auto reply = CallBridge(BridgePathsFor(state_dir, record.volume_id).control_socket, {{"op", "status"}},
                            std::chrono::milliseconds(500));
    bool answered = reply.ok() && StatusFromReply(*reply).ok();
    up.Set({record.volume_id}, answered ? 1 : 0);
    if (!answered) continue;
    // A lasting condition (a fenced RBD client, blocklisted by the
    // controller's fencing): the volume is lost on this node until restaged.
    healthy.Set({record.volume_id}, reply->value("healthy", true) ? 1 : 0);
    io_uring.Set({record.volume_id}, reply->value("fuse_path", "") == "io_uring" ? 1 : 0);
    if (!reply->contains("io")) continue;  // a bridge from before the I/O figures: up, no figures
    const auto& io = (*reply)["io"];
    for (const char* op : {"read", "write", "flush"}) {
      if (!io.contains(op)) continue;
      const auto& o = io[op];
      uint64_t n = o.value("ops", uint64_t{0});
      ios.Set({record.volume_id, op}, static_cast<double>(n));
      errors.Set({record.volume_id, op}, static_cast<double>(o.value("errors", uint64_t{0})));
      if (std::string_view(op) != "flush") {
        bytes.Set({record.volume_id, op}, static_cast<double>(o.value("bytes", uint64_t{0})));
      }
      std::vector<uint64_t> counts = o.value("latency_bucket_counts", std::vector<uint64_t>{});
      latency.SetHistogram({record.volume_id, op}, counts, o.value("latency_seconds_sum", 0.0), n);
    }
    reconnects.Set({record.volume_id}, static_cast<double>(io.value("reconnects", uint64_t{0})));
  }
}

// BuiltNode::connection_losses over what the attacher lists now.
uint64_t BridgeConnectionLosses(VolumeAttacher& attacher, const std::string& state_dir) {
  auto records = attacher.List();
  if (!records.ok()) return 0;
  uint64_t losses = 0;
  for (const auto& record : *records) {
    if (record.connector != "userspace") continue;
    auto reply = CallBridge(BridgePathsFor(state_dir, record.volume_id).control_socket, {{"op", "status"}},
                            std::chrono::milliseconds(500));
    if (!reply.ok() || !StatusFromReply(*reply).ok()) continue;  // a bridge busy or gone says nothing here
    if (!reply->value("healthy", true)) ++losses;
    losses += reply->value("io_errors", uint64_t{0});
    if (reply->contains("io")) losses += (*reply)["io"].value("connection_drops", uint64_t{0});
  }
  return losses;
}

}  // namespace

StatusOr<BuiltNode> BuildNodeService(const NodeWiring& wiring) {
  const std::string& state_dir = wiring.attacher.state_dir;
  const std::string& node_id = wiring.attacher.node_id;
  if (!wiring.host) return InvalidArgument("node service: no host seam");
  AttacherOptions attacher_options = wiring.attacher;
  if (!attacher_options.host_fs) attacher_options.host_fs = wiring.host;
  if (!attacher_options.state_files) attacher_options.state_files = wiring.host;
  auto attacher = MakeVolumeAttacher(attacher_options);
  if (!attacher.ok()) return attacher.status().WithContext("node service: attacher");
  // For the node admin's tools (blockctl check-target) when the plugin is
  // down: which node this state belongs to. Not fatal: nothing here needs it.
  if (Status st = WriteFileAtomically(state_dir + "/" + kNodeIdFileName, node_id + "\n"); !st.ok()) {
    LogWarn("cannot record the node id in the state dir", {{"error", st.ToString()}});
  }

  std::shared_ptr<VolumeAttacher> shared_attacher(std::move(*attacher));
  Metrics().AddCollector(shared_attacher,
                         [weak = std::weak_ptr<VolumeAttacher>(shared_attacher), state_dir, host = wiring.host,
                          mounter = std::shared_ptr<Mounter>(MakeLibmountMounter())](MetricsRegistry& registry) {
                           if (auto live = weak.lock()) CollectNodeVolumes(*live, *mounter, *host, state_dir, registry);
                         });

  const std::weak_ptr<VolumeAttacher> attacher_seen = shared_attacher;
  NodeServiceOptions options;
  options.node_id = node_id;
  options.zone = wiring.zone;
  options.max_volumes_per_node = wiring.max_volumes_per_node;
  options.attacher = std::move(shared_attacher);
  options.mounter = MakeLibmountMounter();
  options.probe = MakeBlkidProbe();
  options.executor = MakeProcessExecutor();
  options.host = wiring.host;
  options.fs_minimum_bytes = wiring.fs_minimum_bytes;
  auto node = std::make_shared<NodeService>(std::move(options));
  node->LogAdoptedVolumes();
  BuiltNode built;
  built.service = node;
  built.connection_losses = [attacher_seen, state_dir]() -> uint64_t {
    auto live = attacher_seen.lock();
    return live ? BridgeConnectionLosses(*live, state_dir) : 0;
  };
  return built;
}

}  // namespace blockcsi
