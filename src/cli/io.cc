// `blockctl io`: the live I/O of every userspace bridge on this node, asked
// over each bridge's control socket (the figures the plugin's /metrics
// exports, without the plugin: it may be down or restarting). Totals since
// each bridge started; run it under `watch` to see them move. Read-only.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "attach/attach_record_store.h"
#include "bridge/bridge_protocol.h"
#include "cli/node_state.h"
#include "cli/table.h"
#include "cli/verb.h"
#include "common/host.h"

namespace blockcsi::cli {
namespace {

// The bridges' directories under the state dir: one per volume, named by
// the escaped volume id (whether or not an attach record still names it).
std::vector<std::string> BridgeVolumeIds(const Host& host, const std::string& state_dir, const Io& io) {
  std::vector<std::string> ids;
  auto names = host.ListDir(BridgesDir(state_dir));
  if (!names.ok()) return ids;  // no bridge ever ran here
  for (const std::string& name : *names) {
    auto id = UnescapeVolumeIdFromFile(name);
    if (!id.ok()) {
      io.Error("skipping " + BridgesDir(state_dir) + "/" + name + ": " + id.status().message());
      continue;
    }
    ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::string AverageMillis(const nlohmann::json& op) {
  uint64_t n = op.value("ops", uint64_t{0});
  if (n == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", op.value("latency_seconds_sum", 0.0) * 1000 / static_cast<double>(n));
  return buf;
}

class IoVerb final : public Verb {
 public:
  std::string Name() const override { return "io"; }
  std::string Summary() const override {
    return "Live I/O per volume from the userspace bridges (ops, bytes, errors, latency, reconnects)";
  }
  void Configure(CLI::App& command) override {
    command.add_option("--timeout-ms", timeout_ms_, "How long to wait for each bridge's answer")->capture_default_str();
  }

  int Run(const GlobalOptions& options, const Io& io) override {
    int exit_code = kExitOk;
    nlohmann::json listing = nlohmann::json::array();
    Table table({"volume", "reads", "read bytes", "read avg ms", "writes", "write bytes", "write avg ms", "flushes",
                 "errors", "reconnects"});
    for (const std::string& id : BridgeVolumeIds(*options.host, options.state_dir, io)) {
      nlohmann::json entry{{"volume_id", id}};
      auto reply = CallBridge(BridgePathsFor(options.state_dir, id).control_socket, {{"op", "status"}},
                              std::chrono::milliseconds(timeout_ms_));
      Status st = reply.ok() ? StatusFromReply(*reply) : reply.status();
      if (st.ok() && !reply->contains("io"))
        st = FailedPrecondition("the bridge reports no I/O figures (older version)");
      if (!st.ok()) {
        io.Error("volume " + id + ": bridge did not answer: " + st.message());
        exit_code = kExitProblems;
        entry["answered"] = false;
        entry["error"] = st.message();
        listing.push_back(entry);
        table.AddRow({id, "?", "", "", "", "", "", "", "", ""});
        continue;
      }
      const nlohmann::json& j = (*reply)["io"];
      entry["answered"] = true;
      entry["io"] = j;
      listing.push_back(entry);
      const auto& r = j["read"];
      const auto& w = j["write"];
      const auto& f = j["flush"];
      uint64_t errors =
          r.value("errors", uint64_t{0}) + w.value("errors", uint64_t{0}) + f.value("errors", uint64_t{0});
      table.AddRow({id, std::to_string(r.value("ops", uint64_t{0})), HumanBytes(r.value("bytes", uint64_t{0})),
                    AverageMillis(r), std::to_string(w.value("ops", uint64_t{0})),
                    HumanBytes(w.value("bytes", uint64_t{0})), AverageMillis(w),
                    std::to_string(f.value("ops", uint64_t{0})), std::to_string(errors),
                    std::to_string(j.value("reconnects", uint64_t{0}))});
    }
    if (options.format() == OutputFormat::kJson) {
      io.out << listing.dump(2) << "\n";
    } else {
      table.Print(io.out, options.format());
    }
    return exit_code;
  }

 private:
  int timeout_ms_ = 2000;
};

BLOCKCTL_REGISTER_VERB(IoVerb);

}  // namespace
}  // namespace blockcsi::cli
