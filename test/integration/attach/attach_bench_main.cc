// attach_bench: the userspace connector's closing numbers, measured in one
// run against a throw-away tgtd: sequential 1 MiB write/read MiB/s through
// the bridge's loop device (O_DIRECT) against raw libiscsi WRITE(16)/READ(16)
// on the same LUN, and attach/detach latency. Needs root. Prints a table.
//   attach_bench [size-MiB (default 512)] [rounds (default 4, even: the two
//                sides take turns to go first)] [bridge sessions (default 1)]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attach/attacher_factory.h"
#include "bench/bench_attacher.h"
#include "bridge/libiscsi_session.h"
#include "common/logging.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kChunk = 1024 * 1024;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int Run(int argc, char** argv) {
  using namespace blockcsi;
  size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 512;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 4;
  int sessions = argc > 3 ? std::atoi(argv[3]) : 1;
  if (rounds <= 0 || rounds % 2 != 0) {
    std::fprintf(stderr, "attach_bench: rounds must be a positive even number (the sides take turns to go first)\n");
    return 2;
  }
  InitLogging("attach_bench", LogFormat::kText, LogLevel::kWarn);
  std::string error;
  auto tgtd = testing::TgtdHarness::Start(&error);
  if (!tgtd) {
    std::fprintf(stderr, "attach_bench: %s\n", error.c_str());
    return 1;
  }
  testing::TempDir tmp;
  std::string backing = tmp.Join("lun.img");
  uint64_t size = uint64_t{mib} * kChunk;
  int fd = ::open(backing.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) return 1;
  ::close(fd);
  std::string iqn = "iqn.2026-11.io.blockcsi.bench:vol";
  tgtd->Tgtadm({"--op", "new", "--mode", "target", "--tid", "1", "-T", iqn});
  tgtd->Tgtadm({"--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1", "-b", backing});
  tgtd->Tgtadm({"--op", "update", "--mode", "logicalunit", "--tid", "1", "--lun", "1", "--params",
                "scsi_sn=benchsn,scsi_id=60000000000000000000000000bec4aa"});
  tgtd->Tgtadm({"--op", "bind", "--mode", "target", "--tid", "1", "--initiator-name", InitiatorIqnForNode("bench")});

  std::vector<char> pattern(kChunk);
  for (size_t i = 0; i < kChunk; ++i) pattern[i] = static_cast<char>(i * 31 + 7);
  void* aligned = nullptr;
  if (::posix_memalign(&aligned, 4096, kChunk) != 0) return 1;
  std::memcpy(aligned, pattern.data(), kChunk);

  // Per round, so that noise from other load on the host shows up as spread
  // instead of skewing one side. Round -1 is a warm-up, discarded: it also
  // writes every block of the sparse LUN, so that no measured round (raw
  // first or loop first) pays for filling the backing file's holes. The side
  // that goes first alternates per measured round.
  std::vector<double> raw_w, raw_r, loop_w, loop_r, ratio_w, ratio_r;
  std::vector<double> attach_ms, detach_ms;
  // Raw libiscsi, one 1 MiB command at a time (as the bridge issues them).
  auto raw_side = [&](double* w, double* r) {
    LibIscsiOptions o;
    o.portals = {tgtd->portal()};
    o.target_iqn = iqn;
    o.lun = 1;
    o.initiator_iqn = InitiatorIqnForNode("bench");
    auto session = LibIscsiSession::Connect(o);
    if (!session.ok()) {
      std::fprintf(stderr, "attach_bench: %s\n", session.status().ToString().c_str());
      return false;
    }
    uint32_t bs = (*session)->block_size();
    auto t0 = Clock::now();
    for (uint64_t off = 0; off < size; off += kChunk) {
      if (!(*session)->Write(off / bs, kChunk / bs, aligned).ok()) return false;
    }
    if (!(*session)->SynchronizeCache().ok()) return false;
    auto t1 = Clock::now();
    for (uint64_t off = 0; off < size; off += kChunk) {
      if (!(*session)->Read(off / bs, kChunk / bs, aligned).ok()) return false;
    }
    auto t2 = Clock::now();
    *w = mib / Seconds(t0, t1);
    *r = mib / Seconds(t1, t2);
    std::memcpy(aligned, pattern.data(), kChunk);
    return true;
  };
  // Through the userspace connector: bridge + FUSE + loop device.
  auto loop_side = [&](double* w, double* r, double* attach, double* detach) {
    auto attacher = blockcsi::bench::MakeBenchAttacher(tmp.Join("state"), sessions);
    if (!attacher.ok()) return false;
    auto spec = ParseAttachSpec("bench",
                                {{publish_context::kPortals, tgtd->portal()},
                                 {publish_context::kTargetIqn, iqn},
                                 {publish_context::kLun, "1"},
                                 {publish_context::kSerial, "benchsn"}},
                                {}, InitiatorIqnForNode("bench"));
    auto a0 = Clock::now();
    auto record = (*attacher)->Attach(*spec);
    auto a1 = Clock::now();
    if (!record.ok()) {
      std::fprintf(stderr, "attach_bench: %s\n", record.status().ToString().c_str());
      return false;
    }
    *attach = Seconds(a0, a1) * 1000;
    int dev = ::open(record->device_path.c_str(), O_RDWR | O_DIRECT);
    if (dev < 0) return false;
    std::memcpy(aligned, pattern.data(), kChunk);
    auto t3 = Clock::now();
    for (uint64_t off = 0; off < size; off += kChunk) {
      if (::pwrite(dev, aligned, kChunk, static_cast<off_t>(off)) != static_cast<ssize_t>(kChunk)) return false;
    }
    if (::fsync(dev) != 0) return false;
    auto t4 = Clock::now();
    for (uint64_t off = 0; off < size; off += kChunk) {
      if (::pread(dev, aligned, kChunk, static_cast<off_t>(off)) != static_cast<ssize_t>(kChunk)) return false;
    }
    auto t5 = Clock::now();
    ::close(dev);
    *w = mib / Seconds(t3, t4);
    *r = mib / Seconds(t4, t5);
    auto d0 = Clock::now();
    if (!(*attacher)->Detach("bench").ok()) return false;
    auto d1 = Clock::now();
    *detach = Seconds(d0, d1) * 1000;
    std::memcpy(aligned, pattern.data(), kChunk);
    return true;
  };
  for (int round = -1; round < rounds; ++round) {
    double rw = 0, rr = 0, lw = 0, lr = 0, at = 0, dt = 0;
    bool raw_first = round < 0 || round % 2 == 0;
    bool ok = raw_first ? raw_side(&rw, &rr) && loop_side(&lw, &lr, &at, &dt)
                        : loop_side(&lw, &lr, &at, &dt) && raw_side(&rw, &rr);
    if (!ok) return 1;
    if (round < 0) continue;  // the warm-up
    raw_w.push_back(rw);
    raw_r.push_back(rr);
    loop_w.push_back(lw);
    loop_r.push_back(lr);
    ratio_w.push_back(lw / rw);
    ratio_r.push_back(lr / rr);
    attach_ms.push_back(at);
    detach_ms.push_back(dt);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  };
  // "min / median / max" of one side's rounds (hack/bench.sh puts it in the table).
  auto spread = [&](const std::vector<double>& v) {
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.0f / %.0f / %.0f", *lo, median(v), *hi);
    return std::string(buf);
  };
  auto range = [](const std::vector<double>& v) {
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f..%.2f", *lo, *hi);
    return std::string(buf);
  };
  std::printf(
      "LUN %zu MiB, 1 MiB sequential, QD1, medians of %d rounds (after a discarded warm-up that fills the LUN; "
      "sides alternate), %d bridge session(s)\n",
      mib, rounds, sessions);
  std::printf("%-28s %11s %11s\n", "", "write MiB/s", "read MiB/s");
  std::printf("%-28s %11.0f %11.0f\n", "raw libiscsi (1 in flight)", median(raw_w), median(raw_r));
  std::printf("%-28s %11.0f %11.0f\n", "loop device (O_DIRECT)", median(loop_w), median(loop_r));
  std::printf("%-28s %11.2f %11.2f   (per-round range: write %s, read %s)\n", "ratio loop/raw", median(ratio_w),
              median(ratio_r), range(ratio_w).c_str(), range(ratio_r).c_str());
  // One line per figure and side: "spread <side>-<figure> min / median / max".
  std::printf("spread raw-write %s\nspread raw-read %s\nspread loop-write %s\nspread loop-read %s\n",
              spread(raw_w).c_str(), spread(raw_r).c_str(), spread(loop_w).c_str(), spread(loop_r).c_str());
  std::printf("attach latency ms: median %.1f (range %s)\n", median(attach_ms), range(attach_ms).c_str());
  std::printf("detach latency ms: median %.1f (range %s)\n", median(detach_ms), range(detach_ms).c_str());
  std::free(aligned);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
