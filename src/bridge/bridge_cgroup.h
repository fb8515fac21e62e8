// Where userspace bridges live in the cgroup tree, and how a process is
// recognised after a restart. A container runtime stops a container by
// killing every process in the container's cgroup (cgroup.kill); a bridge
// that stays there dies with the plugin and takes the filesystem on its loop
// device with it. With --bridge-cgroup each bridge moves itself into a cgroup
// outside the container's before it exposes anything (see docs/deploy.md,
// "Bridges and plugin restarts"). Plain functions over the Host seam;
// thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/host.h"
#include "common/status.h"

namespace blockcsi {

// Checks that `path` is an absolute path whose parent is a cgroup v2
// directory, creates `path` if missing, and checks it takes processes
// (cgroup.procs). INVALID_ARGUMENT for a relative path, FAILED_PRECONDITION
// naming the path when it is not a usable cgroup v2 directory.
Status PrepareBridgeCgroup(const Host& fs, const std::string& path);

// Writes `pid` to <path>/cgroup.procs (the whole process, all threads).
Status MoveIntoCgroup(const Host& fs, const std::string& path, pid_t pid);

// True when `pid` is listed in <path>/cgroup.procs.
bool InCgroup(const Host& fs, const std::string& path, pid_t pid);

// The start time of `pid` (field 22 of /proc/<pid>/stat, clock ticks since
// boot): with the pid it names one process for good, even once the pid is
// reused. NOT_FOUND when no such process runs.
StatusOr<uint64_t> ProcessStartTime(const Host& fs, pid_t pid);

// True when `pid` runs and started at `start_time` (ProcessStartTime).
bool ProcessIsAlive(const Host& fs, pid_t pid, uint64_t start_time);

}  // namespace blockcsi
