// controller_scale_bench: the controller (CSI over gRPC on a unix socket)
// on the real local backend and a real tgtd, as the pool grows to N volumes
// (default 1,000). In one run, like against like (issue #22):
//   CreateVolume latency at N volumes against the same on an empty pool (its
//   first S volumes, after one warm-up call);
//   a full ListVolumes page of P at N volumes against a full page of P on a
//   pool of exactly P volumes (near-empty: one page), and each against one
//   `tgtadm --op show --mode target` at that size, with the requests to
//   tgtd counted;
//   the page's checks done the pre-batching way (one CheckVolume per
//   volume) against CheckVolumes (one per page).
// tgtd is driven as blockcsi drives it by default, over its management
// socket (--tgt-control socket), or by running tgtadm (--tgt-control tgtadm).
// tgtd runs with the I/O threads per LUN that deploy/target-host/target.env
// ships (TGT_IO_THREADS); --tgtd-io-threads N sets another (0: tgt's own
// default, 16), and its rows say so. --create-only times CreateVolume alone.
// Asserts nothing. Needs root and tgt.
//   controller_scale_bench [--volumes 1000] [--page 100] [--samples 20] [--tgt-control socket|tgtadm]
//                          [--tgtd-io-threads N] [--create-only] [--log-level debug]
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>

#include "backend/local/local_backend.h"
#include "backend/local/tgt_exporter.h"
#include "backend/local/tgtd_socket.h"
#include "bench/bench_args.h"
#include "bench/bench_report.h"
#include "common/executor.h"
#include "common/logging.h"
#include "controller/controller_service.h"
#include "csi.grpc.pb.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi::bench {
namespace {

// Counts the requests the backend makes of tgtd, through either executor
// (a figure of the report).
class CountingExecutor final : public Executor {
 public:
  explicit CountingExecutor(std::unique_ptr<Executor> inner) : inner_(std::move(inner)) {}
  StatusOr<CommandResult> Run(const Command& command) override {
    const std::string& program = command.args().empty() ? std::string() : command.args().front().value;
    if (program.size() >= 6 && program.compare(program.size() - 6, 6, "tgtadm") == 0) ++tgtadm_;
    return inner_->Run(command);
  }
  long tgtadm() const { return tgtadm_.load(); }

 private:
  std::unique_ptr<Executor> inner_;
  std::atomic<long> tgtadm_{0};
};

int Main(int argc, char** argv) {
  int volumes = 1000, page = 100, samples = 20;
  std::string control = "socket";
  CLI::App app{"controller_scale_bench: the controller as the pool grows to N volumes", "controller_scale_bench"};
  app.add_option("--volumes", volumes, "volumes in the full pool")->capture_default_str();
  app.add_option("--page", page, "ListVolumes page size")->capture_default_str();
  app.add_option("--samples", samples, "CreateVolume calls timed per size")->capture_default_str();
  testing::TgtdOptions tgtd_options;
  bool create_only = false;
  std::string log_level = "warn";
  app.add_option("--tgtd-io-threads", tgtd_options.io_threads,
                 "tgtd's I/O threads per LUN (0: tgt's default; unset: as deploy/target-host ships)");
  app.add_flag("--create-only", create_only, "time CreateVolume only, no listing");
  app.add_option("--log-level", log_level, "debug: the backend's spans (each tgtd request, each fsync) on stderr")
      ->capture_default_str();
  app.add_option("--tgt-control", control, "how tgtd is driven")
      ->check(CLI::IsMember({"socket", "tgtadm"}))
      ->capture_default_str();
  if (auto exit_code = ParseFlags(app, argc, argv)) return *exit_code;
  auto level = ParseLogLevel(log_level);
  if (!level.ok()) {
    std::fprintf(stderr, "controller_scale_bench: %s\n", level.status().ToString().c_str());
    return 2;
  }
  InitLogging("controller_scale_bench", LogFormat::kText, *level);
  std::string error;
  auto tgtd = testing::TgtdHarness::Start(tgtd_options, &error);
  if (!tgtd) {
    std::fprintf(stderr, "controller_scale_bench: %s\n", error.c_str());
    return 2;
  }
  testing::TempDir dir;
  std::unique_ptr<Executor> driver;
  if (control == "socket") {
    driver = std::make_unique<TgtdSocketExecutor>();
  } else {
    driver = MakeProcessExecutor();
  }
  auto counting = std::make_shared<CountingExecutor>(std::move(driver));
  auto exporter = std::make_shared<TgtExporter>(counting, tgtd->control_port());
  LocalBackendOptions options;
  options.portals = {tgtd->portal()};
  options.reconcile_interval = std::chrono::hours(1);  // no pass during the measurement
  auto opened = LocalBackend::Open(dir.Join("pool"), exporter, options);
  if (!opened.ok()) {
    std::fprintf(stderr, "controller_scale_bench: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<LocalBackend> backend = *opened;
  ControllerService service(backend, {});
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + dir.Join("csi.sock"), grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  auto stub = csi::v1::Controller::NewStub(
      grpc::CreateChannel("unix:" + dir.Join("csi.sock"), grpc::InsecureChannelCredentials()));

  int failures = 0, created = 0;
  auto create = [&]() {
    csi::v1::CreateVolumeRequest r;
    r.set_name("scale-" + std::to_string(created++));
    r.mutable_capacity_range()->set_required_bytes(1 << 20);
    auto* cap = r.add_volume_capabilities();
    cap->mutable_mount()->set_fs_type("ext4");
    cap->mutable_access_mode()->set_mode(csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    csi::v1::CreateVolumeResponse resp;
    grpc::ClientContext ctx;
    auto t0 = Clock::now();
    grpc::Status st = stub->CreateVolume(&ctx, r, &resp);
    const double ms = Ms(Clock::now() - t0);
    // The first few failures say why on stderr; all are counted.
    if (!st.ok() && ++failures <= 3) {
      std::fprintf(stderr, "controller_scale_bench: CreateVolume %s: %s\n", r.name().c_str(),
                   st.error_message().c_str());
    }
    return ms;
  };
  int last_entries = 0;  // entries in the page list_page returned last
  auto list_page = [&](const std::string& token, int max_entries, std::string* next, long* tgtadm_calls) {
    csi::v1::ListVolumesRequest r;
    r.set_max_entries(max_entries);
    r.set_starting_token(token);
    csi::v1::ListVolumesResponse resp;
    grpc::ClientContext ctx;
    long before = counting->tgtadm();
    auto t0 = Clock::now();
    grpc::Status st = stub->ListVolumes(&ctx, r, &resp);
    double ms = Ms(Clock::now() - t0);
    *tgtadm_calls = counting->tgtadm() - before;
    if (!st.ok()) ++failures;
    for (const auto& e : resp.entries()) {
      if (e.status().volume_condition().abnormal()) ++failures;  // nothing here should be
    }
    *next = resp.next_token();
    last_entries = resp.entries_size();
    return ms;
  };
  auto show_targets = [&]() {
    auto t0 = Clock::now();
    (void)tgtd->ShowTargets();
    return Ms(Clock::now() - t0);
  };
  // Samples at one pool size (each figure reported as min / median / max).
  struct AtSize {
    std::vector<double> creates, pages, fulls, shows;
    long page_calls = 0, full_calls = 0;
  };
  // `samples` CreateVolume calls on the pool as it stands.
  auto measure_creates = [&](AtSize& a) {
    // Both sizes start on a file system with nothing left to write back:
    // the fill's writeback is not CreateVolume's at N volumes.
    ::sync();
    for (int i = 0; i < samples; ++i) a.creates.push_back(create());
  };
  // Full pages of the listing as it stands, at least `samples` of them (a
  // pool of one page is listed that many times), each against one show.
  auto measure_pages = [&](AtSize& a) {
    // A warm-up page and show, dropped: the first read of a pool this size.
    std::string none;
    long warm_calls = 0;
    (void)list_page("", page, &none, &warm_calls);
    (void)show_targets();
    std::vector<long> page_calls;
    int n = 0;
    while (static_cast<int>(a.pages.size()) < samples) {
      std::string token;
      do {
        // The page and its baseline alternate which goes first.
        const bool show_first = n++ % 2 == 1;
        double show_ms = show_first ? show_targets() : 0;
        long calls = 0;
        double ms = list_page(token, page, &token, &calls);
        if (!show_first) show_ms = show_targets();  // the baseline, under the same load
        // Only full pages count: a short last page is less work and would
        // flatter the comparison.
        if (last_entries < page) continue;
        a.pages.push_back(ms);
        page_calls.push_back(calls);
        a.shows.push_back(show_ms);
      } while (!token.empty());
      if (n > 4 * samples + 4 && a.pages.empty()) break;  // no full page at all (a pool under one page)
    }
    for (int i = 0; i < 3; ++i) {
      long calls = 0;
      a.fulls.push_back(list_page("", 0, &none, &calls));
      a.full_calls = calls;
    }
    a.page_calls = page_calls.empty() ? 0 : *std::max_element(page_calls.begin(), page_calls.end());
    std::printf(
        "  at %d volumes: ListVolumes page of %d median %.1f ms (%ld tgtd requests), full list %.1f ms "
        "(%ld), tgtadm show %.1f ms\n",
        created, page, Median(a.pages), a.page_calls, Median(a.fulls), a.full_calls, Median(a.shows));
    std::fflush(stdout);
  };

  std::printf("Controller at scale (real local backend, tgtd %s, driven by %s)\n", tgtd->portal().c_str(),
              control.c_str());
  // The baselines (issue #22): CreateVolume on an empty pool, and a page
  // of P on a pool of exactly P volumes, a full page of a near-empty pool.
  AtSize empty;
  (void)create();  // warm-up: the first call of the process (gRPC channel, tgtd's first target)
  measure_creates(empty);
  std::printf("  on an empty pool: CreateVolume median %.1f ms\n", Median(empty.creates));
  while (created < page) create();
  if (!create_only) measure_pages(empty);
  std::printf("  filling the pool to %d volumes...\n", volumes);
  std::fflush(stdout);
  auto fill0 = Clock::now();
  while (created < volumes) create();
  double fill_s = Ms(Clock::now() - fill0) / 1000;
  std::printf("  filled in %.0f s\n", fill_s);
  AtSize full;
  measure_creates(full);
  std::printf("  at %d volumes: CreateVolume median %.1f ms\n", volumes, Median(full.creates));
  std::string n = std::to_string(volumes);
  if (create_only) {
    const int threads = tgtd_options.io_threads == testing::TgtdOptions::kAsDeployed
                            ? testing::DeployedTgtdIoThreads(&error)
                            : tgtd_options.io_threads;
    const std::string tgtd_label = threads == 0 ? "tgt's default I/O threads" : "tgtd -t " + std::to_string(threads);
    ReportSamples("CreateVolume at " + n + " volumes, " + tgtd_label, full.creates, empty.creates, "ms",
                  "on an empty pool, " + tgtd_label);
    // Here a failure is a finding about that tgtd, not of the benchmark:
    // counted and reported (the first ones with their message, above).
    ReportCount("CreateVolume failures, " + tgtd_label, failures);
    server->Shutdown();
    return 0;
  }
  measure_pages(full);

  // The checks of one page, the old way and the batched way, same ids.
  auto listed = backend->ListVolumes("", page);
  std::vector<double> one_by_one, batched;
  long one_by_one_calls = 0, batched_calls = 0;
  if (listed.ok()) {
    std::vector<std::string> ids;
    for (const auto& r : listed->items) ids.push_back(r.id);
    auto old_way = [&](bool keep) {
      long before = counting->tgtadm();
      auto t0 = Clock::now();
      for (const auto& id : ids) {
        auto h = backend->CheckVolume(id);
        if (!h.ok() || h->abnormal) ++failures;
      }
      if (keep) one_by_one.push_back(Ms(Clock::now() - t0));
      one_by_one_calls = counting->tgtadm() - before;
    };
    auto batched_way = [&](bool keep) {
      long before = counting->tgtadm();
      auto t0 = Clock::now();
      for (const auto& h : backend->CheckVolumes(ids)) {
        if (!h.ok() || h->abnormal) ++failures;
      }
      if (keep) batched.push_back(Ms(Clock::now() - t0));
      batched_calls = counting->tgtadm() - before;
    };
    // Round -1 is a warm-up, dropped; the side that goes first alternates.
    for (int i = -1; i < 4; ++i) {
      if (i < 0 || i % 2 == 0) {
        old_way(i >= 0);
        batched_way(i >= 0);
      } else {
        batched_way(i >= 0);
        old_way(i >= 0);
      }
    }
  } else {
    ++failures;
  }

  std::string p = std::to_string(page);
  ReportSamples("CreateVolume at " + n + " volumes", full.creates, empty.creates, "ms", "on an empty pool");
  ReportSamples("ListVolumes page of " + p + " at " + n + " volumes", full.pages, full.shows, "ms", "1 tgtadm show");
  ReportSamples("ListVolumes whole list at " + n + " volumes", full.fulls, full.shows, "ms", "1 tgtadm show");
  ReportSamples("ListVolumes page of " + p + " at " + n + " vs at " + p + " volumes", full.pages, empty.pages, "ms",
                "a page of " + p + " at " + p + " volumes");
  ReportCount("tgtd requests per ListVolumes page of " + p, full.page_calls);
  ReportCount("tgtd requests per whole ListVolumes of " + n, full.full_calls);
  ReportSamples("Page checks batched (CheckVolumes x" + p + ")", batched, one_by_one, "ms",
                "CheckVolume x" + p + ", one call each");
  ReportCount("tgtd requests: CheckVolumes x" + p, batched_calls);
  ReportCount("tgtd requests: CheckVolume x" + p, one_by_one_calls);
  ReportCount("Controller scale failures", failures);

  server->Shutdown();
  // No DeleteVolume x N: the harness deletes every target when it stops
  // tgtd and the pool goes with the temp dir, both destroyed after the
  // server, the service and the backend.
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace blockcsi::bench

int main(int argc, char** argv) { return blockcsi::bench::Main(argc, argv); }
