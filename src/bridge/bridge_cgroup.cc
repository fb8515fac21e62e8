#include "bridge/bridge_cgroup.h"

#include <linux/magic.h>
#include <sys/statfs.h>

#include <charconv>
#include <sstream>

#include "common/atomic_file.h"

namespace blockcsi {

namespace {

std::string Parent(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

bool IsCgroup2(const std::string& real_path) {
  struct statfs st {};
  return ::statfs(real_path.c_str(), &st) == 0 && st.f_type == CGROUP2_SUPER_MAGIC;
}

}  // namespace

Status PrepareBridgeCgroup(const Host& fs, const std::string& path) {
  if (path.empty() || path.front() != '/' || path.back() == '/') {
    return InvalidArgument("--bridge-cgroup \"" + path + "\" must be an absolute path without a trailing slash");
  }
  if (!IsCgroup2(fs.Resolve(Parent(path)))) {
    return FailedPrecondition("--bridge-cgroup " + path + ": " + Parent(path) +
                              " is not a cgroup v2 directory (mount the cgroup2 hierarchy, e.g. hostPath "
                              "/sys/fs/cgroup)");
  }
  // mkdir in cgroupfs makes a cgroup; one that exists already is reused
  // (bridges of an earlier plugin live in it).
  Status made = MakeDirectories(fs.Resolve(path), 0755);
  if (!made.ok()) return FailedPrecondition("--bridge-cgroup " + path + ": cannot create it: " + made.message());
  if (!fs.Exists(path + "/cgroup.procs")) {
    return FailedPrecondition("--bridge-cgroup " + path + " is not a cgroup (no cgroup.procs)");
  }
  return OkStatus();
}

Status MoveIntoCgroup(const Host& fs, const std::string& path, pid_t pid) {
  Status st = fs.WriteFile(path + "/cgroup.procs", std::to_string(pid) + "\n");
  if (!st.ok()) {
    return FailedPrecondition("cannot move pid " + std::to_string(pid) + " into cgroup " + path + ": " + st.message());
  }
  return OkStatus();
}

bool InCgroup(const Host& fs, const std::string& path, pid_t pid) {
  auto procs = fs.ReadFile(path + "/cgroup.procs");
  if (!procs.ok()) return false;
  std::istringstream in(*procs);
  std::string line;
  while (std::getline(in, line)) {
    if (line == std::to_string(pid)) return true;
  }
  return false;
}

StatusOr<uint64_t> ProcessStartTime(const Host& fs, pid_t pid) {
  std::string file = "/proc/" + std::to_string(pid) + "/stat";
  auto stat = fs.ReadFile(file);
  if (!stat.ok()) return NotFound("no process " + std::to_string(pid));
  // The command name may hold spaces and ')': fields count from the last ')'.
  size_t close = stat->rfind(')');
  if (close == std::string::npos) return Internal("malformed " + file);
  std::istringstream fields(stat->substr(close + 1));
  std::string field;
  // After ')': field 3 (state) is the first; starttime is field 22.
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return Internal("malformed " + file);
  }
  uint64_t start = 0;
  auto [p, ec] = std::from_chars(field.data(), field.data() + field.size(), start);
  if (ec != std::errc() || p != field.data() + field.size()) return Internal("malformed " + file);
  return start;
}

bool ProcessIsAlive(const Host& fs, pid_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  auto start = ProcessStartTime(fs, pid);
  return start.ok() && *start == start_time;
}

}  // namespace blockcsi
