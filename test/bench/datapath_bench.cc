// datapath_bench: 4 KiB random reads and writes (one in flight) through the
// userspace connector's loop device (the real `blockcsi bridge`: libiscsi
// session → FUSE file → loop device, O_DIRECT) against raw libiscsi
// READ(16)/WRITE(16) on the same LUN of a throw-away tgtd, same offsets,
// a warm-up round dropped, the side that goes first alternating per round,
// each figure with its min / median / max. Sequential 1 MiB is
// attach_bench's (same setup).
// When fio is installed it also runs fio on the same loop device (psync,
// direct, QD1; sequential 1 MiB and random 4 KiB) as a cross-check of our
// own loop figures, set against our raw libiscsi figures (Debian's fio has
// no libiscsi engine). Needs root and FUSE.
//   datapath_bench [--size-mib 256] [--ops 2000] [--rounds 3] [--fio-seconds 10]
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "bench/bench_args.h"
#include "bench/bench_lun.h"
#include "bench/bench_report.h"
#include "bench/fio_job.h"
#include "bridge/libiscsi_session.h"
#include "common/logging.h"
#include "support/test_util.h"

namespace blockcsi::bench {
namespace {

constexpr size_t kBlock = 4096;
constexpr size_t kMiB = 1024 * 1024;

struct Figures {
  double iops = 0;
  double median_us = 0;
};

// `ops` operations at the given 4 KiB-aligned byte offsets; `io` does one.
template <typename Io>
bool Measure(const std::vector<uint64_t>& offsets, Io io, Figures* out) {
  std::vector<double> lat;
  lat.reserve(offsets.size());
  auto start = Clock::now();
  for (uint64_t off : offsets) {
    auto t0 = Clock::now();
    if (!io(off)) return false;
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out->iops = static_cast<double>(offsets.size()) / seconds;
  out->median_us = Median(lat);
  return true;
}

// fio on `device`, psync (one in flight); returns IOPS and MiB/s.
bool Fio(const std::string& device, const std::string& rw, const std::string& bs, int seconds, double* iops,
         double* mibps) {
  FioJob job;
  job.device = device;
  job.rw = rw;
  job.bs = bs;
  job.ioengine = "psync";
  job.seconds = seconds;
  FioFigures got;
  if (!RunFio(job, &got)) return false;
  *iops = got.iops;
  *mibps = got.mibps;
  return true;
}

int Main(int argc, char** argv) {
  uint64_t mib = 256;
  int ops = 2000, rounds = 3, fio_seconds = 10;
  CLI::App app{"datapath_bench: 4 KiB random I/O, loop device against raw libiscsi", "datapath_bench"};
  app.add_option("--size-mib", mib, "LUN size")->capture_default_str();
  app.add_option("--ops", ops, "operations per side per round")->capture_default_str();
  app.add_option("--rounds", rounds, "measured rounds")->capture_default_str();
  app.add_option("--fio-seconds", fio_seconds, "each fio job's run time")->capture_default_str();
  if (auto exit_code = ParseFlags(app, argc, argv)) return *exit_code;
  InitLogging("datapath_bench", LogFormat::kText, LogLevel::kWarn);
  if (!testing::IsRoot() || ::access("/dev/fuse", R_OK | W_OK) != 0) {
    std::fprintf(stderr, "datapath_bench: needs root and /dev/fuse\n");
    return 2;
  }
  std::string error;
  auto lun = AttachedBenchLun::Start(mib, &error);
  if (!lun) {
    std::fprintf(stderr, "datapath_bench: %s\n", error.c_str());
    return 1;
  }
  const uint64_t size = lun->size_bytes();
  const std::string device = lun->device();
  int rc = 0;
  {
    LibIscsiOptions o;
    o.portals = {lun->portal()};
    o.target_iqn = AttachedBenchLun::kIqn;
    o.lun = 1;
    o.initiator_iqn = AttachedBenchLun::RawInitiator();
    auto session = LibIscsiSession::Connect(o);
    int dev = ::open(device.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    void* buf = nullptr;
    if (!session.ok() || dev < 0 || ::posix_memalign(&buf, kBlock, kMiB) != 0) {
      std::fprintf(stderr, "datapath_bench: cannot open both paths\n");
      rc = 1;
    } else {
      std::memset(buf, 0x5a, kMiB);
      uint32_t bs = (*session)->block_size();
      std::vector<double> raw_r, raw_w, loop_r, loop_w, raw_r_us, raw_w_us, loop_r_us, loop_w_us;
      std::mt19937_64 rng(7);
      // Round -1 is a warm-up, discarded (first touch of the LUN's blocks
      // in tgtd's and the host's caches, first FUSE requests); then the side
      // that goes first alternates per measured round.
      for (int round = -1; round < rounds && rc == 0; ++round) {
        std::vector<uint64_t> offsets(ops);
        for (auto& off : offsets) off = (rng() % (size / kBlock)) * kBlock;
        Figures f;
        auto raw_read = [&](uint64_t off) { return (*session)->Read(off / bs, kBlock / bs, buf).ok(); };
        auto raw_write = [&](uint64_t off) { return (*session)->Write(off / bs, kBlock / bs, buf).ok(); };
        auto loop_read = [&](uint64_t off) {
          return ::pread(dev, buf, kBlock, static_cast<off_t>(off)) == static_cast<ssize_t>(kBlock);
        };
        auto loop_write = [&](uint64_t off) {
          return ::pwrite(dev, buf, kBlock, static_cast<off_t>(off)) == static_cast<ssize_t>(kBlock);
        };
        // The side that goes first alternates per round: the second one to
        // read the same offsets would otherwise always find them warmer.
        auto measure = [&](auto io, std::vector<double>* iops, std::vector<double>* us) {
          bool good = Measure(offsets, io, &f);
          if (round >= 0) {
            iops->push_back(f.iops);
            us->push_back(f.median_us);
          }
          return good;
        };
        bool ok = true;
        if (round < 0 || round % 2 == 0) {
          ok = measure(raw_read, &raw_r, &raw_r_us) && measure(loop_read, &loop_r, &loop_r_us) &&
               measure(raw_write, &raw_w, &raw_w_us) && measure(loop_write, &loop_w, &loop_w_us);
        } else {
          ok = measure(loop_read, &loop_r, &loop_r_us) && measure(raw_read, &raw_r, &raw_r_us) &&
               measure(loop_write, &loop_w, &loop_w_us) && measure(raw_write, &raw_w, &raw_w_us);
        }
        if (!ok) {
          std::fprintf(stderr, "datapath_bench: an I/O failed in round %d\n", round);
          rc = 1;
        }
      }
      if (rc == 0) {
        std::printf(
            "4 KiB random, QD1, %d ops x %d rounds after a discarded warm-up, sides alternating, on a %s LUN "
            "(own tool both sides)\n",
            ops, rounds, Format(static_cast<double>(mib), "MiB").c_str());
        ReportSamples("4 KiB random read IOPS, loop device (O_DIRECT)", loop_r, raw_r, "IOPS", "raw libiscsi");
        ReportSamples("4 KiB random write IOPS, loop device (O_DIRECT)", loop_w, raw_w, "IOPS", "raw libiscsi");
        ReportSamples("4 KiB random read median latency, loop device", loop_r_us, raw_r_us, "us", "raw libiscsi");
        ReportSamples("4 KiB random write median latency, loop device", loop_w_us, raw_w_us, "us", "raw libiscsi");
        if (::access("/usr/bin/fio", X_OK) == 0) {
          ::close(dev);
          dev = -1;
          std::printf(
              "fio %ds per job on the same loop device (psync, direct, QD1); baseline: raw libiscsi "
              "(own tool) just before and just after each job (median of the two)\n",
              fio_seconds);
          // Raw figure for one fio job's pattern: ops/s (MiB/s for 1 MiB ops).
          auto raw_for = [&](bool random, bool write) {
            std::vector<uint64_t> offsets;
            if (random) {
              for (int i = 0; i < ops; ++i) offsets.push_back((rng() % (size / kBlock)) * kBlock);
            } else {
              for (uint64_t off = 0; off < size; off += kMiB) offsets.push_back(off);
            }
            uint32_t blocks = static_cast<uint32_t>((random ? kBlock : kMiB) / bs);
            Figures f;
            bool ok = Measure(
                offsets,
                [&](uint64_t off) {
                  return write ? (*session)->Write(off / bs, blocks, buf).ok()
                               : (*session)->Read(off / bs, blocks, buf).ok();
                },
                &f);
            return ok ? f.iops : 0.0;
          };
          struct Job {
            const char* figure;
            const char* rw;
            const char* bs;
            bool random, write;
            const char* unit;
          };
          const Job jobs[] = {{"fio 4 KiB randread IOPS, loop device", "randread", "4k", true, false, "IOPS"},
                              {"fio 4 KiB randwrite IOPS, loop device", "randwrite", "4k", true, true, "IOPS"},
                              {"fio 1 MiB sequential read, loop device", "read", "1m", false, false, "MiB/s"},
                              {"fio 1 MiB sequential write, loop device", "write", "1m", false, true, "MiB/s"}};
          for (const auto& job : jobs) {
            double before = raw_for(job.random, job.write);
            double iops = 0, mibps = 0;
            bool ran = Fio(device, job.rw, job.bs, fio_seconds, &iops, &mibps);
            double after = raw_for(job.random, job.write);
            if (ran && before > 0 && after > 0) {
              // One fio job against the raw figure just before and just
              // after it: the baseline's spread is those two.
              ReportSamples(job.figure, {job.random ? iops : mibps}, {before, after}, job.unit,
                            "raw libiscsi, own tool, before/after");
            }
          }
        } else {
          std::printf("fio not installed: no fio rows (hack/install-deps.sh installs it)\n");
        }
      }
    }
    if (dev >= 0) ::close(dev);
    std::free(buf);
  }
  return rc;
}

}  // namespace
}  // namespace blockcsi::bench

int main(int argc, char** argv) { return blockcsi::bench::Main(argc, argv); }
