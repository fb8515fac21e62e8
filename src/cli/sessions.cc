// `blockctl sessions`: the node's userspace bridges and kernel iSCSI
// sessions, and the volumes (attach records) using each.
#include <CLI/CLI.hpp>
#include <ostream>

#include "cli/node_state.h"
#include "cli/table.h"
#include "cli/verb.h"

namespace blockcsi::cli {
namespace {

class SessionsVerb final : public Verb {
 public:
  std::string Name() const override { return "sessions"; }
  std::string Summary() const override {
    return "List userspace bridges and kernel iSCSI sessions with the volumes using each";
  }
  void Configure(CLI::App& /*command*/) override {}

  int Run(const GlobalOptions& options, const Io& io) override {
    NodeSnapshot s = GatherHostSnapshot(options.host, options.state_dir);
    for (const auto& e : s.errors) io.Error(e);
    Table table({"kind", "id", "state", "target", "portal", "device", "volumes"});
    for (const auto& b : s.bridges) {
      std::string pids;
      for (int pid : b.pids) pids += (pids.empty() ? "" : ",") + std::to_string(pid);
      std::string state = b.answered ? "running" : (b.pids.empty() ? "gone" : "not answering");
      if (b.answered && b.io_errors > 0) state += " (" + std::to_string(b.io_errors) + " I/O errors)";
      std::string target, volumes;
      for (const auto& r : s.records) {
        auto it = r.connector_state.find("bridge_dir");
        bool uses = r.connector == "userspace" &&
                    (it != r.connector_state.end() ? it->second == b.dir : r.volume_id == b.volume_id);
        if (!uses) continue;
        target = r.target_iqn;
        volumes += (volumes.empty() ? "" : ",") + r.volume_id;
      }
      table.AddRow({"bridge", pids.empty() ? "-" : "pid " + pids, state, target, b.portal, b.device,
                    volumes.empty() ? "(none: orphan " + b.volume_id + ")" : volumes});
    }
    for (const auto& k : s.sessions) {
      std::string volumes, device;
      for (const auto& r : s.records) {
        if (r.connector != "iscsi" || r.target_iqn != k.target_iqn) continue;
        volumes += (volumes.empty() ? "" : ",") + r.volume_id;
        device += (device.empty() ? "" : ",") + r.device_path;
      }
      if (volumes.empty()) volumes = k.iface == "blockcsi" ? "(none: orphan)" : "(not ours: iface " + k.iface + ")";
      table.AddRow({"kernel", "session" + k.sid, k.state, k.target_iqn, k.portal, device, volumes});
    }
    table.Print(io.out, options.format());
    return kExitOk;
  }
};

BLOCKCTL_REGISTER_VERB(SessionsVerb);

}  // namespace
}  // namespace blockcsi::cli
