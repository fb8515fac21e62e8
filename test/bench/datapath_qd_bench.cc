// datapath_qd_bench: the userspace data path at queue depth 1..32 against
// raw libiscsi on the same LUN (issue #17 item 5). One throw-away tgtd, one
// fully written LUN attached through the userspace connector; per job
// (4 KiB random read and write at each --depths value, 1 MiB sequential read
// and write at each --seq-depths value) fio runs on the loop device
// (libaio, direct, iodepth N) and iscsi_qd_bench runs raw libiscsi on the
// LUN (async, N in flight), each for --seconds, same seed. A warm-up round
// is dropped, the side that goes first alternates per round, and each
// figure is the median of the rounds with min / median / max of both sides.
// Both sides are separate processes started the same way; neither side's
// start-up or login is timed. Write jobs end with a timed flush on both
// sides (fio end_fsync; SYNCHRONIZE CACHE). Needs root, tgtd, FUSE, loop devices and fio.
//
//   datapath_qd_bench [--size-mib 256] [--rounds 4] [--seconds 5]
//                     [--depths 1,4,16,32] [--seq-depths 1] [--seed 7]
//                     [--image-dir DIR (the LUN's backing file; bench.sh: a tmpfs)]
//                     [--fuse-paths dev_fuse,io_uring]
//
// Each FUSE path (how the bridge is reached: /dev/fuse reads and writes, or
// FUSE over io_uring, chosen by the fuse module's enable_uring parameter at
// the bridge's start and put back after) gets its own attach and its own
// rounds against raw libiscsi; a path the kernel does not offer is reported
// as skipped.
//
// Besides the RESULT lines of bench_report.h it prints one line per job for
// hack/bench.sh's table and chart:
//   QD<TAB>pattern<TAB>depth<TAB>unit<TAB>loop min/med/max<TAB>raw min/med/max
//     <TAB>ratio<TAB>loop median<TAB>raw median<TAB>loop lat us<TAB>raw lat us<TAB>FUSE path
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/bench_lun.h"
#include "bench/bench_report.h"
#include "bench/fio_job.h"
#include "common/executor.h"
#include "common/logging.h"
#include "support/fuse_uring_param.h"
#include "support/test_util.h"

namespace blockcsi::bench {
namespace {

struct Options {
  uint64_t size_mib = 256;
  int rounds = 4;
  int seconds = 5;
  std::vector<int> depths = {1, 4, 16, 32};
  std::vector<int> seq_depths = {1};
  unsigned seed = 7;
  std::string image_dir;  // where the LUN's backing file goes ("" = a temp dir)
  std::vector<std::string> fuse_paths = {"dev_fuse"};
};

// nullopt: go on; else the exit code (help or usage error printed).
std::optional<int> ParseOptions(int argc, char** argv, Options* o) {
  CLI::App app{"datapath_qd_bench: the userspace data path at queue depth N against raw libiscsi", "datapath_qd_bench"};
  app.add_option("--size-mib", o->size_mib, "LUN size")
      ->check(CLI::Range(uint64_t{8}, uint64_t{1} << 30))
      ->capture_default_str();
  AddRounds(app, "--rounds", &o->rounds, 2, "measured rounds (the two sides take turns to go first)")
      ->check(CLI::Range(2, 1000));
  app.add_option("--seconds", o->seconds, "each run's time")->check(CLI::Range(1, 3600))->capture_default_str();
  AddCountList(app, "--depths", &o->depths, "4 KiB random jobs' queue depths");
  AddCountList(app, "--seq-depths", &o->seq_depths, "1 MiB sequential jobs' queue depths");
  app.add_option("--seed", o->seed, "random offsets' seed")->capture_default_str();
  app.add_option("--image-dir", o->image_dir, "the LUN's backing file's directory (default: a temp dir)");
  app.add_option("--fuse-paths", o->fuse_paths, "FUSE paths to measure, each against raw libiscsi")
      ->delimiter(',')
      ->check(CLI::IsMember({"dev_fuse", "io_uring"}))
      ->capture_default_str();
  return ParseFlags(app, argc, argv);
}

struct Job {
  std::string rw;  // fio's and iscsi_qd_bench's --rw
  uint32_t bs = 4096;
  int depth = 1;
  bool random() const { return rw.starts_with("rand"); }
  // IOPS for 4 KiB random, MiB/s for sequential.
  const char* unit() const { return random() ? "IOPS" : "MiB/s"; }
  std::string Pattern() const {
    std::string size = bs >= (1u << 20) ? std::to_string(bs >> 20) + " MiB" : std::to_string(bs >> 10) + " KiB";
    return size + (random() ? " random " : " sequential ") + (rw.find("write") != std::string::npos ? "write" : "read");
  }
};

struct Samples {
  std::vector<double> loop, raw, loop_lat_us, raw_lat_us;
  std::vector<double> bridge_us;  // the bridge's mean time per request waiting on the storage
};

// One raw run: iscsi_qd_bench from this program's own directory.
bool RunRaw(const AttachedBenchLun& lun, const Job& job, const Options& o, double* figure, double* lat_us) {
  static const std::string self_dir = std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
  auto exec = MakeProcessExecutor();
  Command c(self_dir + "/iscsi_qd_bench");
  c.Args({"--portal", lun.portal(), "--target", AttachedBenchLun::kIqn, "--initiator", AttachedBenchLun::RawInitiator(),
          "--lun", "1", "--rw", job.rw, "--bs", std::to_string(job.bs), "--qd", std::to_string(job.depth), "--seconds",
          std::to_string(o.seconds), "--seed", std::to_string(o.seed)})
      .Timeout(std::chrono::seconds(o.seconds + 120));
  auto r = RunChecked(*exec, c);
  if (!r.ok()) {
    std::fprintf(stderr, "datapath_qd_bench: %s\n", r.status().ToString().c_str());
    return false;
  }
  double iops = 0, mibps = 0, median = 0, ops = 0;
  if (std::sscanf(r->stdout_text.c_str(), "QDRESULT\t%lf\t%lf\t%lf\t%lf", &iops, &mibps, &median, &ops) != 4) {
    std::fprintf(stderr, "datapath_qd_bench: no QDRESULT from iscsi_qd_bench\n");
    return false;
  }
  *figure = job.random() ? iops : mibps;
  *lat_us = median;
  return true;
}

bool RunLoop(const AttachedBenchLun& lun, const Job& job, const Options& o, double* figure, double* lat_us,
             double* bridge_us) {
  const char* op = job.rw.find("write") != std::string::npos ? "write" : "read";
  auto before = lun.BridgeIo(op);
  FioJob f;
  f.device = lun.device();
  f.rw = job.rw;
  f.bs = std::to_string(job.bs >> 10) + "k";
  f.ioengine = "libaio";
  f.iodepth = job.depth;
  f.seconds = o.seconds;
  f.seed = o.seed;
  FioFigures got;
  if (!RunFio(f, &got)) return false;
  *figure = job.random() ? got.iops : got.mibps;
  *lat_us = got.median_lat_us;
  auto after = lun.BridgeIo(op);
  *bridge_us = after.first > before.first ? (after.second - before.second) * 1e6 / (after.first - before.first) : 0;
  return true;
}

// The measured rounds of every job; false when a run failed.
bool Measure(const AttachedBenchLun& lun, const std::vector<Job>& jobs, const Options& o,
             std::vector<Samples>* samples) {
  samples->assign(jobs.size(), {});
  for (int round = -1; round < o.rounds; ++round) {
    std::fprintf(stderr, "datapath_qd_bench: round %d of %d%s\n", round + 1, o.rounds, round < 0 ? " (warm-up)" : "");
    bool raw_first = round < 0 || round % 2 == 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      double loop = 0, raw = 0, loop_lat = 0, raw_lat = 0, bridge = 0;
      bool ok = raw_first
                    ? RunRaw(lun, jobs[i], o, &raw, &raw_lat) && RunLoop(lun, jobs[i], o, &loop, &loop_lat, &bridge)
                    : RunLoop(lun, jobs[i], o, &loop, &loop_lat, &bridge) && RunRaw(lun, jobs[i], o, &raw, &raw_lat);
      if (!ok) return false;
      if (round < 0) continue;
      auto& s = (*samples)[i];
      s.loop.push_back(loop);
      s.raw.push_back(raw);
      s.loop_lat_us.push_back(loop_lat);
      s.raw_lat_us.push_back(raw_lat);
      s.bridge_us.push_back(bridge);
    }
  }
  return true;
}

void Print(const std::vector<Job>& jobs, const std::vector<Samples>& samples, const Options& o,
           const std::string& path) {
  std::printf(
      "queue depth: fio (libaio, direct) on the loop device against raw libiscsi (iscsi_qd_bench, async) on the "
      "same %llu MiB LUN, %d s per run, %d rounds after a discarded warm-up, sides alternating\n",
      static_cast<unsigned long long>(o.size_mib), o.seconds, o.rounds);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    const Samples& s = samples[i];
    std::string figure = j.Pattern() + " QD" + std::to_string(j.depth) + " " + j.unit() + ", loop device (fio)" +
                         (path == "dev_fuse" ? "" : ", FUSE over " + path);
    ReportSamples(figure, s.loop, s.raw, j.unit(), "raw libiscsi, iscsi_qd_bench");
    double m = Median(s.loop), b = Median(s.raw);
    std::printf("QD\t%s\t%d\t%s\t%s\t%s\t%.2f\t%.1f\t%.1f\t%.0f\t%.0f\t%s\n", j.Pattern().c_str(), j.depth, j.unit(),
                Spread(s.loop, j.unit()).c_str(), Spread(s.raw, j.unit()).c_str(), b > 0 ? m / b : 0.0, m, b,
                Median(s.loop_lat_us), Median(s.raw_lat_us), path.c_str());
    // Where a request's time goes: fio's median through the loop device,
    // of which the bridge waited on the storage (its own mean), the rest
    // being the kernel's loop and FUSE hand-over and the bridge's own work.
    std::printf(
        "QDSPLIT\t%s\t%d\t%s\tfio median %.0f us\tbridge waiting on iSCSI %.0f us\tloop+FUSE+bridge %.0f us"
        "\traw libiscsi median %.0f us\n",
        j.Pattern().c_str(), j.depth, path.c_str(), Median(s.loop_lat_us), Median(s.bridge_us),
        Median(s.loop_lat_us) - Median(s.bridge_us), Median(s.raw_lat_us));
  }
  std::fflush(stdout);
}

// One FUSE path: the parameter set, the LUN attached (its bridge chooses the
// path at INIT), the rounds, the table. 0, or the exit code.
int MeasurePath(const std::vector<Job>& jobs, const Options& o, const std::string& path) {
  testing::FuseUringParameter param;
  if (!param.Set(path == "io_uring")) {
    std::printf("SKIP\tFUSE over %s: no writable %s\n", path.c_str(), testing::FuseUringParameter::kPath);
    return path == "io_uring" ? 0 : 1;
  }
  std::string error;
  auto lun = AttachedBenchLun::Start(o.size_mib, &error, o.image_dir);
  if (!lun) {
    std::fprintf(stderr, "datapath_qd_bench: %s\n", error.c_str());
    return 1;
  }
  std::string got = lun->FusePath();
  std::printf("fuse path: %s (asked for %s)\n", got.c_str(), path.c_str());
  if (got != path) {
    std::printf("SKIP\tFUSE over %s: the bridge serves %s\n", path.c_str(), got.c_str());
    return 0;
  }
  // Whether the loop device reads and writes its backing FUSE file with
  // O_DIRECT: when it does not, the host's page cache of that file sits
  // between fio and the bridge (reads can be served, writes absorbed).
  std::string dev_name = lun->device().substr(lun->device().rfind('/') + 1);
  std::string dio = testing::ReadFileOrEmpty("/sys/block/" + dev_name + "/loop/dio");
  std::printf("loop device direct I/O: %s\n", dio.empty() ? "unknown" : dio.substr(0, 1).c_str());
  std::vector<Samples> samples;
  if (!Measure(*lun, jobs, o, &samples)) {
    std::fprintf(stderr, "datapath_qd_bench: a run failed\n");
    return 1;
  }
  Print(jobs, samples, o, path);
  return 0;
}

int Main(int argc, char** argv) {
  Options o;
  if (auto exit_code = ParseOptions(argc, argv, &o)) return *exit_code;
  InitLogging("datapath_qd_bench", LogFormat::kText, LogLevel::kWarn);
  if (!testing::IsRoot() || ::access("/dev/fuse", R_OK | W_OK) != 0 || ::access("/usr/bin/fio", X_OK) != 0) {
    std::fprintf(stderr, "datapath_qd_bench: needs root, /dev/fuse and fio (hack/install-deps.sh)\n");
    return 2;
  }
  std::vector<Job> jobs;
  for (const char* rw : {"randread", "randwrite"}) {
    for (int d : o.depths) jobs.push_back({rw, 4096, d});
  }
  for (const char* rw : {"read", "write"}) {
    for (int d : o.seq_depths) jobs.push_back({rw, 1u << 20, d});
  }
  for (const std::string& path : o.fuse_paths) {
    if (int rc = MeasurePath(jobs, o, path); rc != 0) return rc;
  }
  return 0;
}

}  // namespace
}  // namespace blockcsi::bench

int main(int argc, char** argv) { return blockcsi::bench::Main(argc, argv); }
