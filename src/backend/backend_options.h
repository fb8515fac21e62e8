// BackendOptions: what one volume backend is built from (MakeBackend,
// backend_factory.h). A plain value type, light to include: the plugin's and
// the agent's flag parsers fill one directly, so there is one list of these
// fields, not one per program.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace blockcsi {

// The default cap on volumes per pool: each exported volume is a tgtd LUN
// with its I/O threads (4 per LUN as deployed, each thread a pid), so 2,000
// volumes take about 8,000 of the default pid_max of 32,768; well above it a
// storage host stops adding LUNs or threads elsewhere fail.
inline constexpr size_t kDefaultMaxVolumes = 2000;

struct BackendOptions {
  std::string kind = "local";  // local | remote | rbd (--backend)
  // local
  std::string pool_dir;
  int tgt_control_port = 0;
  std::vector<std::string> portals;  // "host:port", advertised to nodes
  std::string iqn_prefix = "iqn.2026-11.io.blockcsi";
  std::string target = "tgt";                        // tgt | lio (the daemon the local pool exports through)
  std::string configfs_root = "/sys/kernel/config";  // lio only
  std::chrono::milliseconds reconcile_interval{std::chrono::seconds(30)};
  std::string tgtadm = "/usr/sbin/tgtadm";  // absolute; never looked up in PATH
  // How tgtd is driven: "socket" (its management socket, tgtd_socket_control.h: no
  // tgtadm process, so no CHAP secret in any argv) or "tgtadm" (exec).
  std::string tgt_control = "socket";
  // Thin provisioning: what the pool may provision in all, and one volume at
  // most, relative to its file system (pool.h, PoolOptions::overcommit_ratio).
  double overcommit_ratio = 1.0;
  // The most volumes the pool holds (0: no limit; PoolOptions::max_volumes).
  size_t max_volumes = kDefaultMaxVolumes;
  // remote
  std::string target_agent;  // HOST:PORT or unix:///path
  std::string tls_cert, tls_key, tls_ca;
  bool insecure = false;
  // rbd (only when this build has the RBD backend; see rbd_backend.h)
  std::string ceph_conf;
  std::string ceph_user;
  std::string ceph_keyring;
  std::string rbd_pool;
};

}  // namespace blockcsi
