// The `userspace` connector: each volume gets its own bridge process
// (`blockcsi-bridge ...`: libiscsi session or librbd image → FUSE file → loop device), started detached so that it
// outlives the plugin. Bridges an older plugin started as `<blockcsi> bridge
// ...` speak the same control protocol at the same paths and are adopted. It serves
// both transports of an AttachSpec ("iscsi", "rbd"); no kernel rbd/nbd. The plugin talks to it
// over its control socket and, when the bridge is gone, cleans up what it
// left (loop device, FUSE mount) by their names. Thread-safe for different
// volumes.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "attach/connector.h"
#include "common/clock.h"
#include "common/host.h"
#include "common/mounter.h"

namespace blockcsi {

struct UserspaceConnectorOptions {
  std::string state_dir;
  // Where blockcsi-bridge is; empty: the directory
  // of the running program (/proc/self/exe), as installed in bin/ and the image.
  std::string bridge_dir{};
  std::shared_ptr<Host> host_fs;  // required: /sys, /proc and the bridge processes
  // Required: the files of state_dir (bridge dirs) and of this program
  // (/proc/self/exe, to find blockcsi-bridge beside it): the machine's,
  // whatever root host_fs's view has.
  std::shared_ptr<Host> state_files;
  std::shared_ptr<Clock> clock;  // default: RealClock()
  // Unmounts what a dead bridge left (its FUSE mount); default: libmount.
  std::shared_ptr<Mounter> mounter;
  std::chrono::milliseconds io_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds start_timeout{std::chrono::seconds(60)};
  int reconnect_retries = 3;
  int sessions_per_volume = 1;  // iSCSI sessions each bridge opens for data
  // Transport "rbd": this node's id, under which each bridge registers its
  // rados client for fencing (image metadata blockcsi.client.<node_id>).
  // Empty: taken from the spec's initiator name (InitiatorIqnForNode).
  // (Default member initializers here and below keep designated-initializer
  // users free of -Wmissing-field-initializers.)
  std::string node_id{};
  // ceph.conf for rbd volumes whose publish_context names no monitors;
  // empty: the bridge's default (/etc/ceph/ceph.conf).
  std::string ceph_conf{};
  // A cgroup v2 directory (absolute path) each bridge moves itself into
  // before it exposes anything, outside the plugin container's cgroup so
  // that a restart of the container does not kill it; empty: bridges stay
  // in the plugin's cgroup. Adopted bridges found elsewhere are moved in.
  std::string bridge_cgroup{};
};

// connector_state keys of a userspace record that say which processes run
// it: the bridge (pid + start time, one process even after pid reuse) and
// the plugin that owns the bridge now; "adopted" is "true" when that plugin
// took the bridge over from an earlier one instead of starting it.
inline constexpr char kBridgePidKey[] = "bridge_pid";
inline constexpr char kBridgeStartTimeKey[] = "bridge_start_time";
inline constexpr char kPluginPidKey[] = "plugin_pid";
inline constexpr char kPluginStartTimeKey[] = "plugin_start_time";
inline constexpr char kAdoptedKey[] = "adopted";

std::unique_ptr<Connector> MakeUserspaceConnector(UserspaceConnectorOptions options);

// Test and cleanup helper: pids of bridge processes whose command line
// names `control_socket` (found through /proc, so a bridge whose pid was
// never recorded is still found).
std::vector<int> FindBridgePids(const Host& fs, const std::string& control_socket);

// True when `argv` (a /proc/<pid>/cmdline, split) is a bridge's: the
// blockcsi-bridge programs, or `<blockcsi> bridge ...`, as an older plugin
// started them (still running after an upgrade).
bool IsBridgeArgv(const std::vector<std::string>& argv);

// blockcsi-bridge in `bridge_dir` (empty: the running program's directory,
// read through `host`).
std::string BridgeProgramFor(const Host& host, const std::string& bridge_dir);

}  // namespace blockcsi
