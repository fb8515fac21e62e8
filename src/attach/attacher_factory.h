// The one way the node service builds its VolumeAttacher: picks the
// connector ("kernel", alias "iscsi": the production default — open-iscsi for
// transport "iscsi" and krbd for "rbd", behind a TransportRouter;
// "userspace": libiscsi/librbd + FUSE + loop bridge, for both transports)
// and wires the OS seams.
// MakeVolumeAttacher adopts what earlier plugin runs left (records, bridges)
// before returning, unless told not to (blockctl acting on one volume).
// Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "attach/connector.h"
#include "attach/volume_attacher.h"
#include "common/clock.h"
#include "common/executor.h"
#include "common/fault_points.h"
#include "common/host.h"
#include "common/status.h"

namespace blockcsi {

struct AttacherOptions {
  // "kernel" (open-iscsi + krbd; "iscsi" is its older name, still accepted)
  // | "userspace". The kernel family's records say "iscsi" either way.
  std::string connector = "kernel";
  // Records live in <state_dir>/attachments, bridge sockets and FUSE mounts
  // in <state_dir>/bridges.
  std::string state_dir;
  std::string node_id;
  // Where blockcsi-bridge is (both transports);
  // empty: beside the running program.
  std::string bridge_dir;
  std::shared_ptr<Executor> executor;  // default: MakeProcessExecutor()
  // Required: the view of /sys, /dev and /proc (a test roots it at a temp
  // tree), and the files of state_dir and of this program (the machine's).
  std::shared_ptr<Host> host_fs;
  std::shared_ptr<Host> state_files;
  std::shared_ptr<Clock> clock;  // default: RealClock()

  // iSCSI login: per portal, bounded in time, retried. Slow arrays take
  // longer than open-iscsi's 3 s examples; these are the sane defaults.
  std::chrono::milliseconds login_timeout{std::chrono::seconds(30)};
  int login_retries = 2;
  // How long to wait for the SCSI disk / dm device to appear after login.
  std::chrono::milliseconds device_wait{std::chrono::seconds(60)};
  std::chrono::milliseconds multipath_wait{std::chrono::seconds(30)};
  // Userspace bridge: SCSI command timeout (a dead target gives I/O errors
  // after this, never a hang) and how long to wait for the bridge to be ready.
  std::chrono::milliseconds bridge_io_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds bridge_start_timeout{std::chrono::seconds(60)};
  // iSCSI sessions per userspace volume (1..16): more keep more requests in
  // flight; each is a separate login (and I_T nexus) on the target.
  int bridge_sessions = 1;
  // A cgroup v2 directory outside the plugin container's cgroup for the
  // bridges (created if missing, checked here); empty: bridges stay in the
  // plugin's cgroup and die with its container. See bridge_cgroup.h.
  std::string bridge_cgroup;
  // open-iscsi iface name carrying this node's initiator IQN.
  std::string iscsi_iface = "blockcsi";
  // open-iscsi's node database (CHAP settings are written into its records).
  std::string iscsi_nodes_dir = "/etc/iscsi/nodes";

  // Kernel RBD (transport "rbd" with connector "iscsi"): the ceph.conf rbd
  // reads (empty: rbd's own search, /etc/ceph/ceph.conf), the bound on each
  // `rbd device map/unmap`, and extra krbd map options (e.g.
  // "ms_mode=prefer-crc"). Key files live in <state_dir>/krbd while a map runs.
  std::string ceph_conf;
  std::chrono::milliseconds rbd_command_timeout{std::chrono::seconds(120)};
  std::string rbd_map_options;

  // true: reconcile records with the node before returning (the plugin's
  // start: adopt running bridges, stop bridges no record names). false:
  // only build, for a caller that acts on one volume and must not touch the
  // others (blockctl cleanup).
  bool adopt = true;

  // Test-only: sees the attacher's fault points (common/fault_points.h):
  // node.stage.after-connect (the connector attached, the record not yet
  // updated); an error fails the attach there.
  FaultHook fault_hook;
};

StatusOr<std::unique_ptr<VolumeAttacher>> MakeVolumeAttacher(const AttacherOptions& options);

// The connector MakeVolumeAttacher wires, alone: for a caller that undoes
// what no record names (blockctl cleanup stopping an orphan bridge).
StatusOr<std::unique_ptr<Connector>> MakeConnector(const AttacherOptions& options);

}  // namespace blockcsi
