// The `iscsi` connector: the kernel initiator driven through open-iscsi's
// iscsiadm. A dedicated iface carries this node's initiator name (a static
// PV's own initiatorName gets an iface of its own, "<iface>-<hash>"); node
// records are created with node.startup=manual and node.session.scan=manual
// (so no other LUN of the target shows up unasked); CHAP goes on the node
// record by rewriting its file in open-iscsi's node database (never on
// iscsiadm's argv); login is per portal, bounded and retried;
// the LUN is scanned explicitly and its block device found through sysfs
// (session → host → target → LUN → block), never udev. With several
// portals every path must report the same WWID and size and the dm
// multipath device holding them is used. Thread-safe for different volumes.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "attach/connector.h"
#include "common/clock.h"
#include "common/executor.h"
#include "common/host.h"

namespace blockcsi {

struct IscsiConnectorOptions {
  std::shared_ptr<Executor> executor;
  std::shared_ptr<Host> host_fs;  // required: /sys, /dev and the node records
  std::shared_ptr<Clock> clock;
  std::string iface = "blockcsi";
  // open-iscsi's node database (host path, read and written through
  // host_fs): CHAP settings are written into the node record here rather
  // than passed to iscsiadm, whose argv any local user can read.
  std::string nodes_dir = "/etc/iscsi/nodes";
  std::string initiator_iqn;
  std::chrono::milliseconds login_timeout{std::chrono::seconds(30)};
  int login_retries = 2;
  std::chrono::milliseconds device_wait{std::chrono::seconds(60)};
  std::chrono::milliseconds multipath_wait{std::chrono::seconds(30)};
  std::chrono::milliseconds poll_interval{std::chrono::milliseconds(250)};
};

std::unique_ptr<Connector> MakeIscsiConnector(IscsiConnectorOptions options);

}  // namespace blockcsi
