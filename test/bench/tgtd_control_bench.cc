// tgtd_control_bench: one tgtd management call through tgtd's socket
// (TgtdSocketControl, what blockcsi-target uses by default) against the
// same call through an exec of /usr/sbin/tgtadm (TgtadmControl), on a real
// tgtd holding --targets targets. Per call: `--op show --mode target` and
// the secret-carrying pair `account new` + `account delete`. Rounds
// alternate which side goes first; the first --warmup rounds are dropped;
// median and p90 of the rest are printed. Asserts nothing. Root and tgt.
//   tgtd_control_bench [--rounds 200] [--warmup 10] [--targets 20]
#include <cstdlib>
#include <memory>

#include "backend/local/tgtadm_control.h"
#include "backend/local/tgtd_socket_control.h"
#include "bench/bench_args.h"
#include "bench/bench_report.h"
#include "common/executor.h"
#include "support/tgtd_harness.h"

namespace blockcsi::bench {
namespace {

int Main(int argc, char** argv) {
  int rounds = 200, warmup = 10, targets = 20;
  CLI::App app{"tgtd_control_bench: one tgtd call over its socket against an exec of tgtadm", "tgtd_control_bench"};
  AddRounds(app, "--rounds", &rounds, 2, "measured rounds (the two sides take turns to go first)");
  app.add_option("--warmup", warmup, "rounds dropped first")->capture_default_str();
  app.add_option("--targets", targets, "targets tgtd holds")->capture_default_str();
  if (auto exit_code = ParseFlags(app, argc, argv)) return *exit_code;
  std::string error;
  auto tgtd = testing::TgtdHarness::Start(&error);
  if (!tgtd) {
    std::fprintf(stderr, "tgtd_control_bench: %s\n", error.c_str());
    return 1;
  }
  TgtadmControl exec(std::shared_ptr<Executor>(MakeProcessExecutor()), tgtd->control_port());
  TgtdSocketControl socket(tgtd->control_port());
  for (int t = 1; t <= targets; ++t) {
    auto r = socket.Send(TgtdRequest::NewTarget(t, "iqn.2026-11.io.blockcsi:bench-" + std::to_string(t)));
    if (!r.ok() || !r->ok()) {
      std::fprintf(stderr, "tgtd_control_bench: cannot create target %d\n", t);
      return 1;
    }
  }
  const TgtdRequest show = TgtdRequest::ShowTargets();
  const TgtdRequest add = TgtdRequest::NewAccount("benchuser", "bench-pass-1234");
  const TgtdRequest del = TgtdRequest::DeleteAccount("benchuser");

  std::vector<double> show_exec, show_socket, pair_exec, pair_socket;
  long failures = 0;
  auto time_one = [&](TgtdControl& control, const TgtdRequest& request) {
    auto t0 = Clock::now();
    auto r = control.Send(request);
    double ms = Ms(Clock::now() - t0);
    if (!r.ok() || !r->ok()) ++failures;
    return ms;
  };
  for (int round = 0; round < rounds + warmup; ++round) {
    bool keep = round >= warmup;
    for (int side = 0; side < 2; ++side) {
      bool use_socket = (round + side) % 2 == 0;  // alternate who goes first
      TgtdControl& e = use_socket ? static_cast<TgtdControl&>(socket) : exec;
      double s = time_one(e, show);
      double p = time_one(e, add) + time_one(e, del);
      if (!keep) continue;
      (use_socket ? show_socket : show_exec).push_back(s);
      (use_socket ? pair_socket : pair_exec).push_back(p);
    }
  }
  std::printf("tgtd_control_bench: %d rounds (+%d warm-up), %d targets, tgtd on control port %d\n", rounds, warmup,
              targets, tgtd->control_port());
  ReportSamples("show target, socket", show_socket, show_exec, "ms", "exec tgtadm");
  Report("show target, socket (p90)", P90(show_socket), P90(show_exec), "ms", "exec tgtadm");
  ReportSamples("account new+delete, socket", pair_socket, pair_exec, "ms", "exec tgtadm");
  Report("account new+delete, socket (p90)", P90(pair_socket), P90(pair_exec), "ms", "exec tgtadm");
  ReportCount("failed calls", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace blockcsi::bench

int main(int argc, char** argv) { return blockcsi::bench::Main(argc, argv); }
