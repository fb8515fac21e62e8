// The network of an end-to-end test: a storage host and the hosts that
// reach it, each its own network namespace (`ip netns add`), joined by a
// bridge inside the storage namespace with one veth pair per host.
// Only the network is namespaced: programs run as
// `nsenter --net=/run/netns/<ns> -- program`, so their mounts, loop
// devices and FUSE files are the test's own. Names carry the test's pid,
// so parallel tests never meet; every address is private to the
// namespaces. Destroying it deletes the namespaces (their veths and the
// bridge go with them); stop the processes inside first. Needs root and
// iproute2. Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace blockcsi::e2e {

class NetnsTopology {
 public:
  // Creates `<prefix>-store` with a bridge at 10.231.0.1/24 and, for each
  // host name, `<prefix>-<host>` with eth0 at 10.231.0.(11+i). nullptr with
  // `error` set when the machine cannot (not root, no ip netns, no veth).
  static std::unique_ptr<NetnsTopology> Create(const std::string& prefix, const std::vector<std::string>& hosts,
                                               std::string* error);
  ~NetnsTopology();
  NetnsTopology(const NetnsTopology&) = delete;
  NetnsTopology& operator=(const NetnsTopology&) = delete;

  std::string store_namespace() const { return prefix_ + "-store"; }
  std::string store_address() const { return "10.231.0.1"; }
  std::string namespace_of(const std::string& host) const { return prefix_ + "-" + host; }
  std::string address_of(const std::string& host) const;
  // {"/usr/bin/nsenter", "--net=/run/netns/<ns>", "--"}
  std::vector<std::string> PrefixFor(const std::string& ns) const;
  std::vector<std::string> StorePrefix() const { return PrefixFor(store_namespace()); }
  std::vector<std::string> HostPrefix(const std::string& host) const { return PrefixFor(namespace_of(host)); }

  // The host's link to the storage bridge, switched in the host's own
  // namespace (its eth0): down cuts it as a pulled cable would.
  bool SetHostLink(const std::string& host, bool up, std::string* error);
  // Every namespace and interface this topology made, for the leak check.
  std::vector<std::string> namespaces() const;
  // Names from `ip netns list` that start with the prefix.
  static std::vector<std::string> ListedNamespaces(const std::string& prefix);

 private:
  NetnsTopology() = default;
  bool Ip(const std::vector<std::string>& args, std::string* error) const;
  void Destroy();

  std::string prefix_;
  std::string nsenter_;  // its full path: ChildProcess does not search PATH
  std::vector<std::string> hosts_;
  std::vector<std::string> created_;  // namespaces, in creation order
};

}  // namespace blockcsi::e2e
