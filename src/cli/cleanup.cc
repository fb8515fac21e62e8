// `blockctl cleanup`: what no volume needs any more — stale attach records,
// orphan bridges, mounts and loop devices — and the exact steps that would
// remove it. Changes nothing without --apply; with it, each step goes
// through the attach layer's own teardown (Detach, the userspace connector's
// Disconnect) so blockctl undoes things exactly as the plugin would. A
// device that a pod's mount still uses is never touched.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <ostream>

#include "cli/cleanup_steps.h"
#include "cli/node_state.h"
#include "cli/plugin_probe.h"
#include "cli/table.h"
#include "cli/verb.h"

namespace blockcsi::cli {
namespace {

using Kind = CleanupStep::Kind;

std::string KindName(Kind kind) {
  switch (kind) {
    case Kind::kUnmount:
      return "unmount";
    case Kind::kDetachRecord:
      return "detach-volume";
    case Kind::kStopBridge:
      return "stop-bridge";
    case Kind::kDetachLoop:
      return "detach-loop";
    case Kind::kCloseMapping:
      return "close-mapping";
    case Kind::kManual:
      return "manual";
  }
  return "?";
}

class CleanupVerb final : public Verb {
 public:
  std::string Name() const override { return "cleanup"; }
  std::string Summary() const override {
    return "List what no volume needs (stale records, orphans) and the steps to remove it; --apply does them";
  }
  void Configure(CLI::App& c) override {
    c.add_flag("--apply", apply_, "Carry the steps out (default: only print them)");
  }

  int Run(const GlobalOptions& options, const Io& io) override {
    NodeSnapshot snapshot = GatherHostSnapshot(options.host, options.state_dir);
    snapshot.plugin_reachable = AskPlugin(options.endpoint).reachable;
    for (const auto& e : snapshot.errors) io.Error(e);
    CleanupPlan plan = PlanCleanup(snapshot);
    std::vector<std::string> results(plan.steps.size(), apply_ ? "" : "planned");
    bool failed = false;
    if (apply_) {
      for (size_t i = 0; i < plan.steps.size(); ++i) {
        if (failed) {
          results[i] = "not attempted";
          continue;
        }
        Status st = ApplyCleanupStep(snapshot, plan.steps[i], {.host_fs = options.host, .state_files = options.host});
        results[i] =
            st.ok() ? (plan.steps[i].kind == Kind::kManual ? "left to you" : "done") : "failed: " + st.message();
        if (!st.ok()) {
          io.Error("step " + std::to_string(i + 1) + " (" + plan.steps[i].description + ") failed: " + st.ToString());
          failed = true;  // later steps may depend on this one
        }
      }
    }
    if (options.format() == OutputFormat::kJson) {
      nlohmann::json j;
      j["applied"] = apply_;
      j["steps"] = nlohmann::json::array();
      for (size_t i = 0; i < plan.steps.size(); ++i) {
        const auto& s = plan.steps[i];
        j["steps"].push_back({{"step", i + 1},
                              {"action", KindName(s.kind)},
                              {"subject", s.subject},
                              {"target", s.target},
                              {"description", s.description},
                              {"result", results[i]}});
      }
      j["skipped"] = nlohmann::json::array();
      for (const auto& f : plan.skipped) {
        j["skipped"].push_back({{"subject", f.subject}, {"verdict", f.verdict}, {"reason", f.detail}});
      }
      io.out << j.dump(2) << "\n";
    } else {
      if (plan.steps.empty() && plan.skipped.empty()) io.out << "nothing to clean up\n";
      if (!plan.steps.empty()) {
        Table table({"step", "action", "subject", "description", "result"});
        for (size_t i = 0; i < plan.steps.size(); ++i) {
          const auto& s = plan.steps[i];
          table.AddRow({std::to_string(i + 1), KindName(s.kind), s.subject, s.description, results[i]});
        }
        table.Print(io.out, OutputFormat::kTable);
      }
      if (!plan.skipped.empty()) {
        io.out << (plan.steps.empty() ? "" : "\n") << "left alone:\n";
        Table table({"subject", "verdict", "reason"});
        for (const auto& f : plan.skipped) table.AddRow({f.subject, f.verdict, f.detail});
        table.Print(io.out, OutputFormat::kTable);
      }
      if (!apply_ && !plan.steps.empty()) io.out << "\ndry run: nothing was changed; run with --apply to do this\n";
    }
    if (failed) return kExitProblems;
    bool manual_left = false;
    for (const auto& s : plan.steps) manual_left = manual_left || s.kind == Kind::kManual;
    if (!plan.skipped.empty() || manual_left) return kExitProblems;
    return apply_ || plan.steps.empty() ? kExitOk : kExitProblems;
  }

 private:
  bool apply_ = false;
};

BLOCKCTL_REGISTER_VERB(CleanupVerb);

}  // namespace
}  // namespace blockcsi::cli
