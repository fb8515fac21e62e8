// How `blockctl cleanup --apply` carries out one step of its plan: through
// the attach layer the plugin itself uses (attacher_factory.h), so that a
// record is undone by the connector that made it (open-iscsi, krbd or a
// userspace bridge) exactly as the plugin would. The OS seams are passed in
// so tests can replay the kernel side. Not thread-safe (one verb per process).
#pragma once

#include <memory>

#include "cli/node_state.h"
#include "common/executor.h"
#include "common/host.h"
#include "common/status.h"

namespace blockcsi::cli {

struct CleanupSeams {
  std::shared_ptr<Executor> executor{};  // default: the real one
  // Required, as AttacherOptions's: the view of /sys, /proc and /dev, and
  // the files of the state dir.
  std::shared_ptr<Host> host_fs;
  std::shared_ptr<Host> state_files;
};

Status ApplyCleanupStep(const NodeSnapshot& snapshot, const CleanupStep& step, const CleanupSeams& seams);

}  // namespace blockcsi::cli
