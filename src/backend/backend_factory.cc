#include "backend/backend_factory.h"

#include <string_view>

#include "backend/local/lio_exporter.h"
#include "backend/local/local_backend.h"
#include "backend/local/tgt_exporter.h"
#include "backend/local/tgtadm_control.h"
#include "backend/local/tgtd_socket_control.h"
#include "backend/remote/remote_backend.h"
#include "common/executor.h"
#include "common/fault_points.h"
#ifdef BLOCKCSI_WITH_RBD
#include "backend/rbd/rbd_backend.h"
#endif

namespace blockcsi {

StatusOr<std::shared_ptr<VolumeBackend>> MakeBackend(const BackendOptions& options, const std::shared_ptr<Host>& host) {
  if (options.kind == "local") {
    if (options.pool_dir.empty() || options.pool_dir.front() != '/') {
      return InvalidArgument("--pool must be an absolute directory for --backend local");
    }
    if (options.portals.empty()) {
      return InvalidArgument("--portal HOST:PORT is required for --backend local (nodes log in there)");
    }
    if (options.reconcile_interval.count() <= 0) return InvalidArgument("--reconcile-interval must be positive");
    if (!(options.overcommit_ratio > 0 && options.overcommit_ratio <= 1000)) {
      return InvalidArgument("--overcommit-ratio must be above 0 and at most 1000");
    }
    std::shared_ptr<Exporter> exporter;
    if (options.target == "tgt") {
      if (options.tgtadm.empty() || options.tgtadm.front() != '/') {
        return InvalidArgument("--tgtadm must be an absolute path, not \"" + options.tgtadm + "\"");
      }
      std::shared_ptr<TgtdControl> control;
      if (options.tgt_control == "socket") {
        control = std::make_shared<TgtdSocketControl>(options.tgt_control_port);
      } else if (options.tgt_control == "tgtadm") {
        control = std::make_shared<TgtadmControl>(std::shared_ptr<Executor>(MakeProcessExecutor()),
                                                  options.tgt_control_port, options.tgtadm);
      } else {
        return InvalidArgument("--tgt-control must be socket or tgtadm, not \"" + options.tgt_control + "\"");
      }
      exporter = std::make_shared<TgtExporter>(std::move(control), options.tgt_control_port, host);
    } else if (options.target == "lio") {
      exporter = std::make_shared<LioExporter>(options.configfs_root, options.portals);
    } else {
      return InvalidArgument("--target must be tgt or lio, not \"" + options.target + "\"");
    }
    LocalBackendOptions local;
    local.portals = options.portals;
    local.iqn_prefix = options.iqn_prefix;
    local.reconcile_interval = options.reconcile_interval;
    local.overcommit_ratio = options.overcommit_ratio;
    local.max_volumes = options.max_volumes;
    BLOCKCSI_ASSIGN_OR_RETURN(auto backend, LocalBackend::Open(options.pool_dir, std::move(exporter), local));
    return std::shared_ptr<VolumeBackend>(std::move(backend));
  }
  if (options.kind == "remote") {
    RemoteBackendOptions remote;
    remote.target = options.target_agent;
    remote.tls_cert = options.tls_cert;
    remote.tls_key = options.tls_key;
    remote.tls_ca = options.tls_ca;
    remote.insecure = options.insecure;
    BLOCKCSI_ASSIGN_OR_RETURN(auto backend, MakeRemoteBackend(remote));
    return backend;
  }
  if (options.kind == "rbd") {
#ifdef BLOCKCSI_WITH_RBD
    RbdBackendOptions rbd;
    rbd.ceph_conf = options.ceph_conf;
    rbd.ceph_user = options.ceph_user;
    rbd.keyring = options.ceph_keyring;
    rbd.pool = options.rbd_pool;
    return MakeRbdBackend(rbd);
#else
    return Unimplemented("--backend rbd: this build has no RBD backend (librbd-dev missing at build time)");
#endif
  }
  return InvalidArgument("--backend must be local, remote or rbd, not \"" + options.kind + "\"");
}

}  // namespace blockcsi
