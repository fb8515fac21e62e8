// `blockctl pool-volumes`: what each volume of a storage host's pool really
// takes (its image's allocated bytes) beside what it may grow to
// (provisioned), as the agent answers ListVolumes. The node cannot see the
// images, so this runs on the storage host, with --endpoint the agent's
// --socket (blockcsi-target serves the same API there as to the
// controller). It is how a storage admin sees which volumes a trim would
// pay off on, and checks that one did. Read-only.
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ostream>

#include "cli/admin_rpc.h"
#include "cli/table.h"
#include "cli/verb.h"
#include "target.grpc.pb.h"

namespace blockcsi::cli {
namespace {

namespace tpb = ::blockcsi::target::v1;

// "37.5%" of what the volume may grow to; "-" for a volume of no size.
std::string Percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return text;
}

class PoolVolumesVerb final : public Verb {
 public:
  std::string Name() const override { return "pool-volumes"; }
  std::string Summary() const override {
    return "Provisioned and allocated bytes of each volume of a storage host's pool (the agent's --socket)";
  }
  void Configure(CLI::App& c) override {
    c.footer(
        "Run on the storage host with --endpoint unix://<the agent's --socket>. Allocated is what the volume's "
        "image takes in the pool (st_blocks), provisioned what it may grow to; files deleted in a volume stay "
        "allocated until the node trims it (blockctl trim on the node).");
  }

  int Run(const GlobalOptions& options, const Io& io) override {
    auto channel = AdminChannel(options, io);
    if (!channel) return kExitUsage;
    auto stub = tpb::TargetAgent::NewStub(channel);
    Table table({"volume", "name", "provisioned", "allocated", "allocated of provisioned", "provisioned bytes",
                 "allocated bytes"});
    uint64_t provisioned = 0, allocated = 0;
    tpb::ListVolumesRequest request;
    do {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      tpb::ListVolumesResponse response;
      grpc::Status status = stub->ListVolumes(&ctx, request, &response);
      if (!status.ok()) return AdminCallFailed(io, "list the pool's volumes", status, "the agent's --socket");
      for (const auto& v : response.volumes()) {
        table.AddRow({v.id(), v.name(), HumanBytes(v.size_bytes()), HumanBytes(v.allocated_bytes()),
                      Percent(v.allocated_bytes(), v.size_bytes()), std::to_string(v.size_bytes()),
                      std::to_string(v.allocated_bytes())});
        provisioned += v.size_bytes();
        allocated += v.allocated_bytes();
      }
      request.set_start_token(response.next_token());
    } while (!request.start_token().empty());
    table.Print(io.out, options.format());
    if (options.format() == OutputFormat::kTable) {
      io.out << "total: " << HumanBytes(provisioned) << " provisioned, " << HumanBytes(allocated) << " allocated ("
             << Percent(allocated, provisioned) << ")\n";
    }
    return kExitOk;
  }
};

BLOCKCTL_REGISTER_VERB(PoolVolumesVerb);

}  // namespace
}  // namespace blockcsi::cli
