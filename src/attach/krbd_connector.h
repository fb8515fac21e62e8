// The `krbd` connector: transport "rbd" through the kernel RBD driver,
// driven with the rbd CLI (`rbd device map/unmap`) and read back through
// sysfs (/sys/bus/rbd/devices/<id>), never udev. The cephx key reaches rbd
// in a 0600 file under the state dir that exists only while `rbd device
// map` runs; it is never in argv, a log line, an error or the record. The
// mapped image's id is reported as the LunIdentity serial, so the facade's
// identity check covers RBD like a SCSI serial. Thread-safe for different
// volumes (the facade serialises calls for one volume).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attach/connector.h"
#include "common/executor.h"
#include "common/host.h"
#include "common/status.h"

namespace blockcsi {

struct KrbdConnectorOptions {
  std::shared_ptr<Executor> executor;
  std::shared_ptr<Host> host_fs;  // required: /sys and /dev
  // Required: the files of state_dir (the key files), the machine's
  // whatever root host_fs's view of /sys and /dev has.
  std::shared_ptr<Host> state_files;
  // Key files live in <state_dir>/krbd (0700) for the duration of one map.
  std::string state_dir;
  std::string rbd_binary = "rbd";
  // Passed as `-c` when set; otherwise rbd's own search ($CEPH_CONF,
  // /etc/ceph/ceph.conf). Needed when publish_context has no monitors.
  std::string ceph_conf;
  // Bounds every rbd command. A map of an unreachable cluster otherwise
  // waits for client_mount_timeout (300 s by default).
  std::chrono::milliseconds command_timeout{std::chrono::seconds(120)};
  // false: `--options noudev` on map and unmap. A plugin container has no
  // udevd to process the events rbd would wait for, and we find the device
  // through sysfs anyway.
  bool wait_for_udev = false;
  // Extra krbd map options (comma separated, e.g. "ms_mode=prefer-crc"),
  // appended to the --options value.
  std::string map_options;
  // Images whose mappings Reconcile reports when no record names them
  // (the controller's image names start with this).
  std::string image_prefix = "csi-vol-";
};

std::unique_ptr<Connector> MakeKrbdConnector(KrbdConnectorOptions options);

// The monitors of a mon_host value as the kernel client takes them: one
// legacy (v1) "ip:port" per monitor. Accepts address vectors
// ("[v2:10.0.0.1:3300/0,v1:10.0.0.1:6789/0]"), typed ("v1:10.0.0.1:6789/0")
// and plain ("10.0.0.1:6789", "10.0.0.1", "[2001:db8::1]:6789") entries,
// comma separated; a missing v1 port is 6789. INVALID_ARGUMENT when a
// monitor has no v1 address (msgr2-only) or an entry is malformed.
StatusOr<std::vector<std::string>> KrbdMonitorAddresses(std::string_view mon_host);

// One entry of /sys/bus/rbd/devices: what the kernel says is mapped where.
struct KrbdMapping {
  std::string id;  // "0": /sys/bus/rbd/devices/0, /dev/rbd0
  std::string pool;
  std::string pool_ns;  // "" without a namespace (or on kernels before 4.19)
  std::string image;
  std::string image_id;
  std::string snap;  // "-": the image head
  uint64_t size_bytes = 0;
  std::string device() const { return "/dev/rbd" + id; }
};

// Reads one mapping's attributes; NOT_FOUND when the id is not mapped.
StatusOr<KrbdMapping> ReadKrbdMapping(const Host& fs, const std::string& id);
// Every mapping the kernel has (none when the rbd module is not loaded).
std::vector<KrbdMapping> ListKrbdMappings(const Host& fs);

}  // namespace blockcsi
