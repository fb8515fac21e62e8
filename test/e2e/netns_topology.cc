#include "e2e/netns_topology.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "common/executor.h"

namespace blockcsi::e2e {
namespace {

constexpr char kBridge[] = "br0";

}  // namespace

bool NetnsTopology::Ip(const std::vector<std::string>& args, std::string* error) const {
  auto r = MakeProcessExecutor()->Run(Command("ip").Args(args).Timeout(std::chrono::seconds(20)));
  if (r.ok() && r->exit_code == 0) return true;
  std::string line = "ip";
  for (const auto& a : args) line += " " + a;
  if (error != nullptr) *error = line + ": " + (r.ok() ? r->stderr_text : r.status().message());
  return false;
}

std::unique_ptr<NetnsTopology> NetnsTopology::Create(const std::string& prefix, const std::vector<std::string>& hosts,
                                                     std::string* error) {
  if (::geteuid() != 0) {
    *error = "requires root (ip netns add)";
    return nullptr;
  }
  std::string nsenter;
  for (const char* candidate : {"/usr/bin/nsenter", "/bin/nsenter", "/usr/sbin/nsenter"}) {
    if (::access(candidate, X_OK) == 0) {
      nsenter = candidate;
      break;
    }
  }
  if (nsenter.empty()) {
    *error = "requires nsenter (util-linux)";
    return nullptr;
  }
  std::unique_ptr<NetnsTopology> t(new NetnsTopology());
  t->nsenter_ = nsenter;
  t->prefix_ = prefix;
  t->hosts_ = hosts;
  const std::string store = t->store_namespace();
  auto make_ns = [&](const std::string& ns) {
    if (!t->Ip({"netns", "add", ns}, error)) return false;
    t->created_.push_back(ns);
    return t->Ip({"-n", ns, "link", "set", "lo", "up"}, error);
  };
  if (!make_ns(store)) {
    *error = "cannot create network namespaces: " + *error;
    return nullptr;
  }
  if (!t->Ip({"-n", store, "link", "add", kBridge, "type", "bridge"}, error) ||
      !t->Ip({"-n", store, "addr", "add", t->store_address() + "/24", "dev", kBridge}, error) ||
      !t->Ip({"-n", store, "link", "set", kBridge, "up"}, error)) {
    return nullptr;
  }
  for (const auto& host : hosts) {
    const std::string ns = t->namespace_of(host);
    // The storage side of the pair is named after the host, so a test can
    // tell the two links apart in the storage namespace too.
    const std::string port = "v-" + host;
    if (!make_ns(ns) ||
        !t->Ip({"-n", store, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns}, error) ||
        !t->Ip({"-n", store, "link", "set", port, "master", kBridge, "up"}, error) ||
        !t->Ip({"-n", ns, "addr", "add", t->address_of(host) + "/24", "dev", "eth0"}, error) ||
        !t->Ip({"-n", ns, "link", "set", "eth0", "up"}, error)) {
      return nullptr;
    }
  }
  return t;
}

NetnsTopology::~NetnsTopology() { Destroy(); }

void NetnsTopology::Destroy() {
  // Deleting a namespace takes its veth ends (and so the peers) and the
  // bridge with it, once no process is left inside.
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) Ip({"netns", "delete", *it}, nullptr);
  created_.clear();
}

std::string NetnsTopology::address_of(const std::string& host) const {
  auto it = std::find(hosts_.begin(), hosts_.end(), host);
  if (it == hosts_.end()) return "";
  return "10.231.0." + std::to_string(11 + (it - hosts_.begin()));
}

std::vector<std::string> NetnsTopology::PrefixFor(const std::string& ns) const {
  return {nsenter_, "--net=/run/netns/" + ns, "--"};
}

bool NetnsTopology::SetHostLink(const std::string& host, bool up, std::string* error) {
  return Ip({"-n", namespace_of(host), "link", "set", "eth0", up ? "up" : "down"}, error);
}

std::vector<std::string> NetnsTopology::namespaces() const { return created_; }

std::vector<std::string> NetnsTopology::ListedNamespaces(const std::string& prefix) {
  std::vector<std::string> out;
  auto r = MakeProcessExecutor()->Run(Command("ip").Arg("netns").Arg("list").Timeout(std::chrono::seconds(20)));
  if (!r.ok()) return out;
  std::istringstream lines(r->stdout_text);
  std::string name;
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    if (fields >> name && name.rfind(prefix + "-", 0) == 0) out.push_back(name);
  }
  return out;
}

}  // namespace blockcsi::e2e
