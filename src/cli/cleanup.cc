// `blockctl cleanup`: what no volume needs any more — stale attach records,
// orphan bridges, mounts and loop devices — and the exact steps that would
// remove it. Changes nothing without --apply; with it, each step goes
// through the attach layer's own teardown (Detach, the userspace connector's
// Disconnect) so blockctl undoes things exactly as the plugin would. A
// device that a pod's mount still uses is never touched.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <ostream>

#include "attach/iscsi_connector.h"
#include "attach/userspace_connector.h"
#include "attach/volume_attacher_impl.h"
#include "cli/node_state.h"
#include "cli/plugin_probe.h"
#include "cli/table.h"
#include "cli/verb.h"
#include "common/clock.h"
#include "common/executor.h"

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
    NodeSnapshot snapshot = GatherHostSnapshot(options.state_dir);
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
        Status st = Apply(snapshot, plan.steps[i]);
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
  Status Apply(const NodeSnapshot& snapshot, const CleanupStep& step) {
    auto host_fs = std::shared_ptr<Filesystem>(MakeRootedFilesystem(""));
    switch (step.kind) {
      case Kind::kUnmount: {
        Status st = MakeLibmountMounter()->Unmount(step.target);
        return st.code() == StatusCode::kNotFound ? OkStatus() : st;
      }
      case Kind::kDetachRecord: {
        std::string connector = "userspace";
        std::string initiator;
        for (const auto& r : snapshot.records) {
          if (r.volume_id == step.target) connector = r.connector, initiator = r.initiator_iqn;
        }
        std::unique_ptr<Connector> c;
        if (connector == "iscsi") {
          IscsiConnectorOptions o;
          o.executor = MakeProcessExecutor();
          o.host_fs = host_fs;
          o.clock = RealClock();
          o.initiator_iqn = initiator;
          c = MakeIscsiConnector(std::move(o));
        } else {
          c = MakeUserspaceConnector(UserspaceConnectorOptions{.state_dir = snapshot.state_dir, .host_fs = host_fs});
        }
        // No Start(): that would reconcile (and stop) everything else too;
        // this step is about one volume.
        VolumeAttacherImpl attacher(snapshot.state_dir, std::move(c));
        return attacher.Detach(step.target);
      }
      case Kind::kStopBridge: {
        AttachRecord record;
        record.volume_id = step.target;
        record.connector = "userspace";
        for (const auto& b : snapshot.bridges) {
          if (b.volume_id != step.target) continue;
          record.connector_state = {
              {"bridge_dir", b.dir}, {"control_socket", b.control_socket}, {"mountpoint", b.mountpoint}};
        }
        auto c = MakeUserspaceConnector(UserspaceConnectorOptions{.state_dir = snapshot.state_dir, .host_fs = host_fs});
        return c->Disconnect(record);
      }
      case Kind::kDetachLoop: {
        auto r = RunChecked(*MakeProcessExecutor(),
                            Command("losetup").Arg("-d").Arg(step.target).Timeout(std::chrono::seconds(60)));
        return r.status();
      }
      case Kind::kManual:
        return OkStatus();
    }
    return Internal("unknown cleanup step");
  }

  bool apply_ = false;
};

BLOCKCTL_REGISTER_VERB(CleanupVerb);

}  // namespace
}  // namespace blockcsi::cli
