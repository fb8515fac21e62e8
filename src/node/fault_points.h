// Test-only crash injection: the kill -9 fault tests set
// BLOCKCSI_FAULT_POINT=<name>[,<name>...] and the plugin kills itself with
// SIGKILL when it reaches a named step (after-attach, after-mkfs, ...).
// Inert when the variable is unset. Thread-safe.
#pragma once

#include <string_view>

namespace blockcsi {

inline constexpr char kFaultPointEnv[] = "BLOCKCSI_FAULT_POINT";

// Dies (SIGKILL, exactly like an external kill -9: no destructors, no
// flushing) when `name` is listed in $BLOCKCSI_FAULT_POINT.
void FaultPoint(std::string_view name);

// Whether `name` is listed in `spec` (a comma separated list). Pure.
bool FaultPointListed(std::string_view spec, std::string_view name);

}  // namespace blockcsi
