// iscsi_qd_bench: raw libiscsi at a given queue depth, the baseline that
// the loop device of a userspace attach is set against (issue #17 item 5).
// One session, one thread, libiscsi's async API: `--qd` READ(16)/WRITE(16)
// tasks kept in flight by a poll loop, for a fixed time or op count.
// Random offsets are block-aligned, uniform over the LUN and drawn from
// `--seed` (with replacement, like fio's --norandommap); sequential ones
// start at 0 and wrap at the end of the LUN. Login and READ CAPACITY are
// not timed; a write job's closing SYNCHRONIZE CACHE is. Independent of
// the bridge's code on purpose: it measures what libiscsi itself can do on
// this LUN, whatever the bridge does.
//
//   iscsi_qd_bench --portal HOST:PORT --target IQN --initiator IQN [--lun 1]
//                  --rw randread|randwrite|read|write [--bs 4096] [--qd 1]
//                  [--seconds 5 | --ops N] [--seed 7]
//
// Prints one machine line on stdout
//   QDRESULT<TAB>iops<TAB>MiB/s<TAB>median latency us<TAB>ops
// and a human line on stderr. Exit 0 on success, 1 on an I/O or login
// error, 2 on bad usage.
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/bench_report.h"

namespace blockcsi::bench {
namespace {

struct Options {
  std::string portal, target, initiator, rw = "randread";
  int lun = 1;
  uint32_t bs = 4096;
  int qd = 1;
  double seconds = 5;
  long ops = 0;  // > 0: a fixed count instead of a fixed time
  uint64_t seed = 7;
};

// nullopt: go on; else the exit code (help or usage error printed).
std::optional<int> ParseOptions(int argc, char** argv, Options* o) {
  CLI::App app{"iscsi_qd_bench: raw libiscsi at a given queue depth", "iscsi_qd_bench"};
  app.add_option("--portal", o->portal, "HOST:PORT")->required();
  app.add_option("--target", o->target, "target IQN")->required();
  app.add_option("--initiator", o->initiator, "initiator IQN")->required();
  app.add_option("--lun", o->lun, "LUN")->capture_default_str();
  app.add_option("--rw", o->rw, "pattern")
      ->check(CLI::IsMember({"randread", "randwrite", "read", "write"}))
      ->capture_default_str();
  app.add_option("--bs", o->bs, "bytes per command")
      ->check(CLI::Range(uint32_t{512}, uint32_t{1} << 30))
      ->capture_default_str();
  app.add_option("--qd", o->qd, "commands in flight")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--seconds", o->seconds, "run time (when --ops is 0)")->capture_default_str();
  app.add_option("--ops", o->ops, "a fixed command count instead of a time")->capture_default_str();
  app.add_option("--seed", o->seed, "random offsets' seed")->capture_default_str();
  if (auto exit_code = ParseFlags(app, argc, argv)) return exit_code;
  if (o->seconds <= 0 && o->ops <= 0) return UsageError(app, "wants --seconds > 0 or --ops > 0");
  return std::nullopt;
}

// One command slot: its buffer, its task while in flight, when it was queued.
struct Slot {
  void* buffer = nullptr;
  scsi_iovec iov{};  // libiscsi keeps a pointer to it until the task ends
  scsi_task* task = nullptr;
  Clock::time_point queued;
  bool done = false;
  int status = SCSI_STATUS_GOOD;
};

void OnTaskDone(iscsi_context*, int status, void*, void* private_data) {
  auto* slot = static_cast<Slot*>(private_data);
  slot->done = true;
  // libiscsi passes the task's SCSI status (or its own negative codes for
  // a cancelled or timed-out command).
  slot->status = status;
}

class Runner {
 public:
  Runner(const Options& o, iscsi_context* ctx, uint32_t block_size, uint64_t lun_bytes)
      : o_(o), ctx_(ctx), block_size_(block_size), lun_bytes_(lun_bytes), rng_(o.seed), slots_(o.qd) {}
  ~Runner() {
    for (auto& s : slots_) std::free(s.buffer);
  }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Runs the job; false (with the reason printed) on any failed command.
  bool Run() {
    for (auto& s : slots_) {
      if (::posix_memalign(&s.buffer, 4096, o_.bs) != 0) return false;
      std::memset(s.buffer, 0x5a, o_.bs);
    }
    auto start = Clock::now();
    auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.seconds));
    long issued = 0;
    int in_flight = 0;
    auto more = [&] { return o_.ops > 0 ? issued < o_.ops : Clock::now() < deadline; };
    for (auto& s : slots_) {
      if (!more()) break;
      if (!Queue(&s)) return false;
      ++issued;
      ++in_flight;
    }
    Clock::time_point last = start;
    while (in_flight > 0) {
      pollfd pfd{iscsi_get_fd(ctx_), static_cast<short>(iscsi_which_events(ctx_)), 0};
      if (::poll(&pfd, 1, 1000) < 0 && errno != EINTR) return Fail("poll");
      if (iscsi_service(ctx_, pfd.revents) < 0) return Fail("iscsi_service");
      // Refill after the service call rather than inside the callback:
      // libiscsi sends the new PDUs on the next POLLOUT either way.
      for (auto& s : slots_) {
        if (!s.done) continue;
        auto now = Clock::now();
        s.done = false;
        scsi_free_scsi_task(s.task);
        s.task = nullptr;
        --in_flight;
        if (s.status != SCSI_STATUS_GOOD) {
          std::fprintf(stderr, "iscsi_qd_bench: command failed with status %d\n", s.status);
          return false;
        }
        latencies_us_.push_back(std::chrono::duration<double, std::micro>(now - s.queued).count());
        last = now;
        if (more()) {
          if (!Queue(&s)) return false;
          ++issued;
          ++in_flight;
        }
      }
    }
    // A write job ends with SYNCHRONIZE CACHE, timed, as fio's end_fsync
    // on the loop device ends with one through the bridge: neither side
    // gets credit for writes a cache still holds.
    if (o_.rw.find("write") != std::string::npos) {
      scsi_task* sync = iscsi_synchronizecache10_sync(ctx_, o_.lun, 0, 0, 0, 0);
      bool good = sync != nullptr && sync->status == SCSI_STATUS_GOOD;
      if (sync != nullptr) scsi_free_scsi_task(sync);
      if (!good) return Fail("SYNCHRONIZE CACHE(10)");
      last = Clock::now();
    }
    elapsed_s_ = std::chrono::duration<double>(last - start).count();
    return true;
  }

  double elapsed_s() const { return elapsed_s_; }
  const std::vector<double>& latencies_us() const { return latencies_us_; }

 private:
  uint64_t NextOffset() {
    uint64_t blocks = lun_bytes_ / o_.bs;
    if (o_.rw == "randread" || o_.rw == "randwrite") return (rng_() % blocks) * o_.bs;
    uint64_t off = next_seq_;
    next_seq_ = (next_seq_ + o_.bs) % (blocks * o_.bs);
    return off;
  }

  bool Queue(Slot* s) {
    uint64_t lba = NextOffset() / block_size_;
    s->queued = Clock::now();
    if (o_.rw == "randwrite" || o_.rw == "write") {
      s->task = iscsi_write16_task(ctx_, o_.lun, lba, static_cast<unsigned char*>(s->buffer), o_.bs,
                                   static_cast<int>(block_size_), 0, 0, 0, 0, 0, OnTaskDone, s);
    } else {
      // Into the slot's own buffer (no copy, no allocation per read), as
      // the bridge reads into the FUSE reply.
      s->iov = scsi_iovec{s->buffer, o_.bs};
      s->task = iscsi_read16_iov_task(ctx_, o_.lun, lba, o_.bs, static_cast<int>(block_size_), 0, 0, 0, 0, 0,
                                      OnTaskDone, s, &s->iov, 1);
    }
    return s->task != nullptr || Fail("queue a task");
  }

  bool Fail(const char* what) {
    std::fprintf(stderr, "iscsi_qd_bench: %s: %s\n", what, iscsi_get_error(ctx_));
    return false;
  }

  const Options& o_;
  iscsi_context* ctx_;
  uint32_t block_size_;
  uint64_t lun_bytes_;
  std::mt19937_64 rng_;
  std::vector<Slot> slots_;
  uint64_t next_seq_ = 0;
  std::vector<double> latencies_us_;
  double elapsed_s_ = 0;
};

// Logs in and reads the LUN's geometry; nullptr with the reason printed.
iscsi_context* Login(const Options& o, uint32_t* block_size, uint64_t* lun_bytes) {
  iscsi_context* ctx = iscsi_create_context(o.initiator.c_str());
  if (ctx == nullptr) return nullptr;
  iscsi_set_targetname(ctx, o.target.c_str());
  iscsi_set_session_type(ctx, ISCSI_SESSION_NORMAL);
  iscsi_set_header_digest(ctx, ISCSI_HEADER_DIGEST_NONE_CRC32C);
  if (iscsi_full_connect_sync(ctx, o.portal.c_str(), o.lun) != 0) {
    std::fprintf(stderr, "iscsi_qd_bench: login to %s: %s\n", o.portal.c_str(), iscsi_get_error(ctx));
    iscsi_destroy_context(ctx);
    return nullptr;
  }
  scsi_task* task = iscsi_readcapacity16_sync(ctx, o.lun);
  auto* rc16 = task != nullptr && task->status == SCSI_STATUS_GOOD
                   ? static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(task))
                   : nullptr;
  if (rc16 == nullptr || rc16->block_length == 0) {
    std::fprintf(stderr, "iscsi_qd_bench: READ CAPACITY(16) failed: %s\n", iscsi_get_error(ctx));
    if (task != nullptr) scsi_free_scsi_task(task);
    iscsi_logout_sync(ctx);
    iscsi_destroy_context(ctx);
    return nullptr;
  }
  *block_size = rc16->block_length;
  *lun_bytes = (rc16->returned_lba + 1) * uint64_t{rc16->block_length};
  scsi_free_scsi_task(task);
  return ctx;
}

int Main(int argc, char** argv) {
  Options o;
  if (auto exit_code = ParseOptions(argc, argv, &o)) return *exit_code;
  uint32_t block_size = 0;
  uint64_t lun_bytes = 0;
  iscsi_context* ctx = Login(o, &block_size, &lun_bytes);
  if (ctx == nullptr) return 1;
  int rc = 1;
  if (o.bs % block_size != 0 || lun_bytes < o.bs) {
    std::fprintf(stderr, "iscsi_qd_bench: --bs %u does not fit blocks of %u on a LUN of %llu bytes\n", o.bs, block_size,
                 static_cast<unsigned long long>(lun_bytes));
  } else {
    Runner runner(o, ctx, block_size, lun_bytes);
    if (runner.Run() && runner.elapsed_s() > 0) {
      double n = static_cast<double>(runner.latencies_us().size());
      double iops = n / runner.elapsed_s();
      double mibps = iops * o.bs / (1024.0 * 1024.0);
      double median = Median(runner.latencies_us());
      std::fprintf(stderr, "iscsi_qd_bench: %s bs %u qd %d: %.0f IOPS, %.1f MiB/s, median %.0f us, %.0f ops\n",
                   o.rw.c_str(), o.bs, o.qd, iops, mibps, median, n);
      std::printf("QDRESULT\t%.1f\t%.2f\t%.1f\t%.0f\n", iops, mibps, median, n);
      rc = 0;
    }
  }
  iscsi_logout_sync(ctx);
  iscsi_destroy_context(ctx);
  return rc;
}

}  // namespace
}  // namespace blockcsi::bench

int main(int argc, char** argv) { return blockcsi::bench::Main(argc, argv); }
