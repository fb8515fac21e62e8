// The `userspace` connector: each volume gets its own bridge process
// (`<blockcsi> bridge ...`: libiscsi session or librbd image → FUSE file →
// loop device), started detached so that it outlives the plugin. It serves
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
#include "common/filesystem.h"

namespace blockcsi {

struct UserspaceConnectorOptions {
  std::string state_dir;
  std::string blockcsi_binary = "/proc/self/exe";
  std::shared_ptr<Filesystem> host_fs;  // /sys and /proc
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
};

std::unique_ptr<Connector> MakeUserspaceConnector(UserspaceConnectorOptions options);

// Test and cleanup helper: pids of bridge processes whose command line
// names `control_socket` (found through /proc, so a bridge whose pid was
// never recorded is still found).
std::vector<int> FindBridgePids(const Filesystem& fs, const std::string& control_socket);

}  // namespace blockcsi
