// bridge_memory_bench: what each userspace bridge costs in memory with many
// volumes staged (issue #17). Against a throw-away tgtd it stages N volumes
// through the userspace connector (the real blockcsi-bridge: libiscsi
// session → FUSE file → loop device), makes and mounts ext4 on each, writes
// and fsyncs a file (1 MiB direct, so that the bridge's buffers have seen a
// full-size request), then reads every bridge's /proc/PID/smaps_rollup:
// RSS, PSS and private (Private_Clean + Private_Dirty). Needs root and FUSE.
//   bridge_memory_bench [--volumes 64] [--sessions 1] [--bridge-dir DIR] [--smaps-dir DIR]
// --bridge-dir runs the blockcsi-bridge found there instead of this build's
// (e.g. a script that execs an older plugin's `blockcsi bridge`, for a
// before/after figure). --smaps-dir keeps the /proc/PID/smaps of the bridge
// whose private memory is the median as DIR/bridge.smaps
// (hack/smaps_by_mapping.py sums it by mapping; hack/bench.sh tables it).
#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "attach/attacher_factory.h"
#include "bench/bench_args.h"
#include "bench/bench_attacher.h"
#include "bench/bench_report.h"
#include "bench/process_rss.h"
#include "common/atomic_file.h"
#include "common/executor.h"
#include "common/host.h"
#include "common/logging.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi::bench {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

bool Run(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }

// Writes 4 MiB in 1 MiB O_DIRECT requests to `path` and fsyncs it.
bool WriteFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_DIRECT, 0600);
  if (fd < 0) return false;
  void* buf = nullptr;
  if (::posix_memalign(&buf, 4096, kMiB) != 0) return false;
  std::memset(buf, 0x5a, kMiB);
  bool ok = true;
  for (int i = 0; i < 4 && ok; ++i) ok = ::pwrite(fd, buf, kMiB, static_cast<off_t>(i * kMiB)) == kMiB;
  ok = ok && ::fsync(fd) == 0;
  std::free(buf);
  ::close(fd);
  return ok;
}

int Main(int argc, char** argv) {
  int volumes = 64, sessions = 1;
  std::string bridge_dir = testing::BinDir();
  CLI::App app{"bridge_memory_bench: each userspace bridge's memory with N volumes staged", "bridge_memory_bench"};
  app.add_option("--volumes", volumes, "volumes staged")->capture_default_str();
  app.add_option("--sessions", sessions, "iSCSI sessions per bridge")->capture_default_str();
  app.add_option("--bridge-dir", bridge_dir, "where blockcsi-bridge is")->capture_default_str();
  std::string smaps_dir;
  app.add_option("--smaps-dir", smaps_dir, "keep the median bridge's /proc/PID/smaps here");
  if (auto exit_code = ParseFlags(app, argc, argv)) return *exit_code;
  InitLogging("bridge_memory_bench", LogFormat::kText, LogLevel::kWarn);
  std::string error;
  auto tgtd = testing::TgtdHarness::Start(&error);
  if (!tgtd) {
    std::fprintf(stderr, "bridge_memory_bench: %s\n", error.c_str());
    return 1;
  }
  testing::TempDir tmp;
  auto attacher = MakeBenchAttacher(tmp.Join("state"), sessions, bridge_dir);
  if (!attacher.ok()) return 1;
  std::vector<std::string> ids, mounts;
  std::vector<int> pids;
  bool ok = true;
  for (int v = 0; v < volumes && ok; ++v) {
    std::string id = "mem" + std::to_string(v), iqn = "iqn.2026-12.io.blockcsi.bench:" + id;
    std::string backing = tmp.Join(id + ".img");
    ok = Run("truncate -s 64M " + backing);
    std::string tid = std::to_string(v + 1);
    tgtd->Tgtadm({"--op", "new", "--mode", "target", "--tid", tid, "-T", iqn});
    tgtd->Tgtadm({"--op", "new", "--mode", "logicalunit", "--tid", tid, "--lun", "1", "-b", backing});
    tgtd->Tgtadm({"--op", "update", "--mode", "logicalunit", "--tid", tid, "--lun", "1", "--params", "scsi_sn=" + id});
    tgtd->Tgtadm({"--op", "bind", "--mode", "target", "--tid", tid, "--initiator-name", InitiatorIqnForNode("bench")});
    auto spec = ParseAttachSpec(id,
                                {{publish_context::kPortals, tgtd->portal()},
                                 {publish_context::kTargetIqn, iqn},
                                 {publish_context::kLun, "1"},
                                 {publish_context::kSerial, id}},
                                {}, InitiatorIqnForNode("bench"));
    auto record = ok && spec.ok() ? (*attacher)->Attach(*spec) : StatusOr<AttachRecord>(Internal("setup"));
    if (!record.ok()) {
      std::fprintf(stderr, "bridge_memory_bench: %s: %s\n", id.c_str(), record.status().ToString().c_str());
      ok = false;
      break;
    }
    ids.push_back(id);
    pids.push_back(std::stoi(record->connector_state.at("bridge_pid")));
    std::string mnt = tmp.Join("mnt-" + id);
    ok = Run("mkfs.ext4 -q -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 " + record->device_path) &&
         MakeDirectories(mnt, 0700).ok() && ::mount(record->device_path.c_str(), mnt.c_str(), "ext4", 0, "") == 0;
    if (ok) mounts.push_back(mnt);
    ok = ok && WriteFile(mnt + "/data");
  }
  std::vector<double> rss, pss, priv;
  if (ok) {
    for (int pid : pids) {
      auto r = ProcMibFields(pid, "smaps_rollup");
      rss.push_back(r["Rss"]);
      pss.push_back(r["Pss"]);
      priv.push_back(r["Private_Clean"] + r["Private_Dirty"]);
    }
    std::printf("%d volumes staged (ext4, 4 MiB written in 1 MiB O_DIRECT requests + fsync), %d session(s) each\n",
                volumes, sessions);
    std::printf("per bridge, min / median / max MiB: RSS %s, PSS %s, private %s\n", Spread(rss, "").c_str(),
                Spread(pss, "").c_str(), Spread(priv, "").c_str());
    std::printf("RESULT\tbridge RSS MiB (%d staged)\t%s\t-\t-\n", volumes, Spread(rss, "").c_str());
    std::printf("RESULT\tbridge PSS MiB (%d staged)\t%s\t-\t-\n", volumes, Spread(pss, "").c_str());
    std::printf("RESULT\tbridge private MiB (%d staged)\t%s\t-\t-\n", volumes, Spread(priv, "").c_str());
    if (!smaps_dir.empty() && !pids.empty()) {
      // The bridge whose private memory is the median: the typical one.
      std::vector<size_t> order(pids.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return priv[a] < priv[b]; });
      const int pid = pids[order[order.size() / 2]];
      const std::string smaps = testing::ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/smaps");
      ok = MakeDirectories(smaps_dir, 0755).ok() && WriteFileAtomically(smaps_dir + "/bridge.smaps", smaps).ok() &&
           !smaps.empty();
      if (!ok) std::fprintf(stderr, "bridge_memory_bench: cannot keep the smaps of bridge %d\n", pid);
    }
  }
  if (std::getenv("BRIDGE_MEMORY_HOLD") != nullptr) {
    std::printf("holding for inspection (pids %d..); press Enter\n", pids.empty() ? 0 : pids.front());
    std::getchar();
  }
  for (const auto& m : mounts) ::umount2(m.c_str(), 0);
  for (const auto& id : ids) {
    Status st = (*attacher)->Detach(id);
    if (!st.ok()) std::fprintf(stderr, "bridge_memory_bench: detach %s: %s\n", id.c_str(), st.ToString().c_str());
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace blockcsi::bench

int main(int argc, char** argv) { return blockcsi::bench::Main(argc, argv); }
