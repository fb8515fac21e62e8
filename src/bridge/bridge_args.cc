#define FUSE_USE_VERSION 312

#include "bridge/bridge_main.h"

#include <CLI/CLI.hpp>

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
#include "common/host.h"
#include "common/logging.h"
#include "common/loop_devices.h"
#include "common/lun_identity.h"

// The bridge's command line and the secrets it reads from stdin.
namespace blockcsi::bridge_internal {

namespace {

// The flags, by CLI11; names and meanings are the plugin's contract with
// every bridge it ever started (see userspace_connector.cc), kept as-is.
void AddFlags(CLI::App& app, BridgeArgs* a) {
  app.add_option("--transport", a->transport)->check(CLI::IsMember({"iscsi", "rbd"}));
  app.add_option("--volume-id", a->volume_id);
  app.add_option("--control-socket", a->control_socket);
  app.add_option("--mountpoint", a->mountpoint);
  app.add_option("--portal", a->portals)->take_all();
  app.add_option("--target", a->target_iqn);
  app.add_option("--lun", a->lun);
  app.add_option("--initiator", a->initiator_iqn);
  app.add_option("--expected-serial", a->expected_serial);
  app.add_option("--expected-wwn", a->expected_wwn);
  app.add_flag("--read-only", a->read_only);
  app.add_flag("--secrets-on-stdin", a->secrets_on_stdin);
  app.add_option("--io-timeout-seconds", a->io_timeout_s);
  app.add_option("--sessions", a->sessions)->check(CLI::Range(1, 16));
  app.add_option("--queue-depth", a->queue_depth)->check(CLI::Range(1, 128));
  app.add_option("--reconnect-retries", a->reconnect_retries);
  app.add_option("--log-format", a->log_format);
  app.add_option("--log-level", a->log_level);
  app.add_option("--rbd-pool", a->rbd_pool);
  app.add_option("--rbd-image", a->rbd_image);
  app.add_option("--ceph-monitors", a->ceph_monitors);
  app.add_option("--ceph-user", a->ceph_user);
  app.add_option("--ceph-conf", a->ceph_conf);
  app.add_option("--node-id", a->node_id);
  app.add_option("--cgroup", a->cgroup);
  app.add_option("--fuse-io-uring", a->fuse_io_uring)->check(CLI::IsMember({"auto", "off"}));
}

}  // namespace

Status ParseArgs(int argc, char** argv, BridgeArgs* a) {
  // An older plugin, whose bridge was a mode of blockcsi itself, runs
  // `<blockcsi> bridge --flags...`: with an upgraded image on disk, that
  // argument list with `bridge` first still starts this program.
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) args.emplace_back(argv[i]);  // CLI11 wants them reversed
  if (!args.empty() && args.back() == "bridge") args.pop_back();
  CLI::App app{"blockcsi-bridge: serves one volume as a FUSE file with a loop device on top", "blockcsi-bridge"};
  AddFlags(app, a);
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return InvalidArgument(std::string("bridge: ") + e.what());
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
