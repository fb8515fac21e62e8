#define FUSE_USE_VERSION 31

#include "bridge/bridge_main.h"

#include <fcntl.h>
#include <fuse.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bridge/bridge_cgroup.h"
#include "bridge/bridge_internal.h"
#include "bridge/bridge_protocol.h"
#include "bridge/bridge_transport.h"
#include "bridge/iscsi_bridge_transport.h"
#include "bridge/libiscsi_session.h"
#include "bridge/rbd_bridge_transport.h"
#include "common/atomic_file.h"
#include "common/executor.h"
#include "common/filesystem.h"
#include "common/logging.h"
#include "common/loop_devices.h"
#include "common/lun_identity.h"

// The bridge's command line and the secrets it reads from stdin.
namespace blockcsi::bridge_internal {

Status ParseArgs(int argc, char** argv, BridgeArgs* a) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> StatusOr<std::string> {
      if (i + 1 >= argc) return InvalidArgument("bridge: " + flag + " needs a value");
      return std::string(argv[++i]);
    };
    auto as_int = [&](int* out) -> Status {
      BLOCKCSI_ASSIGN_OR_RETURN(std::string v, value());
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
      if (ec != std::errc() || p != v.data() + v.size()) return InvalidArgument("bridge: " + flag + " wants a number");
      return OkStatus();
    };
    if (flag == "--transport") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->transport, value());
    } else if (flag == "--rbd-pool") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->rbd_pool, value());
    } else if (flag == "--rbd-image") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->rbd_image, value());
    } else if (flag == "--ceph-monitors") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->ceph_monitors, value());
    } else if (flag == "--ceph-user") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->ceph_user, value());
    } else if (flag == "--ceph-conf") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->ceph_conf, value());
    } else if (flag == "--node-id") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->node_id, value());
    } else if (flag == "--cgroup") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->cgroup, value());
    } else if (flag == "--volume-id") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->volume_id, value());
    } else if (flag == "--control-socket") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->control_socket, value());
    } else if (flag == "--mountpoint") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->mountpoint, value());
    } else if (flag == "--portal") {
      BLOCKCSI_ASSIGN_OR_RETURN(std::string p, value());
      a->portals.push_back(p);
    } else if (flag == "--target") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->target_iqn, value());
    } else if (flag == "--lun") {
      BLOCKCSI_RETURN_IF_ERROR(as_int(&a->lun));
    } else if (flag == "--initiator") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->initiator_iqn, value());
    } else if (flag == "--expected-serial") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->expected_serial, value());
    } else if (flag == "--expected-wwn") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->expected_wwn, value());
    } else if (flag == "--read-only") {
      a->read_only = true;
    } else if (flag == "--secrets-on-stdin") {
      a->secrets_on_stdin = true;
    } else if (flag == "--io-timeout-seconds") {
      BLOCKCSI_RETURN_IF_ERROR(as_int(&a->io_timeout_s));
    } else if (flag == "--sessions") {
      BLOCKCSI_RETURN_IF_ERROR(as_int(&a->sessions));
      if (a->sessions < 1 || a->sessions > 16) return InvalidArgument("bridge: --sessions wants 1..16");
    } else if (flag == "--reconnect-retries") {
      BLOCKCSI_RETURN_IF_ERROR(as_int(&a->reconnect_retries));
    } else if (flag == "--log-format") {
      BLOCKCSI_ASSIGN_OR_RETURN(a->log_format, value());
    } else {
      return InvalidArgument("bridge: unknown flag " + flag);
    }
  }
  if (a->transport == "rbd") {
    if (a->volume_id.empty() || a->control_socket.empty() || a->mountpoint.empty() || a->rbd_pool.empty() ||
        a->rbd_image.empty() || a->expected_serial.empty()) {
      return InvalidArgument(
          "bridge: --volume-id, --control-socket, --mountpoint, --rbd-pool, --rbd-image and --expected-serial (the "
          "image id) are required for --transport rbd");
    }
    return OkStatus();
  }
  if (a->transport != "iscsi") return InvalidArgument("bridge: --transport wants iscsi or rbd");
  if (a->volume_id.empty() || a->control_socket.empty() || a->mountpoint.empty() || a->portals.empty() ||
      a->target_iqn.empty() || a->initiator_iqn.empty()) {
    return InvalidArgument(
        "bridge: --volume-id, --control-socket, --mountpoint, --portal, --target and --initiator are required");
  }
  return OkStatus();
}

StatusOr<BridgeSecrets> ReadSecretsFromStdin() {
  std::string text;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "read secrets from stdin");
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  BridgeSecrets secrets;
  if (text.empty()) return secrets;
  try {
    auto j = nlohmann::json::parse(text);
    secrets.chap.username = j.value("username", "");
    secrets.chap.password = j.value("password", "");
    secrets.chap.mutual_username = j.value("mutual_username", "");
    secrets.chap.mutual_password = j.value("mutual_password", "");
    secrets.ceph_key = j.value("ceph_key", "");
  } catch (const nlohmann::json::exception&) {
    // Not the parser's message: it may quote the secret.
    return InvalidArgument("bridge: the secrets on stdin are not valid JSON");
  }
  return secrets;
}

}  // namespace blockcsi::bridge_internal
