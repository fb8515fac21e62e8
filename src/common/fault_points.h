// Test-only crash injection: the kill -9 fault tests set
// BLOCKCSI_FAULT_POINT=<name>[,<name>...] and the process kills itself with
// SIGKILL when it reaches a named step (node: after-attach, after-mkfs, ...;
// controller side: controller.create.after-record, ...). Inert when the
// variable is unset. Thread-safe.
//
// Code shared by two processes (the local backend runs inside the plugin
// with --backend local and inside blockcsi-target) names its points
// "controller.<op>.<step>". A FaultPointScope("agent") on the calling thread
// renames them to "agent.<op>.<step>", so a point can be armed in one of the
// two processes only.
#pragma once

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
// Test-only too: BLOCKCSI_FAULT_FAIL=<name>[,...] makes FaultStatus(name)
// return INTERNAL (a final code) at that step, so that a test can make a call
// fail for good half-way through and check it took back what it had done.
inline constexpr char kFaultFailEnv[] = "BLOCKCSI_FAULT_FAIL";

// Dies (SIGKILL, exactly like an external kill -9: no destructors, no
// flushing) when `name` (renamed by this thread's scope) is listed in
// $BLOCKCSI_FAULT_POINT; pauses when it is listed in $BLOCKCSI_FAULT_PAUSE.
void FaultPoint(std::string_view name);

// FaultPoint(name), then INTERNAL "injected failure at <name>" when `name`
// (renamed by this thread's scope) is listed in $BLOCKCSI_FAULT_FAIL; OK
// otherwise. For steps after which a failure must be rolled back.
Status FaultStatus(std::string_view name);

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
