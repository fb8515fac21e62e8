// datapath_bench: 4 KiB random reads and writes (one in flight) through the
// userspace connector's loop device (the real `blockcsi bridge`: libiscsi
// session → FUSE file → loop device, O_DIRECT) against raw libiscsi
// READ(16)/WRITE(16) on the same LUN of a throw-away tgtd, same offsets,
// a warm-up round dropped, the side that goes first alternating per round,
// each figure with its min / median / max. Sequential 1 MiB is
// attach_bench's (same setup).
// When fio is installed it also cross-checks our own tool on the loop
// device against fio (psync, direct, QD1; sequential 1 MiB and random
// 4 KiB): both do the same work on the same device for the same time, in
// rounds like the above (FioCrossCheck). Debian's fio has no libiscsi
// engine, so fio's view of raw libiscsi is section 8's (datapath_qd_bench).
// Needs root and FUSE.
//   datapath_bench [--size-mib 256] [--ops 2000] [--rounds 4 (even)] [--fio-seconds 5]
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

// The cross-check of our own loop-device figures against fio: for each job
// (4 KiB random read and write, 1 MiB sequential read and write), fio
// (psync, direct, one in flight) and our own tool run the same work on the
// same loop device for the same time: the same pattern and block size,
// random offsets uniform over the device with replacement (fio
// --norandommap), sequential ones from 0 wrapping at the end, writes ending
// with a timed fsync of the device (fio --end_fsync). A warm-up round is
// dropped and the two take turns to go first over `rounds` (even) rounds;
// the ratio fio / own tool is near 1 where our tool measures what fio does.
bool FioCrossCheck(int dev, const std::string& device, uint64_t size, int seconds, int rounds) {
  struct Job {
    const char* figure;
    const char* rw;
    const char* bs;
    size_t block;
    bool random, write;
    const char* unit;
  };
  const Job jobs[] = {{"fio 4 KiB randread IOPS, loop device", "randread", "4k", kBlock, true, false, "IOPS"},
                      {"fio 4 KiB randwrite IOPS, loop device", "randwrite", "4k", kBlock, true, true, "IOPS"},
                      {"fio 1 MiB sequential read, loop device", "read", "1m", kMiB, false, false, "MiB/s"},
                      {"fio 1 MiB sequential write, loop device", "write", "1m", kMiB, false, true, "MiB/s"}};
  void* buf = nullptr;
  if (::posix_memalign(&buf, kBlock, kMiB) != 0) return false;
  std::memset(buf, 0x5a, kMiB);
  std::mt19937_64 rng(11);
  bool ok = true;
  std::printf(
      "fio %d s per job on the same loop device (psync, direct, QD1) against our own tool doing the same for the "
      "same time, %d rounds after a discarded warm-up, sides alternating\n",
      seconds, rounds);
  for (const auto& job : jobs) {
    std::vector<double> fio, own;
    // Our side: ops/s (MiB/s for 1 MiB blocks) over `seconds`, the closing
    // fsync of a write job included.
    auto own_run = [&](bool keep) {
      const uint64_t blocks = size / job.block;
      uint64_t next = 0, ops = 0;
      auto t0 = Clock::now();
      const auto end = t0 + std::chrono::seconds(seconds);
      while (ok && Clock::now() < end) {
        const uint64_t off = (job.random ? rng() % blocks : next++ % blocks) * job.block;
        const ssize_t n = job.write ? ::pwrite(dev, buf, job.block, static_cast<off_t>(off))
                                    : ::pread(dev, buf, job.block, static_cast<off_t>(off));
        ok = n == static_cast<ssize_t>(job.block);
        ops += ok ? 1 : 0;
      }
      if (ok && job.write) ok = ::fsync(dev) == 0;
      const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
      // Operations per second: IOPS, or MiB/s for 1 MiB blocks.
      if (keep) own.push_back(static_cast<double>(ops) / elapsed);
    };
    auto fio_run = [&](bool keep) {
      FioJob f;
      f.device = device;
      f.rw = job.rw;
      f.bs = job.bs;
      f.ioengine = "psync";
      f.seconds = seconds;
      FioFigures got;
      if (!RunFio(f, &got)) {
        ok = false;
        return;
      }
      if (keep) fio.push_back(job.block == kMiB ? got.mibps : got.iops);
    };
    for (int round = -1; round < rounds && ok; ++round) {
      if ((round + 1) % 2 == 0) {
        fio_run(round >= 0);
        own_run(round >= 0);
      } else {
        own_run(round >= 0);
        fio_run(round >= 0);
      }
    }
    if (!ok) {
      std::fprintf(stderr, "datapath_bench: %s failed\n", job.figure);
      break;
    }
    ReportSamples(job.figure, fio, own, job.unit, "own tool, same work on the loop device");
  }
  std::free(buf);
  return ok;
}

int Main(int argc, char** argv) {
  uint64_t mib = 256;
  int ops = 2000, rounds = 4, fio_seconds = 5;
  CLI::App app{"datapath_bench: 4 KiB random I/O, loop device against raw libiscsi", "datapath_bench"};
  app.add_option("--size-mib", mib, "LUN size")->capture_default_str();
  app.add_option("--ops", ops, "operations per side per round")->capture_default_str();
  AddRounds(app, "--rounds", &rounds, 2, "measured rounds (the two sides take turns to go first)");
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
          if (!FioCrossCheck(dev, device, size, fio_seconds, rounds)) rc = 1;
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
