// What the network-namespace e2e suites (two nodes, zones) share: the
// machine they need, the ports and volume size they use, and the node
// plugins they start (userspace connector, one namespace each).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "e2e/netns_topology.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"

namespace blockcsi::e2e {

using Clock = std::chrono::steady_clock;

inline constexpr int64_t kVolumeBytes = 64LL << 20;
inline constexpr int kIscsiPort = 3260;  // each storage namespace has its own
inline constexpr int kAgentPort = 7443;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Why this machine cannot run the suites (empty: it can): they need root,
// /dev/fuse, tgtd and `ip netns`.
inline std::string MissingNetnsE2eCapability() {
  if (!testing::IsRoot()) return "requires root (network namespaces, tgtd, FUSE, loop devices, mounts)";
  if (::access("/dev/fuse", R_OK | W_OK) != 0) return "requires /dev/fuse (userspace connector)";
  if (::access("/usr/sbin/tgtd", X_OK) != 0) return "requires /usr/sbin/tgtd (Debian package tgt)";
  if (testing::RunProgram({"ip", "netns", "list"}) != 0) return "requires iproute2 with `ip netns`";
  return "";
}

// "<tag>-<pid>": the prefix of this run's network namespaces, once those an
// earlier run that died with this pid left (they would block ours) are gone.
inline std::string FreshNamespacePrefix(const std::string& tag) {
  std::string prefix = tag + "-" + std::to_string(::getpid());
  for (const auto& stale : NetnsTopology::ListedNamespaces(prefix))
    testing::RunProgram({"ip", "netns", "delete", stale});
  return prefix;
}

// `blockcsi --mode node --connector userspace` as `node`, in the node's
// namespace, its files under `dir`, with `extra_args` after the suites'
// own (debug log, a 2 s shutdown grace); nullptr with `*error` set when it
// did not start.
inline std::unique_ptr<testing::PluginUnderTest> StartNodePlugin(const NetnsTopology& net, const std::string& node,
                                                                 const std::string& dir,
                                                                 const std::vector<std::string>& extra_args,
                                                                 std::string* error) {
  auto plugin = std::make_unique<testing::PluginUnderTest>(dir, nullptr);
  testing::PluginOptions n;
  n.mode = "node";
  n.connector = "userspace";
  n.node_id = node;
  n.command_prefix = net.HostPrefix(node);
  n.extra_args = {"--log-level", "debug", "--shutdown-grace", "2s"};
  n.extra_args.insert(n.extra_args.end(), extra_args.begin(), extra_args.end());
  if (!plugin->Start(n, error)) return nullptr;
  return plugin;
}

}  // namespace blockcsi::e2e
