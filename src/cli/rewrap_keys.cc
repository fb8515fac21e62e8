// `blockctl rewrap-keys --old-key-file F --new-key-file F [--dry-run]`: the
// controller's key service (proto/volume_keys.proto): every data key of the
// class whose key-encryption key was in F (old) is wrapped again under the
// new one, without touching any data. Run it where the controller's socket
// is (its container), with --endpoint that socket. The keys come from files
// (a mounted Secret, or a file the operator made), never from argv, where
// any user of the machine could read them.
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ostream>

#include "cli/admin_rpc.h"
#include "cli/table.h"
#include "cli/verb.h"
#include "common/atomic_file.h"
#include "volume_keys.grpc.pb.h"

namespace blockcsi::cli {
namespace {

namespace kpb = ::blockcsi::keys::v1;

std::string OutcomeName(kpb::RewrappedKey::Outcome outcome, bool dry_run) {
  switch (outcome) {
    case kpb::RewrappedKey::REWRAPPED:
      return dry_run ? "would-rewrap" : "rewrapped";
    case kpb::RewrappedKey::ALREADY_NEW:
      return "already-new";
    case kpb::RewrappedKey::NOT_OPENED:
      return "not-opened";
    default:
      return "failed";
  }
}

class RewrapKeysVerb final : public Verb {
 public:
  std::string Name() const override { return "rewrap-keys"; }
  std::string Summary() const override {
    return "Rotate an encrypted class's key (controller socket): rewrap its data keys under a new encryptionKey";
  }
  void Configure(CLI::App& c) override {
    c.add_option("--old-key-file", old_file_, "File holding the class's current encryptionKey (base64 of 32 bytes)")
        ->required();
    c.add_option("--new-key-file", new_file_, "File holding the new encryptionKey (base64 of 32 bytes)")->required();
    c.add_flag("--dry-run", dry_run_, "Say what would be rewrapped; change nothing");
  }

  int Run(const GlobalOptions& options, const Io& io) override {
    auto channel = AdminChannel(options, io);
    if (!channel) return kExitUsage;
    kpb::RewrapDataKeysRequest request;
    for (auto [file, field] : {std::pair{&old_file_, request.mutable_old_encryption_key()},
                               std::pair{&new_file_, request.mutable_new_encryption_key()}}) {
      auto text = ReadFileToString(*file);
      if (!text.ok()) {
        io.Error(text.status().message());
        return kExitUsage;
      }
      *field = *text;
    }
    request.set_dry_run(dry_run_);
    auto stub = kpb::VolumeKeys::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(30));
    kpb::RewrapDataKeysResponse response;
    grpc::Status status = stub->RewrapDataKeys(&ctx, request, &response);
    if (!status.ok()) return AdminCallFailed(io, "rewrap data keys", status, "the controller's socket");
    return Report(response, options, io);
  }

 private:
  // Exit 0 only when every encrypted volume and snapshot opened under one of
  // the keys and none is left under the old one.
  int Report(const kpb::RewrapDataKeysResponse& response, const GlobalOptions& options, const Io& io) const {
    Table table({"id", "kind", "outcome", "message"});
    int left = 0;
    for (const auto& k : response.keys()) {
      table.AddRow({k.id(), k.snapshot() ? "snapshot" : "volume", OutcomeName(k.outcome(), dry_run_),
                    k.message().empty() ? "-" : k.message()});
      if (k.outcome() == kpb::RewrappedKey::FAILED || k.outcome() == kpb::RewrappedKey::NOT_OPENED) ++left;
    }
    table.Print(io.out, options.format());
    if (left > 0) {
      io.Error(std::to_string(left) +
               " encrypted volume(s) or snapshot(s) not under the new key (see the table); keep the old key until "
               "they are, or until you know they are another class's");
      return kExitProblems;
    }
    return kExitOk;
  }

  std::string old_file_;
  std::string new_file_;
  bool dry_run_ = false;
};

BLOCKCTL_REGISTER_VERB(RewrapKeysVerb);

}  // namespace
}  // namespace blockcsi::cli
