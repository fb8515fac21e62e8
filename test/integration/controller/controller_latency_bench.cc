// Latency of CreateVolume and ControllerPublishVolume through the controller
// (CSI over gRPC on a unix socket) against the same calls made on the
// backend alone, on the real local backend and a real tgtd. Prints medians
// over N calls and the ratios; asserts nothing (a figure, not a test).
// Calls alternate between the two paths so that both see the same pool and
// tgtd state as it grows. Usage: controller_latency_bench [N] (root, tgt).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "contract/initiator.h"
#include "controller/controller_service.h"
#include "csi.grpc.pb.h"
#include "support/test_util.h"
#include "support/tgtd_harness.h"

namespace blockcsi {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Stats {
  double median = 0, p90 = 0;
};

Stats Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return {};
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 9 / 10)]};
}

struct Server {
  std::unique_ptr<ControllerService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<csi::v1::Controller::Stub> stub;
};

Server Serve(std::shared_ptr<VolumeBackend> backend, ControllerOptions options, const std::string& socket) {
  Server s;
  s.service = std::make_unique<ControllerService>(std::move(backend), std::move(options));
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(s.service.get());
  s.server = builder.BuildAndStart();
  s.stub = csi::v1::Controller::NewStub(grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  return s;
}

int Run(int n) {
  std::string error;
  auto tgtd = testing::TgtdHarness::Start(&error);
  if (!tgtd) {
    std::fprintf(stderr, "controller_latency_bench: %s\n", error.c_str());
    return 2;
  }
  testing::TempDir dir;
  BackendOptions options;
  options.kind = "local";
  options.pool_dir = dir.Join("pool");
  options.tgt_control_port = tgtd->control_port();
  options.portals = {tgtd->portal()};
  options.reconcile_interval = std::chrono::hours(1);  // no pass during the measurement
  auto made = MakeBackend(options, MachineHost());
  if (!made.ok()) {
    std::fprintf(stderr, "controller_latency_bench: %s\n", made.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<VolumeBackend> backend = *made;
  Server plain = Serve(backend, {}, dir.Join("plain.sock"));
  ControllerOptions limited_options;
  limited_options.max_volumes_per_node = 100000;  // enforced: counts the node's grants on every new publish
  Server limited = Serve(backend, limited_options, dir.Join("limited.sock"));

  std::vector<double> be_create, csi_create, be_grant, csi_publish, csi_publish_limited;
  std::vector<std::string> be_ids, csi_ids;
  csi::v1::VolumeCapability cap;
  cap.mutable_mount()->set_fs_type("ext4");
  cap.mutable_access_mode()->set_mode(csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  int failures = 0;

  for (int i = 0; i < n; ++i) {
    CreateVolumeSpec spec{"bench-backend-" + std::to_string(i), 8 << 20, {}, {}};
    auto t0 = Clock::now();
    auto rec = backend->CreateVolume(spec);
    be_create.push_back(Ms(Clock::now() - t0));
    if (rec.ok())
      be_ids.push_back(rec->id);
    else
      ++failures;

    csi::v1::CreateVolumeRequest r;
    r.set_name("bench-csi-" + std::to_string(i));
    r.mutable_capacity_range()->set_required_bytes(8 << 20);
    *r.add_volume_capabilities() = cap;
    csi::v1::CreateVolumeResponse resp;
    grpc::ClientContext ctx;
    t0 = Clock::now();
    grpc::Status st = plain.stub->CreateVolume(&ctx, r, &resp);
    csi_create.push_back(Ms(Clock::now() - t0));
    if (st.ok())
      csi_ids.push_back(resp.volume().volume_id());
    else
      ++failures;
  }
  for (size_t i = 0; i < std::min(be_ids.size(), csi_ids.size()); ++i) {
    AccessGrant grant{InitiatorIqnForNode("bench-n1"), "bench-n1", false, "mount/SINGLE_NODE_WRITER", {}};
    auto t0 = Clock::now();
    if (!backend->GrantAccess(be_ids[i], grant).ok()) ++failures;
    be_grant.push_back(Ms(Clock::now() - t0));

    csi::v1::ControllerPublishVolumeRequest r;
    r.set_volume_id(csi_ids[i]);
    r.set_node_id("bench-n1");
    *r.mutable_volume_capability() = cap;
    csi::v1::ControllerPublishVolumeResponse resp;
    grpc::ClientContext ctx;
    t0 = Clock::now();
    if (!plain.stub->ControllerPublishVolume(&ctx, r, &resp).ok()) ++failures;
    csi_publish.push_back(Ms(Clock::now() - t0));
  }
  // The same publishes again, to a second node, with the node limit on.
  // (A single-node mode would refuse a second node: use a multi-node one.)
  for (const auto& id : csi_ids) {
    for (const char* node : {"bench-n1"}) {
      csi::v1::ControllerUnpublishVolumeRequest u;
      u.set_volume_id(id);
      u.set_node_id(node);
      csi::v1::ControllerUnpublishVolumeResponse ur;
      grpc::ClientContext uc;
      if (!plain.stub->ControllerUnpublishVolume(&uc, u, &ur).ok()) ++failures;
    }
    csi::v1::ControllerPublishVolumeRequest r;
    r.set_volume_id(id);
    r.set_node_id("bench-n2");
    *r.mutable_volume_capability() = cap;
    csi::v1::ControllerPublishVolumeResponse resp;
    grpc::ClientContext ctx;
    auto t0 = Clock::now();
    if (!limited.stub->ControllerPublishVolume(&ctx, r, &resp).ok()) ++failures;
    csi_publish_limited.push_back(Ms(Clock::now() - t0));
  }

  Stats bc = Summarize(be_create), cc = Summarize(csi_create), bg = Summarize(be_grant), cp = Summarize(csi_publish),
        cl = Summarize(csi_publish_limited);
  std::printf("controller latency over %d calls each (ms; real local backend, tgtd %s)\n", n, tgtd->portal().c_str());
  std::printf("  %-44s median %7.3f  p90 %7.3f\n", "backend CreateVolume alone", bc.median, bc.p90);
  std::printf("  %-44s median %7.3f  p90 %7.3f  ratio %.2f\n", "CSI CreateVolume (gRPC + controller)", cc.median,
              cc.p90, cc.median / bc.median);
  std::printf("  %-44s median %7.3f  p90 %7.3f\n", "backend GrantAccess alone", bg.median, bg.p90);
  std::printf("  %-44s median %7.3f  p90 %7.3f  ratio %.2f\n", "CSI ControllerPublish (no node limit)", cp.median,
              cp.p90, cp.median / bg.median);
  std::printf("  %-44s median %7.3f  p90 %7.3f  ratio %.2f\n", "CSI ControllerPublish (node limit counted)", cl.median,
              cl.p90, cl.median / bg.median);
  std::printf("  failures: %d\n", failures);

  // Clean up the pool's exports on tgtd before the harness stops it.
  for (const auto& id : csi_ids) {
    (void)backend->RevokeAccess(id, InitiatorIqnForNode("bench-n2"));
    (void)backend->DeleteVolume(id);
  }
  for (const auto& id : be_ids) {
    (void)backend->RevokeAccess(id, InitiatorIqnForNode("bench-n1"));
    (void)backend->DeleteVolume(id);
  }
  plain.server->Shutdown();
  limited.server->Shutdown();
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace blockcsi

int main(int argc, char** argv) { return blockcsi::Run(argc > 1 ? std::atoi(argv[1]) : 100); }
