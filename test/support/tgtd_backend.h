// OpenBackendOnTgtd: the local backend over a test's private tgtd, as
// blockcsi-target runs it, for the suites that drive a real tgtd through the
// backend. Header-only, so that only those suites link the backend.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "backend/local/local_backend.h"
#include "backend/local/tgt_exporter.h"
#include "backend/local/tgtadm_control.h"
#include "backend/local/tgtd_socket_control.h"
#include "common/executor.h"
#include "common/host.h"
#include "support/tgtd_harness.h"

namespace blockcsi::testing {

// How the exporter drives tgtd: its management socket (the agent's default)
// or tgtadm.
enum class TgtdDriven { kBySocket, kByTgtadm };

inline StatusOr<std::shared_ptr<LocalBackend>> OpenBackendOnTgtd(const TgtdHarness& tgtd, const std::string& pool_dir,
                                                                 LocalBackendOptions options, TgtdDriven driven) {
  options.portals = {tgtd.portal()};
  std::shared_ptr<TgtdControl> control;
  if (driven == TgtdDriven::kBySocket) {
    control = std::make_shared<TgtdSocketControl>(tgtd.control_port());
  } else {
    control = std::make_shared<TgtadmControl>(std::shared_ptr<Executor>(MakeProcessExecutor()), tgtd.control_port());
  }
  auto exporter = std::make_shared<TgtExporter>(std::move(control), tgtd.control_port(), MachineHost());
  return LocalBackend::Open(pool_dir, exporter, options);
}

}  // namespace blockcsi::testing
