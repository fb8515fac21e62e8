// rbd_seq_bench: 4 MiB sequential writes through the userspace bridge's RBD
// transport (librbd → FUSE file → loop device, fio libaio direct) against
// `rbd bench --io-type write --io-size 4M --io-pattern seq` on the same pool
// with as many writes in flight (--io-threads = fio's iodepth), the same
// number of bytes each run (issue #17 item 5). A throw-away single-node Ceph
// (test/support/ceph_test_cluster.h, hack/ceph-cluster.sh); both images are
// made by the real RBD backend with the same size and features; rbd bench
// writes its own image (the bridge holds the exclusive lock on the other).
// A warm-up round (which also allocates every object of both images) is
// dropped, the side that goes first alternates per round.
// When this machine cannot run Ceph, or the cluster does not start, it
// prints `SKIP<TAB>reason` and exits 0: the report says why there is no row.
//
//   rbd_seq_bench [--size-mib 1024] [--rounds 4] [--depths 1,16]
//
// Besides RESULT lines (bench_report.h), one line per depth:
//   RBD<TAB>depth<TAB>bridge min/med/max<TAB>rbd bench min/med/max<TAB>ratio
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "attach/attach_spec.h"
#include "attach/attacher_factory.h"
#include "backend/rbd/rbd_backend.h"
#include "bench/bench_args.h"
#include "bench/bench_attacher.h"
#include "bench/bench_report.h"
#include "bench/fio_job.h"
#include "common/executor.h"
#include "common/logging.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "support/ceph_test_cluster.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"

namespace blockcsi::bench {
namespace {

struct Options {
  uint64_t size_mib = 1024;
  int rounds = 4;
  std::vector<int> depths = {1, 16};
};

// nullopt: go on; else the exit code (help or usage error printed).
std::optional<int> ParseOptions(int argc, char** argv, Options* o) {
  CLI::App app{"rbd_seq_bench: 4 MiB sequential writes, the RBD bridge against rbd bench", "rbd_seq_bench"};
  app.add_option("--size-mib", o->size_mib, "image size (a multiple of 4, at least 16)")
      ->check(CLI::Range(uint64_t{16}, uint64_t{1} << 30))
      ->capture_default_str();
  AddRounds(app, "--rounds", &o->rounds, 2, "measured rounds (the two sides take turns to go first)")
      ->check(CLI::Range(2, 1000));
  AddCountList(app, "--depths", &o->depths, "writes in flight, one figure per value");
  if (auto exit_code = ParseFlags(app, argc, argv)) return exit_code;
  if (o->size_mib % 4 != 0) return UsageError(app, "--size-mib wants a multiple of 4 (4 MiB writes)");
  return std::nullopt;
}

int Skip(const std::string& why) {
  std::printf("rbd_seq_bench: skipped: %s\nSKIP\t%s\n", why.c_str(), why.c_str());
  return 0;
}

// "bytes/sec: 449.8 MiB/s" from rbd bench's last line (measured after its
// closing flush), in MiB/s; 0 if absent.
double RbdBenchMiBps(const std::string& output) {
  auto at = output.rfind("bytes/sec:");
  if (at == std::string::npos) return 0;
  double value = 0;
  char unit[16] = {};
  int fields = std::sscanf(output.c_str() + at, "bytes/sec: %lf %15s", &value, unit);
  if (fields == 1) return value / (1 << 20);  // older rbd: a plain number of bytes
  if (fields != 2) return 0;
  std::string u = unit;
  if (u == "B/s") return value / (1 << 20);
  if (u == "KiB/s") return value / 1024;
  if (u == "MiB/s") return value;
  if (u == "GiB/s") return value * 1024;
  return 0;
}

// The cluster, the two images and the bridge's attach; undone in reverse.
class RbdBench {
 public:
  explicit RbdBench(const Options& o) : o_(o) {}
  ~RbdBench() {
    if (attacher_ && !device_.empty()) {
      if (auto st = attacher_->Detach("bench-rbd"); !st.ok()) {
        std::fprintf(stderr, "rbd_seq_bench: detach: %s\n", st.ToString().c_str());
      }
    }
    testing::CleanUpUnder(tmp_.path());
    for (const auto& id : volumes_) {
      (void)backend_->RevokeAccess(id, InitiatorIqnForNode("bench"));
      if (auto st = backend_->DeleteVolume(id); !st.ok()) {
        std::fprintf(stderr, "rbd_seq_bench: delete %s: %s\n", id.c_str(), st.ToString().c_str());
      }
    }
  }
  RbdBench(const RbdBench&) = delete;
  RbdBench& operator=(const RbdBench&) = delete;

  // "" when ready; else why not (a cluster that did not start is a skip).
  std::string SetUp(bool* skip) {
    *skip = true;
    cluster_ = testing::CephTestCluster::Acquire(&error_);
    if (!cluster_) return "Ceph did not start: " + error_.substr(0, error_.find('\n'));
    *skip = false;
    env_ = cluster_->env();
    RbdBackendOptions bo;
    bo.ceph_conf = env_["CEPH_CONF"];
    bo.ceph_user = env_["BLOCKCSI_CEPH_USER"];
    bo.keyring = env_["BLOCKCSI_CEPH_KEYRING"];
    bo.pool = env_["RBD_POOL"];
    auto backend = MakeRbdBackend(bo);
    if (!backend.ok()) return backend.status().ToString();
    backend_ = *backend;
    std::map<std::string, std::string> bridge_context, raw_context;
    if (auto why = MakeImage("bench-rbd-bridge", &bridge_context); !why.empty()) return why;
    if (auto why = MakeImage("bench-rbd-raw", &raw_context); !why.empty()) return why;
    raw_image_ = raw_context[publish_context::kRbdPool] + "/" + raw_context[publish_context::kRbdImage];
    return Attach(bridge_context);
  }

  bool RunRbdBench(int depth, double* mibps) {
    auto exec = MakeProcessExecutor();
    Command c("rbd");
    c.Args({"--conf", env_["CEPH_CONF"], "--id", env_["BLOCKCSI_CEPH_USER"], "--keyring", env_["BLOCKCSI_CEPH_KEYRING"],
            "bench", "--io-type", "write", "--io-size", "4M", "--io-pattern", "seq", "--io-threads",
            std::to_string(depth), "--io-total", std::to_string(o_.size_mib) + "M", raw_image_})
        .Timeout(std::chrono::seconds(600));
    auto r = RunChecked(*exec, c);
    if (!r.ok()) {
      std::fprintf(stderr, "rbd_seq_bench: %s\n", r.status().ToString().c_str());
      return false;
    }
    *mibps = RbdBenchMiBps(r->stdout_text);
    return *mibps > 0 || (std::fprintf(stderr, "rbd_seq_bench: no bytes/sec from rbd bench\n"), false);
  }

  bool RunBridge(int depth, double* mibps) {
    FioJob f;
    f.device = device_;
    f.rw = "write";
    f.bs = "4m";
    f.ioengine = "libaio";
    f.iodepth = depth;
    f.size = std::to_string(o_.size_mib) + "m";
    FioFigures got;
    if (!RunFio(f, &got)) return false;
    *mibps = got.mibps;
    return true;
  }

 private:
  std::string MakeImage(const std::string& name, std::map<std::string, std::string>* context) {
    CreateVolumeSpec spec;
    spec.name = name + "-" + std::to_string(::getpid());
    spec.size_bytes = o_.size_mib << 20;
    auto record = backend_->CreateVolume(spec);
    if (!record.ok()) return "create " + name + ": " + record.status().ToString();
    volumes_.push_back(record->id);
    AccessGrant grant;
    grant.node_id = "bench";
    grant.initiator_iqn = InitiatorIqnForNode("bench");
    grant.capability = "SINGLE_NODE_WRITER/block";
    auto granted = backend_->GrantAccess(record->id, grant);
    if (!granted.ok()) return "publish " + name + ": " + granted.status().ToString();
    *context = granted->transport_params;
    (*context)[publish_context::kTransport] = granted->transport;
    return "";
  }

  std::string Attach(const std::map<std::string, std::string>& context) {
    auto attacher = MakeBenchAttacher(tmp_.Join("state"));
    if (!attacher.ok()) return attacher.status().ToString();
    attacher_ = std::move(*attacher);
    std::string key = testing::KeyFromKeyring(env_["BLOCKCSI_CEPH_KEYRING"]);
    auto spec =
        ParseAttachSpec("bench-rbd", context,
                        {{secret_keys::kCephUserId, env_["BLOCKCSI_CEPH_USER"]}, {secret_keys::kCephUserKey, key}},
                        InitiatorIqnForNode("bench"));
    if (!spec.ok()) return spec.status().ToString();
    auto record = attacher_->Attach(*spec);
    if (!record.ok()) return "attach: " + record.status().ToString();
    device_ = record->device_path;
    return "";
  }

  const Options& o_;
  testing::TempDir tmp_;
  std::string error_;
  std::unique_ptr<testing::CephTestCluster> cluster_;  // destroyed last: stops a cluster of our own
  std::map<std::string, std::string> env_;
  std::shared_ptr<VolumeBackend> backend_;
  std::vector<std::string> volumes_;
  std::string raw_image_;
  std::unique_ptr<VolumeAttacher> attacher_;
  std::string device_;
};

int Main(int argc, char** argv) {
  Options o;
  if (auto exit_code = ParseOptions(argc, argv, &o)) return *exit_code;
  InitLogging("rbd_seq_bench", LogFormat::kText, LogLevel::kWarn);
  if (auto why = testing::CephTestCluster::SkipReason(); !why.empty()) return Skip(why);
  if (::access("/dev/fuse", R_OK | W_OK) != 0) return Skip("needs /dev/fuse");
  if (::access("/usr/bin/fio", X_OK) != 0) return Skip("needs fio (hack/install-deps.sh)");
  RbdBench bench(o);
  bool skip = false;
  if (auto why = bench.SetUp(&skip); !why.empty()) {
    if (skip) return Skip(why);
    std::fprintf(stderr, "rbd_seq_bench: %s\n", why.c_str());
    return 1;
  }
  std::vector<std::vector<double>> bridge(o.depths.size()), raw(o.depths.size());
  for (int round = -1; round < o.rounds; ++round) {
    std::fprintf(stderr, "rbd_seq_bench: round %d of %d%s\n", round + 1, o.rounds, round < 0 ? " (warm-up)" : "");
    bool raw_first = round < 0 || round % 2 == 0;
    for (size_t i = 0; i < o.depths.size(); ++i) {
      double b = 0, r = 0;
      bool ok = raw_first ? bench.RunRbdBench(o.depths[i], &r) && bench.RunBridge(o.depths[i], &b)
                          : bench.RunBridge(o.depths[i], &b) && bench.RunRbdBench(o.depths[i], &r);
      if (!ok) return 1;
      if (round < 0) continue;
      bridge[i].push_back(b);
      raw[i].push_back(r);
    }
  }
  std::printf(
      "RBD 4 MiB sequential write, %llu MiB per run, %d rounds after a discarded warm-up, sides alternating: fio "
      "(libaio, direct) on the bridge's loop device against rbd bench on the same pool\n",
      static_cast<unsigned long long>(o.size_mib), o.rounds);
  for (size_t i = 0; i < o.depths.size(); ++i) {
    std::string qd = std::to_string(o.depths[i]);
    ReportSamples("RBD 4 MiB sequential write QD" + qd + ", loop device (fio)", bridge[i], raw[i], "MiB/s",
                  "rbd bench, io-threads " + qd);
    double m = Median(bridge[i]), b = Median(raw[i]);
    std::printf("RBD\t%d\t%s\t%s\t%.2f\n", o.depths[i], Spread(bridge[i], "MiB/s").c_str(),
                Spread(raw[i], "MiB/s").c_str(), b > 0 ? m / b : 0.0);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace blockcsi::bench

int main(int argc, char** argv) { return blockcsi::bench::Main(argc, argv); }
