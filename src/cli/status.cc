// `blockctl status`: is the plugin answering, and what is wrong with the
// volumes this node knows? Each volume (and each orphan: a bridge, session,
// mount or loop device no record names) gets one verdict; a userspace bridge
// also says whose it is: started or adopted by the running plugin, left by a
// plugin that is gone (it keeps serving until the next plugin adopts it), or
// an orphan no record names. Reads records,
// mountinfo and bridges directly, so it works with the plugin down. Exit 1
// when any verdict is not healthy.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <ostream>

#include "cli/node_state.h"
#include "cli/plugin_probe.h"
#include "cli/table.h"
#include "cli/verb.h"

namespace blockcsi::cli {
namespace {

class StatusVerb final : public Verb {
 public:
  std::string Name() const override { return "status"; }
  std::string Summary() const override {
    return "Plugin reachability and one verdict per volume or orphan; exit 1 unless all are healthy";
  }
  void Configure(CLI::App& /*command*/) override {}

  int Run(const GlobalOptions& options, const Io& io) override {
    PluginState plugin = AskPlugin(options.endpoint);
    NodeSnapshot snapshot = GatherHostSnapshot(options.host, options.state_dir);
    for (const auto& e : snapshot.errors) io.Error(e);
    std::vector<Finding> findings = Classify(snapshot);
    bool all_healthy = true;
    for (const auto& f : findings) all_healthy = all_healthy && f.healthy();

    if (options.format() == OutputFormat::kJson) {
      nlohmann::json j;
      j["plugin"] = {{"endpoint", options.endpoint}, {"reachable", plugin.reachable}};
      if (plugin.reachable) {
        j["plugin"]["name"] = plugin.name;
        j["plugin"]["version"] = plugin.version;
        j["plugin"]["manifest"] = plugin.manifest;
        if (!plugin.ready.empty()) j["plugin"]["ready"] = plugin.ready == "true";
      } else {
        j["plugin"]["error"] = plugin.error;
      }
      nlohmann::json volumes = nlohmann::json::array();
      for (const auto& f : findings) {
        nlohmann::json v = {{"subject", f.subject}, {"verdict", f.verdict}, {"detail", f.detail}};
        if (!f.bridge.empty()) v["bridge"] = f.bridge;
        volumes.push_back(std::move(v));
      }
      j["volumes"] = volumes;
      j["healthy"] = all_healthy;
      io.out << j.dump(2) << "\n";
    } else {
      io.out << "plugin: ";
      if (plugin.reachable) {
        io.out << plugin.name << " " << plugin.version;
        for (const auto& [k, v] : plugin.manifest) io.out << " " << k << "=" << v;
        if (!plugin.ready.empty()) io.out << " ready=" << plugin.ready;
        io.out << "\n";
      } else {
        io.out << "unreachable at " << options.endpoint << " (" << plugin.error << ")\n";
      }
      Table table({"volume", "verdict", "detail"});
      for (const auto& f : findings) table.AddRow({f.subject, f.verdict, f.detail});
      table.Print(io.out, OutputFormat::kTable);
    }
    return all_healthy && snapshot.errors.empty() ? kExitOk : kExitProblems;
  }
};

BLOCKCTL_REGISTER_VERB(StatusVerb);

}  // namespace
}  // namespace blockcsi::cli
