// controller_scale_bench: the controller (CSI over gRPC on a unix socket)
// on the real local backend and a real tgtd, as the pool grows to N volumes
// (default 1,000). In one run, like against like (issue #22):
//   CreateVolume latency at N volumes against the same on an empty pool (its
//   first S volumes, after one warm-up call);
//   a full ListVolumes page of P at N volumes against a full page of P on a
//   pool of P volumes (near-empty: one page, when S < P), first with both
//   pools as the plugin runs them (a check may use tgtd's listing kept from
//   the last read), then with both reopened to keep no listing (every page
//   reads tgtd), live pages also against one read of tgtd's listing through
//   the same control, with the requests to tgtd counted;
//   the page's checks done the pre-batching way (one CheckVolume, so one
//   read of tgtd, per volume: counted, and a failure when it reads less)
//   against CheckVolumes (one read per page), both live;
//   ControllerPublish and ControllerUnpublish of one volume at N against the
//   same on the empty pool, and of 32 volumes at once at N against 32 at
//   once on the empty pool and against the same 32 one after the other.
// The baselines come from a second pool with a tgtd of its own, run beside
// the large one: each figure and its baseline are sampled in turn, the side
// that goes first moving on each round over a whole number of turns (after
// a warm-up round, dropped), so what drifts on the machine over the run
// falls on both sides and no side always goes first.
// tgtd is driven as blockcsi drives it by default, over its management
// socket (--tgt-control socket), or by running tgtadm (--tgt-control tgtadm).
// tgtd runs with the I/O threads per LUN that deploy/target-host/target.env
// ships (TGT_IO_THREADS); --tgtd-io-threads N sets another (0: tgt's own
// default, 16), and its rows say so. --create-only times CreateVolume alone.
// Asserts nothing. Needs root and tgt.
//   controller_scale_bench [--volumes 1000] [--page 100] [--samples 20 (even)] [--tgt-control socket|tgtadm]
//                          [--tgtd-io-threads N] [--create-only] [--log-level debug]
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "backend/local/local_backend.h"
#include "backend/local/tgt_exporter.h"
#include "backend/local/tgtadm_control.h"
#include "backend/local/tgtadm_parser.h"
#include "backend/local/tgtd_socket_control.h"
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

// Counts the requests the backend makes of tgtd, through either control
// (a figure of the report).
class CountingControl final : public TgtdControl {
 public:
  explicit CountingControl(std::unique_ptr<TgtdControl> inner) : inner_(std::move(inner)) {}
  StatusOr<TgtdAnswer> Send(const TgtdRequest& request) override {
    ++tgtadm_;
    return inner_->Send(request);
  }
  long tgtadm() const { return tgtadm_.load(); }

 private:
  std::unique_ptr<TgtdControl> inner_;
  std::atomic<long> tgtadm_{0};
};

// One pool under test: a tgtd of its own, a pool directory, the local
// backend, the controller service and its gRPC server, as the plugin runs
// them. Members go in reverse: the server stops before the service and the
// backend; the pool directory goes before tgtd, whose harness deletes every
// target when it stops it.
struct PoolUnderTest {
  std::unique_ptr<testing::TgtdHarness> tgtd;
  testing::TempDir dir;
  std::shared_ptr<CountingControl> counting;
  int serves = 0;  // ServeBackend calls (each serves on a socket of its own)
  std::shared_ptr<LocalBackend> backend;
  std::unique_ptr<ControllerService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<csi::v1::Controller::Stub> stub;
  std::string name_prefix;  // of the CreateVolume names
  int created = 0;
  int last_entries = 0;                 // entries in the page ListVolumes returned last
  std::vector<std::string> volume_ids;  // of every CreateVolume that succeeded

  ~PoolUnderTest() {
    if (server) server->Shutdown();
  }
};

std::unique_ptr<PoolUnderTest> StartPool(const std::string& name_prefix, const testing::TgtdOptions& tgtd_options,
                                         const std::string& control, std::string* error) {
  auto pool = std::make_unique<PoolUnderTest>();
  pool->name_prefix = name_prefix;
  pool->tgtd = testing::TgtdHarness::Start(tgtd_options, error);
  if (!pool->tgtd) return nullptr;
  std::unique_ptr<TgtdControl> driver;
  if (control == "socket") {
    driver = std::make_unique<TgtdSocketControl>(pool->tgtd->control_port());
  } else {
    driver =
        std::make_unique<TgtadmControl>(std::shared_ptr<Executor>(MakeProcessExecutor()), pool->tgtd->control_port());
  }
  pool->counting = std::make_shared<CountingControl>(std::move(driver));
  return pool;
}

// (Re)opens `pool`'s directory as the plugin does and serves its controller
// over gRPC: a new exporter that keeps tgtd's listing at most
// `listing_max_age` (nullopt: the exporter's default, as the plugin runs it;
// 0: every check reads tgtd live), the local backend (its opening reconcile
// included) and the service. What served the pool before is stopped first
// (the pool's lock goes with its backend).
bool ServeBackend(PoolUnderTest& pool, std::optional<std::chrono::milliseconds> listing_max_age, std::string* error) {
  if (pool.server) pool.server->Shutdown();
  pool.server.reset();
  pool.stub.reset();
  pool.service.reset();
  pool.backend.reset();
  auto exporter = listing_max_age
                      ? std::make_shared<TgtExporter>(pool.counting, pool.tgtd->control_port(), MachineHost(),
                                                      TgtExporter::kDefaultSocketDir, *listing_max_age)
                      : std::make_shared<TgtExporter>(pool.counting, pool.tgtd->control_port(), MachineHost());
  LocalBackendOptions options;
  options.portals = {pool.tgtd->portal()};
  options.reconcile_interval = std::chrono::hours(1);  // no pass during the measurement
  auto opened = LocalBackend::Open(pool.dir.Join("pool"), exporter, options);
  if (!opened.ok()) {
    *error = opened.status().ToString();
    return false;
  }
  pool.backend = *opened;
  pool.service = std::make_unique<ControllerService>(pool.backend, ControllerOptions{});
  const std::string socket = "unix:" + pool.dir.Join("csi-" + std::to_string(++pool.serves) + ".sock");
  grpc::ServerBuilder builder;
  builder.AddListeningPort(socket, grpc::InsecureServerCredentials());
  builder.RegisterService(pool.service.get());
  pool.server = builder.BuildAndStart();
  if (!pool.server) {
    *error = "cannot serve gRPC on " + socket;
    return false;
  }
  pool.stub = csi::v1::Controller::NewStub(grpc::CreateChannel(socket, grpc::InsecureChannelCredentials()));
  return true;
}

// One round of `sides`, the side that starts moving on by one each round:
// over a multiple of sides.size() rounds each side goes first equally
// often, so none always runs on a host another just warmed.
void InTurn(int round, const std::vector<std::function<void()>>& sides) {
  const size_t first = static_cast<size_t>(round) % sides.size();
  for (size_t k = 0; k < sides.size(); ++k) sides[(first + k) % sides.size()]();
}

// `rounds` rounded up to a multiple of `sides`.
int WholeTurns(int rounds, int sides) { return (std::max(rounds, 1) + sides - 1) / sides * sides; }

int Main(int argc, char** argv) {
  int volumes = 1000, page = 100, samples = 20;
  std::string control = "socket";
  CLI::App app{"controller_scale_bench: the controller as the pool grows to N volumes", "controller_scale_bench"};
  app.add_option("--volumes", volumes, "volumes in the full pool")->capture_default_str();
  app.add_option("--page", page, "ListVolumes page size")->capture_default_str();
  AddRounds(app, "--samples", &samples, 2, "rounds of each figure and its baseline (they take turns to go first)");
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
  // The small pool gives the baselines (an empty pool, then a pool of one
  // page), the large one is filled to N; each has its own tgtd, because
  // what tgtd pays per target as it holds more is part of the figure.
  std::string error;
  // First as the plugin runs it: a check of an export already in place may
  // use the listing kept from the last read (TgtExporter's listing_max_age).
  const std::optional<std::chrono::milliseconds> kept_listing;
  auto small = StartPool("small-", tgtd_options, control, &error);
  auto large = small ? StartPool("scale-", tgtd_options, control, &error) : nullptr;
  if (!small || !large || !ServeBackend(*small, kept_listing, &error) || !ServeBackend(*large, kept_listing, &error)) {
    std::fprintf(stderr, "controller_scale_bench: %s\n", error.c_str());
    return 2;
  }

  std::atomic<int> failures{0};  // the publish storms count from several threads
  auto create = [&](PoolUnderTest& pool) {
    csi::v1::CreateVolumeRequest r;
    r.set_name(pool.name_prefix + std::to_string(pool.created++));
    r.mutable_capacity_range()->set_required_bytes(1 << 20);
    auto* cap = r.add_volume_capabilities();
    cap->mutable_mount()->set_fs_type("ext4");
    cap->mutable_access_mode()->set_mode(csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    csi::v1::CreateVolumeResponse resp;
    grpc::ClientContext ctx;
    auto t0 = Clock::now();
    grpc::Status st = pool.stub->CreateVolume(&ctx, r, &resp);
    const double ms = Ms(Clock::now() - t0);
    if (st.ok()) pool.volume_ids.push_back(resp.volume().volume_id());
    // The first few failures say why on stderr; all are counted.
    if (!st.ok() && ++failures <= 3) {
      std::fprintf(stderr, "controller_scale_bench: CreateVolume %s: %s\n", r.name().c_str(),
                   st.error_message().c_str());
    }
    return ms;
  };
  auto list_page = [&](PoolUnderTest& pool, const std::string& token, int max_entries, std::string* next,
                       long* tgtadm_calls) {
    csi::v1::ListVolumesRequest r;
    r.set_max_entries(max_entries);
    r.set_starting_token(token);
    csi::v1::ListVolumesResponse resp;
    grpc::ClientContext ctx;
    long before = pool.counting->tgtadm();
    auto t0 = Clock::now();
    grpc::Status st = pool.stub->ListVolumes(&ctx, r, &resp);
    double ms = Ms(Clock::now() - t0);
    *tgtadm_calls = pool.counting->tgtadm() - before;
    if (!st.ok()) ++failures;
    for (const auto& e : resp.entries()) {
      if (e.status().volume_condition().abnormal()) ++failures;  // nothing here should be
    }
    *next = resp.next_token();
    pool.last_entries = resp.entries_size();
    return ms;
  };
  // What a page that reads tgtd cannot do without: one listing of every
  // target through the pool's own control (the socket, or tgtadm with
  // --tgt-control tgtadm), parsed as the exporter parses it.
  auto read_targets = [&](PoolUnderTest& pool) {
    auto t0 = Clock::now();
    auto answer = pool.counting->Send(TgtdRequest::ShowTargets());
    const bool ok = answer.ok() && answer->ok() && ParseTgtadmTargets(answer->text).ok();
    const double ms = Ms(Clock::now() - t0);
    if (!ok) ++failures;
    return ms;
  };

  // ControllerPublish and ControllerUnpublish of one volume to one node:
  // each ACL change is decided on a fresh read of tgtd and read back
  // (tgt_exporter.h), and tgtd lists every target it holds in one read.
  auto publish = [&](PoolUnderTest& pool, const std::string& volume_id, bool publish_it) {
    grpc::ClientContext ctx;
    grpc::Status st;
    auto t0 = Clock::now();
    if (publish_it) {
      csi::v1::ControllerPublishVolumeRequest r;
      r.set_volume_id(volume_id);
      r.set_node_id("scale-node");
      auto* cap = r.mutable_volume_capability();
      cap->mutable_mount()->set_fs_type("ext4");
      cap->mutable_access_mode()->set_mode(csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
      csi::v1::ControllerPublishVolumeResponse resp;
      st = pool.stub->ControllerPublishVolume(&ctx, r, &resp);
    } else {
      csi::v1::ControllerUnpublishVolumeRequest r;
      r.set_volume_id(volume_id);
      r.set_node_id("scale-node");
      csi::v1::ControllerUnpublishVolumeResponse resp;
      st = pool.stub->ControllerUnpublishVolume(&ctx, r, &resp);
    }
    const double ms = Ms(Clock::now() - t0);
    if (!st.ok() && ++failures <= 3) {
      std::fprintf(stderr, "controller_scale_bench: %s %s: %s\n", publish_it ? "publish" : "unpublish",
                   volume_id.c_str(), st.error_message().c_str());
    }
    return ms;
  };

  std::printf("Controller at scale (real local backend, two tgtds: %s for the baselines, %s filled; driven by %s)\n",
              small->tgtd->portal().c_str(), large->tgtd->portal().c_str(), control.c_str());
  // Warm-up: the first call of each pool (gRPC channel, its tgtd's first target).
  (void)create(*small);
  (void)create(*large);
  std::printf("  filling one pool to %d volumes...\n", volumes);
  std::fflush(stdout);
  auto fill0 = Clock::now();
  while (large->created < volumes) create(*large);
  double fill_s = Ms(Clock::now() - fill0) / 1000;
  std::printf("  filled in %.0f s\n", fill_s);

  // Each figure and its baseline are sampled in turn, the side that goes
  // first alternating: the disk's flush latency here drifts by 2x over tens
  // of seconds, and timed one size after the other, that drift, not the
  // pool's size, set the ratio. Both start on a file system with nothing
  // left to write back: the fill's writeback is no call's at N volumes.
  ::sync();
  std::vector<double> empty_creates, full_creates;
  for (int i = 0; i < samples; ++i) {
    InTurn(i, {[&] { empty_creates.push_back(create(*small)); }, [&] { full_creates.push_back(create(*large)); }});
  }
  std::printf("  CreateVolume median %.1f ms on an empty pool, %.1f ms at %d volumes\n", Median(empty_creates),
              Median(full_creates), volumes);
  std::string n = std::to_string(volumes);
  if (create_only) {
    const int threads = tgtd_options.io_threads == testing::TgtdOptions::kAsDeployed
                            ? testing::DeployedTgtdIoThreads(&error)
                            : tgtd_options.io_threads;
    const std::string tgtd_label = threads == 0 ? "tgt's default I/O threads" : "tgtd -t " + std::to_string(threads);
    ReportSamples("CreateVolume at " + n + " volumes, " + tgtd_label, full_creates, empty_creates, "ms",
                  "on an empty pool, " + tgtd_label);
    // Here a failure is a finding about that tgtd, not of the benchmark:
    // counted and reported (the first ones with their message, above).
    ReportCount("CreateVolume failures, " + tgtd_label, failures.load());
    return 0;
  }

  // Publish and unpublish one volume per pool, in turn like the creates.
  std::vector<double> empty_publishes, full_publishes, empty_unpublishes, full_unpublishes;
  auto publish_and_unpublish = [&](PoolUnderTest& pool, std::vector<double>* publishes,
                                   std::vector<double>* unpublishes) {
    const std::string id = pool.volume_ids.empty() ? std::string() : pool.volume_ids.back();
    publishes->push_back(publish(pool, id, true));
    unpublishes->push_back(publish(pool, id, false));
  };
  for (int i = 0; i < samples; ++i) {
    InTurn(i, {[&] { publish_and_unpublish(*small, &empty_publishes, &empty_unpublishes); },
               [&] { publish_and_unpublish(*large, &full_publishes, &full_unpublishes); }});
  }
  std::printf("  ControllerPublish median %.1f ms on an empty pool, %.1f ms at %d volumes\n", Median(empty_publishes),
              Median(full_publishes), volumes);

  // A storm: kStorm volumes published at once (the external-attacher's
  // workers do so when a node's pods move), then unpublished at once, wall
  // time; against a storm on the empty pool and against the same calls one
  // after the other at N. The grants that come while one is at tgtd are
  // applied together (TgtExporter::Apply), one read each way per batch.
  constexpr int kStorm = 32;
  while (small->created < kStorm + 1) create(*small);  // the warm-up's and kStorm more
  std::vector<double> storm_publish_small, storm_publish_large, storm_publish_serial;
  std::vector<double> storm_unpublish_small, storm_unpublish_large, storm_unpublish_serial;
  auto storm = [&](PoolUnderTest& pool, bool concurrent, std::vector<double>* publishes,
                   std::vector<double>* unpublishes) {
    const size_t first = pool.volume_ids.size() > kStorm ? pool.volume_ids.size() - kStorm : 0;
    const std::vector<std::string> ids(pool.volume_ids.begin() + static_cast<long>(first), pool.volume_ids.end());
    for (bool publish_it : {true, false}) {
      auto t0 = Clock::now();
      if (concurrent) {
        std::vector<std::thread> threads;
        for (const auto& id : ids) threads.emplace_back([&, id] { (void)publish(pool, id, publish_it); });
        for (auto& t : threads) t.join();
      } else {
        for (const auto& id : ids) (void)publish(pool, id, publish_it);
      }
      (publish_it ? publishes : unpublishes)->push_back(Ms(Clock::now() - t0));
    }
  };
  std::vector<std::function<void()>> storm_sides = {
      [&] { storm(*small, true, &storm_publish_small, &storm_unpublish_small); },
      [&] { storm(*large, true, &storm_publish_large, &storm_unpublish_large); },
      [&] { storm(*large, false, &storm_publish_serial, &storm_unpublish_serial); }};
  const int storm_rounds = WholeTurns(samples / 8, 3);
  for (int round = -1; round < storm_rounds; ++round) {
    InTurn(round + 1, storm_sides);
    if (round < 0) {  // a warm-up round, dropped
      for (auto* v : {&storm_publish_small, &storm_publish_large, &storm_publish_serial, &storm_unpublish_small,
                      &storm_unpublish_large, &storm_unpublish_serial}) {
        v->clear();
      }
    }
  }
  std::printf(
      "  %d ControllerPublish at once: median %.0f ms on an empty pool, %.0f ms at %d volumes (%.0f ms "
      "one after the other)\n",
      kStorm, Median(storm_publish_small), Median(storm_publish_large), volumes, Median(storm_publish_serial));

  // Pages: the small pool holds one page (near-empty), the large N (and
  // the volumes its CreateVolume samples added). Only full pages count: a
  // short last page is less work and would flatter the comparison. A page
  // checks each of its volumes' exports (CheckVolumes: one look at tgtd's
  // listing for the page), so where that listing comes from is the same on
  // both sides of each figure:
  //   kept     both pools as the plugin runs them: a check may use the
  //            listing kept from the last read (most pages read nothing);
  //   live     both pools reopened with the listing kept 0 ms, so every
  //            page reads tgtd, set against that read alone (one listing of
  //            every target through the same control, parsed) and against
  //            a live page of the small pool.
  while (small->created < page) create(*small);
  ::sync();
  std::string small_token, large_token, none;
  long calls = 0;
  auto page_of = [&](PoolUnderTest& pool, std::string& token, std::vector<double>* times, std::vector<long>* reads) {
    double ms = list_page(pool, token, page, &token, &calls);
    if (pool.last_entries != page) return;
    times->push_back(ms);
    reads->push_back(calls);
  };
  const int page_rounds = WholeTurns(samples, 2);
  std::vector<double> kept_small, kept_large;
  std::vector<long> kept_small_reads, kept_large_reads;
  for (int round = -1; round < page_rounds; ++round) {  // round -1: a warm-up, dropped
    InTurn(round + 1, {[&] { page_of(*small, small_token, &kept_small, &kept_small_reads); },
                       [&] { page_of(*large, large_token, &kept_large, &kept_large_reads); }});
    if (round < 0) {
      kept_small.clear(), kept_large.clear(), kept_small_reads.clear(), kept_large_reads.clear();
    }
  }
  auto sum = [](const std::vector<long>& v) {
    long total = 0;
    for (long x : v) total += x;
    return total;
  };
  std::printf(
      "  ListVolumes page of %d, listing kept: median %.1f ms at %d volumes, %.1f ms at %d (tgtd requests "
      "over the pages: %ld, %ld)\n",
      page, Median(kept_large), large->created, Median(kept_small), small->created, sum(kept_large_reads),
      sum(kept_small_reads));
  std::fflush(stdout);

  if (!ServeBackend(*small, std::chrono::milliseconds(0), &error) ||
      !ServeBackend(*large, std::chrono::milliseconds(0), &error)) {
    std::fprintf(stderr, "controller_scale_bench: %s\n", error.c_str());
    return 1;
  }
  ::sync();
  std::vector<double> live_small, live_large, live_whole, reads;
  std::vector<long> live_small_reads, live_large_reads, live_whole_reads, unused;
  small_token.clear(), large_token.clear();
  const int live_rounds = WholeTurns(samples, 4);
  for (int round = -1; round < live_rounds; ++round) {  // round -1: a warm-up, dropped
    InTurn(round + 1, {[&] { reads.push_back(read_targets(*large)); },
                       [&] { page_of(*small, small_token, &live_small, &live_small_reads); },
                       [&] { page_of(*large, large_token, &live_large, &live_large_reads); },
                       [&] {
                         live_whole.push_back(list_page(*large, "", 0, &none, &calls));
                         live_whole_reads.push_back(calls);
                       }});
    if (round < 0) {
      for (auto* v : {&live_small, &live_large, &live_whole, &reads}) v->clear();
      for (auto* v : {&live_small_reads, &live_large_reads, &live_whole_reads}) v->clear();
    }
  }
  auto most = [](const std::vector<long>& v) { return v.empty() ? 0L : *std::max_element(v.begin(), v.end()); };
  std::printf(
      "  ListVolumes page of %d, live: median %.1f ms at %d volumes (%ld tgtd requests), %.1f ms at %d; "
      "whole list %.1f ms (%ld); one read of tgtd's targets %.1f ms\n",
      page, Median(live_large), large->created, most(live_large_reads), Median(live_small), small->created,
      Median(live_whole), most(live_whole_reads), Median(reads));
  std::fflush(stdout);

  // The checks of one page, the pre-batching way (one CheckVolume, so one
  // read of tgtd, per volume) and the batched way (CheckVolumes: one read
  // for the page), same ids, on the live pool: each call reads tgtd as it
  // would with no listing kept. The request counts are checked, so the
  // baseline is known to do the work it stands for.
  LocalBackend& backend = *large->backend;
  CountingControl& counting = *large->counting;
  auto listed = backend.ListVolumes("", page);
  std::vector<double> one_by_one, batched;
  long one_by_one_calls = 0, batched_calls = 0;
  if (listed.ok()) {
    std::vector<std::string> ids;
    for (const auto& r : listed->items) ids.push_back(r.id);
    auto old_way = [&](bool keep) {
      long before = counting.tgtadm();
      auto t0 = Clock::now();
      for (const auto& id : ids) {
        auto h = backend.CheckVolume(id);
        if (!h.ok() || h->abnormal) ++failures;
      }
      if (keep) one_by_one.push_back(Ms(Clock::now() - t0));
      one_by_one_calls = counting.tgtadm() - before;
    };
    auto batched_way = [&](bool keep) {
      long before = counting.tgtadm();
      auto t0 = Clock::now();
      for (const auto& h : backend.CheckVolumes(ids)) {
        if (!h.ok() || h->abnormal) ++failures;
      }
      if (keep) batched.push_back(Ms(Clock::now() - t0));
      batched_calls = counting.tgtadm() - before;
    };
    // Round -1 is a warm-up, dropped; the side that goes first alternates.
    for (int i = -1; i < WholeTurns(4, 2); ++i) {
      InTurn(i + 1, {[&] { old_way(i >= 0); }, [&] { batched_way(i >= 0); }});
    }
    if (one_by_one_calls < static_cast<long>(ids.size())) {
      std::fprintf(stderr,
                   "controller_scale_bench: CheckVolume x%zu made %ld tgtd requests; the pre-batching baseline must "
                   "read tgtd once per volume\n",
                   ids.size(), one_by_one_calls);
      ++failures;
    }
  } else {
    ++failures;
  }

  std::string p = std::to_string(page);
  ReportSamples("CreateVolume at " + n + " volumes", full_creates, empty_creates, "ms", "on an empty pool");
  ReportSamples("ControllerPublishVolume at " + n + " volumes", full_publishes, empty_publishes, "ms",
                "on an empty pool");
  ReportSamples("ControllerUnpublishVolume at " + n + " volumes", full_unpublishes, empty_unpublishes, "ms",
                "on an empty pool");
  const std::string st = std::to_string(kStorm);
  ReportSamples("ControllerPublishVolume x" + st + " concurrent at " + n + " volumes, wall", storm_publish_large,
                storm_publish_small, "ms", "x" + st + " concurrent on an empty pool");
  ReportSamples("ControllerPublishVolume x" + st + " concurrent at " + n + " volumes vs in series", storm_publish_large,
                storm_publish_serial, "ms", "x" + st + " in series at " + n + " volumes");
  ReportSamples("ControllerUnpublishVolume x" + st + " concurrent at " + n + " volumes, wall", storm_unpublish_large,
                storm_unpublish_small, "ms", "x" + st + " concurrent on an empty pool");
  ReportSamples("ControllerUnpublishVolume x" + st + " concurrent at " + n + " volumes vs in series",
                storm_unpublish_large, storm_unpublish_serial, "ms", "x" + st + " in series at " + n + " volumes");
  ReportSamples("ListVolumes page of " + p + " at " + n + " vs at " + p + " volumes, listing kept", kept_large,
                kept_small, "ms", "a page of " + p + " at " + p + " volumes, listing kept");
  ReportCount("tgtd requests over " + std::to_string(kept_large.size()) + " pages at " + n + ", listing kept",
              sum(kept_large_reads));
  ReportSamples("ListVolumes page of " + p + " at " + n + " volumes, live", live_large, reads, "ms",
                "1 read of tgtd's " + n + " targets, same control");
  ReportSamples("ListVolumes whole list at " + n + " volumes, live", live_whole, reads, "ms",
                "1 read of tgtd's " + n + " targets, same control");
  ReportSamples("ListVolumes page of " + p + " at " + n + " vs at " + p + " volumes, live", live_large, live_small,
                "ms", "a page of " + p + " at " + p + " volumes, live");
  ReportCount("tgtd requests per live ListVolumes page of " + p, most(live_large_reads));
  ReportCount("tgtd requests per live whole ListVolumes of " + n, most(live_whole_reads));
  ReportSamples("Page checks batched (CheckVolumes x" + p + "), live", batched, one_by_one, "ms",
                "CheckVolume x" + p + ", one tgtd read each");
  ReportCount("tgtd requests: CheckVolumes x" + p, batched_calls);
  ReportCount("tgtd requests: CheckVolume x" + p, one_by_one_calls);
  ReportCount("Controller scale failures", failures.load());
  // No DeleteVolume x N: each pool's harness deletes every target when it
  // stops its tgtd, and the pool goes with its temp dir.
  return failures.load() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace blockcsi::bench

int main(int argc, char** argv) { return blockcsi::bench::Main(argc, argv); }
