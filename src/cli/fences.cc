// `blockctl fences`, `blockctl fence NODE`, `blockctl unfence NODE [--force]`:
// the controller's fencing service (proto/fencing.proto). Run them where the
// controller's socket is (its container), with --endpoint that socket.
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <ostream>

#include "cli/admin_rpc.h"
#include "cli/table.h"
#include "cli/verb.h"
#include "fencing.grpc.pb.h"

namespace blockcsi::cli {
namespace {

namespace fpb = ::blockcsi::fencing::v1;

std::unique_ptr<fpb::Fencing::Stub> Connect(const GlobalOptions& options, const Io& io) {
  auto channel = AdminChannel(options, io);
  return channel ? fpb::Fencing::NewStub(channel) : nullptr;
}

std::string Held(const fpb::NodeFence& fence) {
  std::string out;
  for (const auto& h : fence.held()) {
    out += (out.empty() ? "" : ",") + h.volume_id() + (h.read_only() ? " (ro)" : "");
  }
  return out.empty() ? "-" : out;
}

std::string Pending(const fpb::NodeFence& fence) {
  std::string out;
  for (const auto& p : fence.pending()) out += (out.empty() ? "" : "; ") + p.host() + ": " + p.reason();
  return out;
}

int Failed(const Io& io, const std::string& what, const grpc::Status& status) {
  return AdminCallFailed(io, what, status, "the controller's socket");
}

void PrintFences(const std::vector<const fpb::NodeFence*>& fences, const GlobalOptions& options, const Io& io) {
  Table table({"node", "since", "state", "cleaned up", "held", "pending"});
  for (const auto* f : fences) {
    table.AddRow({f->node_id(), f->fence_id(), f->pending().empty() ? "fenced" : "incomplete",
                  f->cleaned_up() ? "yes" : "no", Held(*f), Pending(*f)});
  }
  table.Print(io.out, options.format());
}

class FencesVerb final : public Verb {
 public:
  std::string Name() const override { return "fences"; }
  std::string Summary() const override {
    return "List fenced nodes (controller socket): since when, what each held, hosts not fenced yet";
  }
  void Configure(CLI::App& /*command*/) override {}

  int Run(const GlobalOptions& options, const Io& io) override {
    auto stub = Connect(options, io);
    if (!stub) return kExitUsage;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    fpb::ListFencesResponse response;
    grpc::Status status = stub->ListFences(&ctx, fpb::ListFencesRequest(), &response);
    if (!status.ok()) return Failed(io, "list fences", status);
    std::vector<const fpb::NodeFence*> fences;
    for (const auto& f : response.fences()) fences.push_back(&f);
    PrintFences(fences, options, io);
    return kExitOk;
  }
};

class FenceVerb final : public Verb {
 public:
  std::string Name() const override { return "fence"; }
  std::string Summary() const override {
    return "Fence NODE (controller socket): revoke its access on every storage host and refuse it new ones";
  }
  void Configure(CLI::App& c) override {
    c.add_option("node", node_, "The node id (Kubernetes node name)")->required();
  }

  int Run(const GlobalOptions& options, const Io& io) override {
    auto stub = Connect(options, io);
    if (!stub) return kExitUsage;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
    fpb::FenceNodeRequest request;
    request.set_node_id(node_);
    fpb::NodeFence response;
    grpc::Status status = stub->FenceNode(&ctx, request, &response);
    if (!status.ok()) return Failed(io, "fence node " + node_, status);
    PrintFences({&response}, options, io);
    if (!response.pending().empty()) {
      io.Error("node " + node_ + " is not fenced on every storage host yet (" + Pending(response) +
               "); run it again once they are reachable");
      return kExitProblems;
    }
    return kExitOk;
  }

 private:
  std::string node_;
};

class UnfenceVerb final : public Verb {
 public:
  std::string Name() const override { return "unfence"; }
  std::string Summary() const override {
    return "Unfence NODE (controller socket) once its plugin reported its cleanup; --force: without it";
  }
  void Configure(CLI::App& c) override {
    c.add_option("node", node_, "The node id (Kubernetes node name)")->required();
    c.add_flag("--force", force_,
               "Unfence even though the node's plugin has not reported that it cleaned up (see the warning)");
  }

  int Run(const GlobalOptions& options, const Io& io) override {
    auto stub = Connect(options, io);
    if (!stub) return kExitUsage;
    if (force_) {
      io.err << "blockctl: WARNING: unfencing " << node_
             << " without its plugin's cleanup report. If the node is still running with the volumes it held\n"
                "  mounted (a partition, a hung kubelet), it may log in again and write through stale page cache\n"
                "  or a filesystem journal while another node has the volume: that corrupts the filesystem.\n"
                "  Use --force only for a node that is powered off or reinstalled, or that you have cleaned by "
                "hand.\n";
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    fpb::UnfenceNodeRequest request;
    request.set_node_id(node_);
    request.set_force(force_);
    fpb::UnfenceNodeResponse response;
    grpc::Status status = stub->UnfenceNode(&ctx, request, &response);
    if (!status.ok()) return Failed(io, "unfence node " + node_, status);
    io.out << "node " << node_ << " unfenced\n";
    return kExitOk;
  }

 private:
  std::string node_;
  bool force_ = false;
};

BLOCKCTL_REGISTER_VERB(FencesVerb);
BLOCKCTL_REGISTER_VERB(FenceVerb);
BLOCKCTL_REGISTER_VERB(UnfenceVerb);

}  // namespace
}  // namespace blockcsi::cli
