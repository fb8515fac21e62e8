// The one fault-injection seam. Every step a crash or an error can be
// injected at is a named point, "<component>.<operation>.<step>":
// component is the process that runs it (controller, agent, node), operation
// the call (create, delete, publish, unpublish, expand, snapshot,
// delete-snapshot, stage, unstage), step what has just been made durable
// ("controller.create.after-record", "node.record.renamed"). The
// names are listed in docs/testing.md.
//
// A component reaches a point with FaultPoint(name, hook), right after the
// step, and goes on only when it returns OK. Two users, one seam:
// - the kill -9 matrix (test/fault), on the real programs: the environment
//   variable BLOCKCSI_FAULT_POINT=<name>[,<name>...] makes the process kill
//   itself with SIGKILL at that point; BLOCKCSI_FAULT_PAUSE pauses it there.
//   Inert when the variables are unset.
// - unit tests, in-process: the component's options carry a FaultHook that
//   sees every point reached and may return an error to fail the call there.
// Thread-safe.
//
// Code shared by two processes (the local backend runs inside the plugin
// with --backend local and inside blockcsi-target) names its points
// "controller.<op>.<step>". A FaultPointScope("agent") on the calling thread
// renames them to "agent.<op>.<step>", so a point can be armed in one of the
// two processes only.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace blockcsi {

inline constexpr char kFaultPointEnv[] = "BLOCKCSI_FAULT_POINT";
// Test-only too: BLOCKCSI_FAULT_PAUSE=<name>[,...] makes the process stop at
// that point instead of dying — it creates <BLOCKCSI_FAULT_PAUSE_DIR>/<name>
// and waits (at most 2 minutes) until the test removes it — so that a test
// can break the outside world (stop the storage) at an exact step.
inline constexpr char kFaultPauseEnv[] = "BLOCKCSI_FAULT_PAUSE";
inline constexpr char kFaultPauseDirEnv[] = "BLOCKCSI_FAULT_PAUSE_DIR";
// Test-only too: BLOCKCSI_FAULT_FAIL=<name>[,...] makes FaultPoint(name)
// return INTERNAL (a final code) at that step, so that a test can make a call
// fail for good half-way through and check it took back what it had done.
inline constexpr char kFaultFailEnv[] = "BLOCKCSI_FAULT_FAIL";

// A test's in-process view of the points a component reaches: called with
// each point's name (its scope applied); a non-OK return fails the call at
// that step. Empty in production.
using FaultHook = std::function<Status(std::string_view point)>;

// Reaches point `name`: dies (SIGKILL, exactly like an external kill -9: no
// destructors, no flushing) when the scoped name is listed in
// $BLOCKCSI_FAULT_POINT, pauses when it is listed in $BLOCKCSI_FAULT_PAUSE,
// returns INTERNAL "injected failure at <name>" when it is listed in
// $BLOCKCSI_FAULT_FAIL, then returns what `hook` says (OK without a hook).
Status FaultPoint(std::string_view name, const FaultHook& hook = {});

// Whether `name` is listed in `spec` (a comma separated list). Pure.
bool FaultPointListed(std::string_view spec, std::string_view name);

// The name a point is armed under in `scope`: a dotted name gets its first
// component replaced by `scope`; a name without a dot, or an empty scope,
// leaves it as is. Pure.
std::string ScopedFaultPointName(std::string_view scope, std::string_view name);

// The name FaultPoint(name) checks on the calling thread (its scope applied).
std::string ArmedFaultPointName(std::string_view name);

// While alive, FaultPoint calls on this thread use ScopedFaultPointName(role, name).
// Nests (the innermost wins). `role` must outlive the scope (a literal).
class FaultPointScope {
 public:
  explicit FaultPointScope(std::string_view role);
  ~FaultPointScope();
  FaultPointScope(const FaultPointScope&) = delete;
  FaultPointScope& operator=(const FaultPointScope&) = delete;

 private:
  std::string_view previous_;
};

}  // namespace blockcsi
