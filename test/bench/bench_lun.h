// The data-path benchmarks' common setup: a throw-away tgtd exporting one
// fully written LUN, attached through the userspace connector (bridge →
// FUSE file → loop device), with a second initiator name bound for the raw
// libiscsi side, so that tgtd never takes the raw session for the bridge's
// (same name and ISID = session reinstatement). Detaches and removes what
// it made when destroyed. Not thread-safe.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "attach/attach_spec.h"
#include "attach/attacher_factory.h"
#include "bench/bench_attacher.h"
#include "bridge/bridge_protocol.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "support/plugin_under_test.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi::bench {

class AttachedBenchLun {
 public:
  static constexpr char kVolume[] = "bench-data";
  static constexpr char kIqn[] = "iqn.2026-11.io.blockcsi.bench:data";

  // nullptr with *error set when any step failed (what it made is removed).
  // The LUN's backing file goes to `image_dir` when given (e.g. a tmpfs, so
  // that a shared machine's disk does not set the pace of both sides),
  // else to this object's temporary directory; it is removed either way.
  static std::unique_ptr<AttachedBenchLun> Start(uint64_t size_mib, std::string* error,
                                                 const std::string& image_dir = "") {
    std::unique_ptr<AttachedBenchLun> lun(new AttachedBenchLun());
    lun->tgtd_ = testing::TgtdHarness::Start(error);
    if (!lun->tgtd_) return nullptr;
    lun->size_bytes_ = size_mib << 20;
    lun->backing_ = (image_dir.empty() ? lun->tmp_.path() : image_dir) + "/blockcsi-bench-lun-" +
                    std::to_string(::getpid()) + ".img";
    if (!lun->WriteImage(error) || !lun->Export(error) || !lun->Attach(error)) return nullptr;
    return lun;
  }
  ~AttachedBenchLun() {
    if (attacher_ && !device_.empty()) {
      if (auto st = attacher_->Detach(kVolume); !st.ok()) {
        std::fprintf(stderr, "bench: detach: %s\n", st.ToString().c_str());
      }
    }
    testing::CleanUpUnder(tmp_.path());  // what a failure may have left: loop device, FUSE mount, bridge
    if (!backing_.empty()) ::unlink(backing_.c_str());
  }
  AttachedBenchLun(const AttachedBenchLun&) = delete;
  AttachedBenchLun& operator=(const AttachedBenchLun&) = delete;

  std::string portal() const { return tgtd_->portal(); }
  // How the bridge is reached over FUSE ("io_uring", "dev_fuse"), as its
  // status reply says; "" when it does not answer.
  std::string FusePath() const {
    auto reply = CallBridge(BridgePathsFor(tmp_.Join("state"), kVolume).control_socket, {{"op", "status"}},
                            std::chrono::seconds(5));
    return reply.ok() ? reply->value("fuse_path", "") : "";
  }
  // The bridge's own count and summed time (dispatch to the storage's
  // completion, seconds) of one operation ("read", "write"), for the split
  // of a request's time between the storage and what is around it.
  std::pair<uint64_t, double> BridgeIo(const std::string& op) const {
    auto reply = CallBridge(BridgePathsFor(tmp_.Join("state"), kVolume).control_socket, {{"op", "status"}},
                            std::chrono::seconds(5));
    if (!reply.ok() || !reply->contains("io") || !(*reply)["io"].contains(op)) return {0, 0};
    const auto& o = (*reply)["io"][op];
    return {o.value("ops", uint64_t{0}), o.value("latency_seconds_sum", 0.0)};
  }
  const std::string& device() const { return device_; }  // the loop device of the attach
  uint64_t size_bytes() const { return size_bytes_; }
  // The initiator name the raw libiscsi side logs in with.
  static std::string RawInitiator() { return InitiatorIqnForNode("bench-raw"); }

 private:
  AttachedBenchLun() = default;

  // Every byte written, so that reads hit data and not holes.
  bool WriteImage(std::string* error) {
    int fd = ::open(backing_.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) return Fail(error, "cannot create " + backing_);
    std::vector<char> chunk(1 << 20);
    for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>(i * 131 + 17);
    bool ok = true;
    for (uint64_t off = 0; off < size_bytes_ && ok; off += chunk.size()) {
      ok = ::pwrite(fd, chunk.data(), chunk.size(), static_cast<off_t>(off)) == static_cast<ssize_t>(chunk.size());
    }
    ok = ok && ::fsync(fd) == 0;
    ::close(fd);
    return ok || Fail(error, "cannot write " + backing_);
  }

  bool Export(std::string* error) {
    int code = 0, failed = 0;
    auto tgtadm = [&](const std::vector<std::string>& args) {
      tgtd_->Tgtadm(args, &code);
      failed += code != 0;
    };
    tgtadm({"--op", "new", "--mode", "target", "--tid", "1", "-T", kIqn});
    tgtadm({"--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1", "-b", backing_});
    tgtadm({"--op", "update", "--mode", "logicalunit", "--tid", "1", "--lun", "1", "--params",
            "scsi_sn=benchdata,scsi_id=60000000000000000000000000bec4ab"});
    tgtadm({"--op", "bind", "--mode", "target", "--tid", "1", "--initiator-name", InitiatorIqnForNode("bench")});
    tgtadm({"--op", "bind", "--mode", "target", "--tid", "1", "--initiator-name", RawInitiator()});
    return failed == 0 || Fail(error, "tgtadm setup failed");
  }

  bool Attach(std::string* error) {
    auto attacher = MakeBenchAttacher(tmp_.Join("state"));
    if (!attacher.ok()) return Fail(error, attacher.status().ToString());
    attacher_ = std::move(*attacher);
    auto spec = ParseAttachSpec(kVolume,
                                {{publish_context::kPortals, tgtd_->portal()},
                                 {publish_context::kTargetIqn, kIqn},
                                 {publish_context::kLun, "1"},
                                 {publish_context::kSerial, "benchdata"}},
                                {}, InitiatorIqnForNode("bench"));
    if (!spec.ok()) return Fail(error, spec.status().ToString());
    auto record = attacher_->Attach(*spec);
    if (!record.ok()) return Fail(error, "attach: " + record.status().ToString());
    device_ = record->device_path;
    return true;
  }

  static bool Fail(std::string* error, const std::string& why) {
    *error = why;
    return false;
  }

  std::unique_ptr<testing::TgtdHarness> tgtd_;
  testing::TempDir tmp_;
  std::string backing_;
  uint64_t size_bytes_ = 0;
  std::unique_ptr<VolumeAttacher> attacher_;
  std::string device_;
};

}  // namespace blockcsi::bench
