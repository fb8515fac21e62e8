// lifecycle_bench: the whole plugin (`blockcsi --mode all`, local backend,
// userspace connector) on a private tgtd, timed per CSI step against the
// same work done with bare commands on the same tgtd in the same run:
//   CreateVolume          ~ ftruncate + tgtd new target + new LUN + LUN params
//   ControllerPublish     ~ tgtd bind (initiator name)
//   NodeStage (ext4)      ~ libiscsi login + losetup + mkfs.ext4 + mount
//   NodePublish           ~ mount --bind
//   NodeUnpublish         ~ umount
//   NodeUnstage           ~ umount + losetup -d + logout
//   ControllerUnpublish   ~ tgtd unbind
//   DeleteVolume          ~ tgtd delete target + unlink
// The bare controller steps ask tgtd over its management socket and touch
// the image in-process, as the plugin does by default (issue #22: tgtadm
// and truncate processes made the baseline pay for execs the plugin never
// runs).
// There is no kernel initiator here, so the bare stage logs in with libiscsi
// but puts its loop device on the image file itself: the ratio includes all
// that the bridge (FUSE file over the iSCSI session) adds. Both sides mount
// through libmount, alternate which goes first per round, and drop a warm-up
// round; each step prints its min / median / max.
// A no-op CSI call (NodeGetCapabilities) is timed in each round too: the
// bind mount and umount steps are also set against it plus their mount call.
// Then an attach storm: N volumes staged concurrently against N bare stages
// done concurrently too (issue #22), and against N bare stages in series
// (issue #18: concurrency should win); warm-up dropped, sides taking turns,
// errors counted, and the plugin's RSS idle, with the storm staged and after
// it. Needs root, tgt, FUSE and loop devices.
// Last, the per-step breakdown: --spans N lifecycles on a plugin restarted
// with --log-level debug, its spans summed per step (bench/span_breakdown.h).
//   lifecycle_bench [--runs N] [--storm 32,64] [--storm-rounds R] [--size-mib M] [--spans N]
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "backend/local/tgtd_socket_control.h"
#include "bench/bench_args.h"
#include "bench/bench_report.h"
#include "bench/process_rss.h"
#include "bench/span_breakdown.h"
#include "bridge/libiscsi_session.h"
#include "common/atomic_file.h"
#include "common/executor.h"
#include "common/logging.h"
#include "common/mounter.h"
#include "common/unique_fd.h"
#include "contract/initiator.h"
#include "support/csi_calls.h"
#include "support/plugin_under_test.h"

namespace blockcsi::bench {
namespace {

using namespace std::chrono_literals;

constexpr char kNode[] = "bench-node";
constexpr char kBareInitiatorNode[] = "bench-bare";

using Volume = testing::CsiVolume;

class LifecycleBench {
 public:
  LifecycleBench(testing::TgtdHarness* tgtd, testing::PluginUnderTest* plugin, std::string dir, uint64_t size_bytes)
      : tgtd_(tgtd), plugin_(plugin), dir_(std::move(dir)), size_bytes_(size_bytes), exec_(MakeProcessExecutor()) {}

  // ---- the plugin, over CSI (support/csi_calls.h) ----
  grpc::Status Create(const std::string& name, Volume* v) {
    return calls_.Create(*plugin_, name, static_cast<int64_t>(size_bytes_), v);
  }
  grpc::Status ControllerPublish(Volume* v) { return calls_.ControllerPublish(*plugin_, v); }
  grpc::Status Stage(const Volume& v) { return calls_.Stage(*plugin_, v); }
  grpc::Status Publish(const Volume& v) { return calls_.Publish(*plugin_, v); }
  grpc::Status Unpublish(const Volume& v) { return calls_.Unpublish(*plugin_, v); }
  grpc::Status Unstage(const Volume& v) { return calls_.Unstage(*plugin_, v); }
  grpc::Status ControllerUnpublish(const Volume& v) { return calls_.ControllerUnpublish(*plugin_, v); }
  grpc::Status Delete(const Volume& v) { return calls_.Delete(*plugin_, v); }
  // A CSI call that does no work: what any step pays for gRPC, the
  // interceptor and the plugin's logging, whatever the step does.
  grpc::Status NoOp() {
    csi::v1::NodeGetCapabilitiesRequest req;
    csi::v1::NodeGetCapabilitiesResponse resp;
    return plugin_->node().NodeGetCapabilities(testing::Deadline().get(), req, &resp);
  }

  // One volume's lifecycle, the eight CSI calls in order (CreateVolume of
  // `name` into `*v` first), each true when it succeeded.
  std::vector<std::function<bool()>> CsiLifecycle(const std::string& name, Volume* v) {
    return {[this, name, v] { return Create(name, v).ok(); },
            [this, v] { return ControllerPublish(v).ok(); },
            [this, v] { return Stage(*v).ok(); },
            [this, v] { return Publish(*v).ok(); },
            [this, v] { return Unpublish(*v).ok(); },
            [this, v] { return Unstage(*v).ok(); },
            [this, v] { return ControllerUnpublish(*v).ok(); },
            [this, v] { return Delete(*v).ok(); }};
  }

  // ---- the same work with bare commands (tids from 10000, files under bare/) ----
  struct Bare {
    int tid = 0;
    std::string iqn, image, mnt, bind, loop;
    std::unique_ptr<LibIscsiSession> session;
  };
  // `n` bare volumes numbered from `first`, created and published; each
  // that failed counts in `*errors`.
  std::vector<Bare> CreatedBares(int n, int first, int* errors) {
    std::vector<Bare> bare;
    for (int i = 0; i < n; ++i) {
      bare.push_back(NewBare(first + i));
      if (!BareCreate(bare.back()) || !BareControllerPublish(bare.back())) ++*errors;
    }
    return bare;
  }
  Bare NewBare(int i) {
    Bare b;
    b.tid = 10000 + i;
    b.iqn = "iqn.2026-11.io.blockcsi.bare:v" + std::to_string(i);
    b.image = dir_ + "/bare/" + std::to_string(i) + ".img";
    b.mnt = dir_ + "/bare/mnt-" + std::to_string(i);
    b.bind = dir_ + "/bare/bind-" + std::to_string(i);
    std::filesystem::create_directories(b.mnt);
    std::filesystem::create_directories(b.bind);
    return b;
  }
  bool Run(const Command& c) {
    auto r = RunChecked(*exec_, c);
    if (!r.ok()) std::fprintf(stderr, "lifecycle_bench: %s\n", r.status().ToString().c_str());
    return r.ok();
  }
  // One request over tgtd's socket, as blockcsi-target sends it by default.
  bool Tgtd(const TgtdRequest& request) {
    auto r = TgtdSocketControl(tgtd_->control_port()).Send(request);
    if (!r.ok() || !r->ok()) {
      std::fprintf(stderr, "lifecycle_bench: tgtd %s: %s\n", request.Describe().c_str(),
                   r.ok() ? std::string(TgtdErrorText(r->error)).c_str() : r.status().ToString().c_str());
    }
    return r.ok() && r->ok();
  }
  bool BareCreate(Bare& b) {
    std::string t = std::to_string(b.tid);
    UniqueFd image(::open(b.image.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (image.get() < 0 || ::ftruncate(image.get(), static_cast<off_t>(size_bytes_)) != 0) {
      std::fprintf(stderr, "lifecycle_bench: create %s: %s\n", b.image.c_str(), std::strerror(errno));
      return false;
    }
    return Tgtd(TgtdRequest::NewTarget(b.tid, b.iqn)) && Tgtd(TgtdRequest::NewLun(b.tid, 1, b.image)) &&
           Tgtd(TgtdRequest::ConfigureLun(b.tid, 1, "bare" + t, "60000000000000000000000000b" + t));
  }
  bool BareControllerPublish(Bare& b) {
    return Tgtd(TgtdRequest::BindInitiator(b.tid, InitiatorIqnForNode(kBareInitiatorNode)));
  }
  static bool MountOk(const Status& st) {
    if (!st.ok()) std::fprintf(stderr, "lifecycle_bench: bare mount: %s\n", st.ToString().c_str());
    return st.ok();
  }
  bool BareStage(Bare& b) {
    LibIscsiOptions o;
    o.portals = {tgtd_->portal()};
    o.target_iqn = b.iqn;
    o.lun = 1;
    o.initiator_iqn = InitiatorIqnForNode(kBareInitiatorNode);
    auto session = LibIscsiSession::Connect(o);
    if (!session.ok()) {
      std::fprintf(stderr, "lifecycle_bench: bare login: %s\n", session.status().ToString().c_str());
      return false;
    }
    b.session = std::move(session).value();
    auto loop = RunChecked(*exec_, Command("losetup").Arg("-f").Arg("--show").Arg(b.image));
    if (!loop.ok()) return false;
    b.loop = loop->stdout_text.substr(0, loop->stdout_text.find('\n'));
    return Run(Command("mkfs.ext4")
                   .Arg("-q")
                   .Arg("-E")
                   .Arg("nodiscard,lazy_itable_init=1,lazy_journal_init=1")
                   .Arg(b.loop)) &&
           MountOk(mounter_->Mount(b.loop, b.mnt, "ext4", ""));
  }
  // Mounts go through libmount in-process, as the plugin's do (issue #22:
  // forking /bin/mount here made the baseline pay for an exec the plugin
  // never pays, flattering the plugin's overhead).
  bool BarePublish(Bare& b) { return MountOk(mounter_->BindMount(b.mnt, b.bind, false)); }
  bool BareUnpublish(Bare& b) { return MountOk(mounter_->Unmount(b.bind)); }
  bool BareUnstage(Bare& b) {
    bool ok = MountOk(mounter_->Unmount(b.mnt)) && Run(Command("losetup").Arg("-d").Arg(b.loop));
    b.session.reset();  // logout
    return ok;
  }
  bool BareControllerUnpublish(Bare& b) {
    return Tgtd(TgtdRequest::UnbindInitiator(b.tid, InitiatorIqnForNode(kBareInitiatorNode)));
  }
  bool BareDelete(Bare& b) {
    bool ok = Tgtd(TgtdRequest::DeleteTarget(b.tid));
    return ::unlink(b.image.c_str()) == 0 && ok;
  }

  // The durability floor of a controller step (issue #18): the fsyncs the
  // plugin must pay to keep its records crash-safe, done the same way on the
  // same file system as its state (a small record written with
  // WriteFileAtomically: temp, fsync, rename, fsync of the directory, two
  // fsyncs; an odd one is that record's durable removal, one fsync of the
  // directory). A bare tgtd request cannot be matched by a step that must
  // make a record durable first; bare + these fsyncs can.
  double DurabilityFsyncs(int fsyncs) {
    const std::string dir = dir_ + "/floor";
    std::filesystem::create_directories(dir);
    const std::string record = dir + "/vol-floor.json";
    auto t0 = Clock::now();
    Status st = OkStatus();
    for (; fsyncs >= 2 && st.ok(); fsyncs -= 2) st = WriteFileAtomically(record, std::string(400, 'r') + "\n");
    if (fsyncs == 1 && st.ok()) st = RemoveFileDurably(record);
    double ms = Ms(Clock::now() - t0);
    if (!st.ok()) std::fprintf(stderr, "lifecycle_bench: durability floor: %s\n", st.ToString().c_str());
    return ms;
  }

  // Per-step latency, `runs` full lifecycles each way, interleaved so that
  // load from elsewhere on the host falls on both sides.
  int Steps(int runs) {
    static const char* kSteps[] = {
        "CreateVolume",        "ControllerPublishVolume", "NodeStageVolume (ext4)",    "NodePublishVolume",
        "NodeUnpublishVolume", "NodeUnstageVolume",       "ControllerUnpublishVolume", "DeleteVolume"};
    static const char* kBare[] = {"ftruncate + 3 tgtd requests",
                                  "tgtd bind",
                                  "login + losetup + mkfs + mount",
                                  "mount --bind",
                                  "umount",
                                  "umount + losetup -d + logout",
                                  "tgtd unbind",
                                  "tgtd delete + unlink"};
    std::vector<std::vector<double>> plugin(8), bare(8);
    // The fsyncs each step's crash points need (the plugin's fsync spans per
    // call, bench/span_breakdown.h; -1: not a controller step): CreateVolume
    // the image's name (images/ directory) and the record (file and
    // volumes/), ControllerPublish and ControllerUnpublish the record's
    // rewrite, DeleteVolume the record's removal (volumes/).
    static const int kFloorFsyncs[] = {3, 2, -1, -1, -1, -1, 2, 1};
    std::vector<std::vector<double>> floor_fsyncs(8);  // ms per round, bare side
    std::vector<double> no_op;                         // one no-op CSI call per round, plugin side
    int errors = 0;
    // Round 0 is a warm-up (page cache, tgtd, first exec of each program)
    // and is discarded; the side that goes first alternates per round, so
    // neither side always runs on a host the other just warmed.
    for (int i = 0; i <= runs; ++i) {
      Volume v;
      std::vector<std::function<bool()>> csi = CsiLifecycle("life-" + std::to_string(i), &v);
      Bare b = NewBare(i);
      std::vector<std::function<bool()>> cmds = {[&] { return BareCreate(b); },
                                                 [&] { return BareControllerPublish(b); },
                                                 [&] { return BareStage(b); },
                                                 [&] { return BarePublish(b); },
                                                 [&] { return BareUnpublish(b); },
                                                 [&] { return BareUnstage(b); },
                                                 [&] { return BareControllerUnpublish(b); },
                                                 [&] { return BareDelete(b); }};
      auto plugin_side = [&] {
        auto n0 = Clock::now();
        if (!NoOp().ok()) ++errors;
        if (i > 0) no_op.push_back(Ms(Clock::now() - n0));
        for (size_t s = 0; s < 8; ++s) {
          auto t0 = Clock::now();
          if (!csi[s]()) {
            ++errors;
            std::fprintf(stderr, "lifecycle_bench: %s failed; plugin log:\n%s\n", kSteps[s],
                         plugin_->LogTail().c_str());
          }
          if (i > 0) plugin[s].push_back(Ms(Clock::now() - t0));
        }
      };
      auto bare_side = [&] {
        for (size_t s = 0; s < 8; ++s) {
          auto t0 = Clock::now();
          if (!cmds[s]()) ++errors;
          if (i > 0) bare[s].push_back(Ms(Clock::now() - t0));
          if (kFloorFsyncs[s] < 0) continue;
          double fsync_ms = DurabilityFsyncs(kFloorFsyncs[s]);  // timed apart: the bare row stays bare
          if (i > 0) floor_fsyncs[s].push_back(fsync_ms);
        }
      };
      if (i % 2 == 0) {
        plugin_side();
        bare_side();
      } else {
        bare_side();
        plugin_side();
      }
    }
    std::printf("Per-step latency, median of %d lifecycles (%s volumes)\n", runs,
                Format(size_bytes_ >> 20, "MiB").c_str());
    // Each round's whole lifecycle (the sum of its steps), both sides.
    std::vector<double> plugin_total(plugin[0].size(), 0), bare_total(bare[0].size(), 0);
    for (size_t s = 0; s < 8; ++s) {
      ReportSamples(std::string(kSteps[s]), plugin[s], bare[s], "ms", kBare[s]);
      for (size_t r = 0; r < plugin[s].size() && r < plugin_total.size(); ++r) plugin_total[r] += plugin[s][r];
      for (size_t r = 0; r < bare[s].size() && r < bare_total.size(); ++r) bare_total[r] += bare[s][r];
    }
    ReportSamples("Full lifecycle (all steps of one round)", plugin_total, bare_total, "ms", "bare commands");
    // A bind mount takes tens of microseconds, less than any gRPC call: the
    // two steps that are one mount call are also set against the mount plus
    // a no-op CSI call of the same round (NodeGetCapabilities), the floor of
    // any CSI driver. The rows above keep the bare baselines.
    std::vector<double> bind_floor, umount_floor;
    for (size_t r = 0; r < no_op.size() && r < bare[3].size() && r < bare[4].size(); ++r) {
      bind_floor.push_back(bare[3][r] + no_op[r]);
      umount_floor.push_back(bare[4][r] + no_op[r]);
    }
    ReportSamples("NodePublishVolume vs the CSI floor", plugin[3], bind_floor, "ms", "mount --bind + a no-op CSI call");
    ReportSamples("NodeUnpublishVolume vs the CSI floor", plugin[4], umount_floor, "ms", "umount + a no-op CSI call");
    // Each controller step against its durability floor: the bare step plus
    // the fsyncs of its crash points in the same round (DurabilityFsyncs).
    for (size_t s = 0; s < 8; ++s) {
      if (kFloorFsyncs[s] < 0) continue;
      std::vector<double> floor;
      for (size_t r = 0; r < bare[s].size() && r < floor_fsyncs[s].size(); ++r) {
        floor.push_back(bare[s][r] + floor_fsyncs[s][r]);
      }
      ReportSamples(std::string(kSteps[s]) + " vs its durability floor", plugin[s], floor, "ms",
                    std::string(kBare[s]) + " + " + std::to_string(kFloorFsyncs[s]) + " record fsyncs");
    }
    ReportCount("Lifecycle errors", errors);
    return errors;
  }

  // Where the time of each plugin step goes: `runs` more lifecycles on a
  // plugin started with --log-level debug (its spans, common/span.h), kept
  // apart from the timed rounds above so that debug logging costs them
  // nothing.
  int Breakdown(int runs) {
    static const char* kSteps[] = {
        "CreateVolume",        "ControllerPublishVolume", "NodeStageVolume",           "NodePublishVolume",
        "NodeUnpublishVolume", "NodeUnstageVolume",       "ControllerUnpublishVolume", "DeleteVolume"};
    SpanBreakdown spans(plugin_->log_path());
    int errors = 0;
    for (int i = 0; i < runs; ++i) {
      Volume v;
      std::vector<std::function<bool()>> csi = CsiLifecycle("spans-" + std::to_string(i), &v);
      for (size_t s = 0; s < 8; ++s) {
        spans.Mark();
        auto t0 = Clock::now();
        if (!csi[s]()) ++errors;
        spans.Collect(kSteps[s], Ms(Clock::now() - t0));
      }
    }
    spans.Print();
    return errors;
  }

  // N volumes staged at once (one thread each), against N bare stages at
  // once (one thread each); then the same for unstage. Like the steps: a
  // warm-up round dropped, then `rounds` rounds with the side that goes
  // first alternating, each figure with its min / median / max.
  int Storm(int n, int rounds, double idle_rss) {
    int errors = 0, failed_calls = 0;
    std::vector<double> stage_ms, unstage_ms, bare_stage_ms, bare_unstage_ms;
    std::vector<double> serial_stage_ms, serial_unstage_ms;
    double peak_rss = 0, after_rss = 0, bridges_rss = 0;
    int bridges = 0;
    const std::string sn = std::to_string(n);
    auto plugin_round = [&](int round, bool keep) {
      std::vector<Volume> vols(n);
      for (int i = 0; i < n; ++i) {
        if (!Create("storm" + sn + "-" + std::to_string(round + 1) + "-" + std::to_string(i), &vols[i]).ok() ||
            !ControllerPublish(&vols[i]).ok()) {
          ++errors;
        }
      }
      std::atomic<int> failed{0};
      auto concurrently = [&](auto call) {
        std::vector<std::thread> threads;
        auto t0 = Clock::now();
        for (int i = 0; i < n; ++i) {
          threads.emplace_back([&, i] {
            grpc::Status st = call(vols[i]);
            if (!st.ok()) {
              ++failed;
              std::fprintf(stderr, "lifecycle_bench: storm %s: %s\n", vols[i].id.c_str(), st.error_message().c_str());
            }
          });
        }
        for (auto& t : threads) t.join();
        return Ms(Clock::now() - t0);
      };
      double stage = concurrently([&](const Volume& v) { return Stage(v); });
      // Memory with the storm staged: the last round's (any round would do).
      peak_rss = RssMib(plugin_->pid());
      bridges_rss = BridgesRssMib(plugin_->dir(), plugin_->pid(), &bridges);
      double unstage = concurrently([&](const Volume& v) { return Unstage(v); });
      failed_calls += failed.load();
      for (auto& v : vols) {
        if (!ControllerUnpublish(v).ok() || !Delete(v).ok()) ++errors;
      }
      if (keep) {
        stage_ms.push_back(stage);
        unstage_ms.push_back(unstage);
      }
    };
    auto bare_round = [&](int round, bool keep) {
      std::vector<Bare> bare = CreatedBares(n, 1000 * (round + 2), &errors);
      // Concurrent against concurrent (issue #22: N serial bare stages made
      // the plugin's concurrent storm look better than the same work is).
      std::atomic<int> bare_failed{0};
      auto bare_concurrently = [&](auto step) {
        std::vector<std::thread> threads;
        auto t0 = Clock::now();
        for (auto& b : bare) {
          threads.emplace_back([&, bp = &b] {
            if (!step(*bp)) ++bare_failed;
          });
        }
        for (auto& t : threads) t.join();
        return Ms(Clock::now() - t0);
      };
      double stage = bare_concurrently([&](Bare& b) { return BareStage(b); });
      double unstage = bare_concurrently([&](Bare& b) { return BareUnstage(b); });
      errors += bare_failed.load();
      for (auto& b : bare) {
        if (!BareControllerUnpublish(b) || !BareDelete(b)) ++errors;
      }
      if (keep) {
        bare_stage_ms.push_back(stage);
        bare_unstage_ms.push_back(unstage);
      }
    };
    // Issue #18's figure: the same N stages done by bare commands one after
    // the other, each on a fresh volume as the plugin's are (what a node
    // without concurrency would take; concurrency should beat it).
    auto serial_round = [&](int round, bool keep) {
      std::vector<Bare> bare = CreatedBares(n, 1000 * (round + 2) + 500, &errors);
      auto in_series = [&](auto step) {
        auto t0 = Clock::now();
        for (auto& b : bare) errors += step(b) ? 0 : 1;
        return Ms(Clock::now() - t0);
      };
      double stage = in_series([&](Bare& b) { return BareStage(b); });
      double unstage = in_series([&](Bare& b) { return BareUnstage(b); });
      for (auto& b : bare) {
        if (!BareControllerUnpublish(b) || !BareDelete(b)) ++errors;
      }
      if (keep) {
        serial_stage_ms.push_back(stage);
        serial_unstage_ms.push_back(unstage);
      }
    };
    // The three sides take turns going first, so none always runs on a host
    // another just warmed.
    std::vector<std::function<void(int, bool)>> sides = {plugin_round, bare_round, serial_round};
    for (int round = -1; round < rounds; ++round) {
      const bool keep = round >= 0;  // round -1: the warm-up
      size_t first = static_cast<size_t>(round + 1) % sides.size();
      for (size_t k = 0; k < sides.size(); ++k) sides[(first + k) % sides.size()](round, keep);
    }
    std::this_thread::sleep_for(1s);  // let the allocator hand back what it will
    after_rss = RssMib(plugin_->pid());

    std::printf("Attach storm: %d volumes on one node, %d rounds after a warm-up, sides alternating\n", n, rounds);
    ReportSamples("Storm " + sn + ": NodeStage x" + sn + " concurrent, wall", stage_ms, bare_stage_ms, "ms",
                  "bare stage x" + sn + " concurrent");
    ReportSamples("Storm " + sn + ": NodeUnstage x" + sn + " concurrent, wall", unstage_ms, bare_unstage_ms, "ms",
                  "bare unstage x" + sn + " concurrent");
    ReportSamples("Storm " + sn + ": NodeStage x" + sn + " concurrent vs in series", stage_ms, serial_stage_ms, "ms",
                  "bare stage x" + sn + " in series");
    ReportSamples("Storm " + sn + ": NodeUnstage x" + sn + " concurrent vs in series", unstage_ms, serial_unstage_ms,
                  "ms", "bare unstage x" + sn + " in series");
    ReportCount("Storm " + sn + ": failed NodeStage/NodeUnstage", failed_calls);
    Report("Plugin RSS with " + sn + " staged", peak_rss, idle_rss, "MiB", "idle");
    Report("Plugin RSS after storm " + sn + " (all unstaged)", after_rss, idle_rss, "MiB", "idle");
    // Each staged volume has its own bridge process (libiscsi + FUSE).
    Report("RSS per bridge with " + sn + " staged (mean of " + std::to_string(bridges) + ")",
           bridges > 0 ? bridges_rss / bridges : 0, idle_rss, "MiB", "plugin idle");
    return errors + failed_calls;
  }

 private:
  testing::TgtdHarness* tgtd_;
  testing::PluginUnderTest* plugin_;
  std::string dir_;
  uint64_t size_bytes_;
  std::unique_ptr<Executor> exec_;
  const testing::CsiCalls calls_{kNode};
  std::unique_ptr<Mounter> mounter_ = MakeLibmountMounter();
};

int Main(int argc, char** argv) {
  int runs = 10;
  int span_runs = 3;
  uint64_t size_mib = 64;
  std::vector<int> storms = {32, 64};
  int storm_rounds = 3;
  CLI::App app{"lifecycle_bench: the plugin's CSI steps against bare commands, and an attach storm", "lifecycle_bench"};
  AddRounds(app, "--runs", &runs, 2, "measured lifecycles (plugin and bare commands take turns to go first)");
  AddCountList(app, "--storm", &storms, "volumes staged at once, one storm per value");
  AddRounds(app, "--storm-rounds", &storm_rounds, 3,
            "measured rounds per storm (the three sides take turns to go first)");
  app.add_option("--size-mib", size_mib, "volume size")->capture_default_str();
  app.add_option("--spans", span_runs, "lifecycles for the per-step span breakdown")->capture_default_str();
  if (auto exit_code = ParseFlags(app, argc, argv)) return *exit_code;
  InitLogging("lifecycle_bench", LogFormat::kText, LogLevel::kWarn);
  if (!testing::IsRoot() || ::access("/dev/fuse", R_OK | W_OK) != 0) {
    std::fprintf(stderr, "lifecycle_bench: needs root and /dev/fuse\n");
    return 2;
  }
  std::string error;
  auto tgtd = testing::TgtdHarness::Start(&error);
  if (!tgtd) {
    std::fprintf(stderr, "lifecycle_bench: %s\n", error.c_str());
    return 2;
  }
  testing::TempDir tmp;
  int errors = 0;
  {
    testing::PluginUnderTest plugin(tmp.Join("plugin"), tgtd.get());
    testing::PluginOptions options;
    options.node_id = kNode;
    if (!plugin.Start(options, &error)) {
      std::fprintf(stderr, "lifecycle_bench: %s\n", error.c_str());
      return 1;
    }
    std::this_thread::sleep_for(2s);  // idle: after start-up, before any call
    double idle_rss = RssMib(plugin.pid());
    LifecycleBench bench(tgtd.get(), &plugin, tmp.path(), size_mib << 20);
    errors += bench.Steps(runs);
    for (int n : storms) errors += bench.Storm(n, storm_rounds, idle_rss);
    plugin.Stop();
    if (span_runs > 0) {
      options.extra_args = {"--log-level", "debug"};
      if (!plugin.Start(options, &error)) {
        std::fprintf(stderr, "lifecycle_bench: debug restart: %s\n", error.c_str());
        return 1;
      }
      errors += bench.Breakdown(span_runs);
      plugin.Stop();
    }
  }
  // Whatever a failure left behind (mounts, loop devices, bridges) goes
  // before the temp dir and the tgtd do.
  testing::CleanUpUnder(tmp.path());
  return errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace blockcsi::bench

int main(int argc, char** argv) { return blockcsi::bench::Main(argc, argv); }
