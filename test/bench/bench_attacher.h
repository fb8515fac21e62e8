// The benchmarks' node: the userspace connector's attacher (bridge → FUSE
// file → loop device) as node "bench", as the plugin builds it.
#pragma once

#include <memory>
#include <string>

#include "attach/attacher_factory.h"
#include "support/test_util.h"

namespace blockcsi::bench {

// Its attach records under `state_dir`; the bridge programs in
// `bridge_dir` (default: this build's).
inline StatusOr<std::unique_ptr<VolumeAttacher>> MakeBenchAttacher(const std::string& state_dir,
                                                                   int bridge_sessions = 1,
                                                                   const std::string& bridge_dir = testing::BinDir()) {
  AttacherOptions ao;
  ao.connector = "userspace";
  ao.state_dir = state_dir;
  ao.node_id = "bench";
  ao.bridge_dir = bridge_dir;
  ao.bridge_sessions = bridge_sessions;
  ao.host_fs = MachineHost();
  ao.state_files = MachineHost();
  return MakeVolumeAttacher(ao);
}

}  // namespace blockcsi::bench
