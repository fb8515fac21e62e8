// `blockctl trim VOLUME...|--all`: gives the space the volumes' filesystems
// have freed back to the storage, now (FITRIM on each staging mount, one
// volume at a time, through node/volume_trim.h: the same mechanism as the
// plugin's --fstrim-interval). Prints per volume the bytes trimmed as the
// kernel reports them. A raw block volume is refused when named and skipped
// under --all: the node cannot know which blocks hold the pod's data. Works
// with the plugin down; with it up, an unstage that arrives during a trim
// fails with EBUSY (the trim holds the mount open) and kubelet retries it.
#include <CLI/CLI.hpp>
#include <ostream>

#include "attach/attach_record_store.h"
#include "cli/table.h"
#include "cli/verb.h"
#include "common/mountinfo.h"
#include "node/staged_facts.h"
#include "node/volume_trim.h"

namespace blockcsi::cli {
namespace {

class TrimVerb final : public Verb {
 public:
  std::string Name() const override { return "trim"; }
  std::string Summary() const override {
    return "Give the space freed in staged filesystem volumes back to the storage now (FITRIM)";
  }
  void Configure(CLI::App& c) override {
    auto* volumes = c.add_option("volume", volumes_, "Volume ids to trim");
    auto* all = c.add_flag("--all", all_, "Every staged filesystem volume of this node (raw block ones are skipped)");
    volumes->excludes(all);
  }

  int Run(const GlobalOptions& options, const Io& io) override {
    if (volumes_.empty() && !all_) {
      io.Error("trim: name the volumes to trim, or --all");
      return kExitUsage;
    }
    AttachRecordStore store(options.state_dir, options.host);
    auto records = store.List();
    auto mountinfo = options.host->ReadFile("/proc/self/mountinfo");
    if (!records.ok() || !mountinfo.ok()) {
      io.Error("trim: " + (records.ok() ? mountinfo.status() : records.status()).ToString());
      return kExitProblems;
    }
    std::vector<MountEntry> table = ParseMountInfo(*mountinfo);
    Table out({"volume", "staging path", "result", "trimmed", "trimmed bytes"});
    bool failed = false;
    auto row = [&](const std::string& volume, const std::string& path, const std::string& result, uint64_t bytes) {
      bool done = result == "trimmed";
      out.AddRow({volume, path, result, done ? HumanBytes(bytes) : "", done ? std::to_string(bytes) : ""});
    };
    for (const std::string& volume : Selected(*records, io, row, failed)) {
      const AttachRecord* record = nullptr;
      for (const auto& r : *records) record = r.volume_id == volume ? &r : record;
      std::string path = StagedFacts::Of(*record).staging_path;
      if (std::string why = WhyNotTrimmable(*record); !why.empty()) {
        // Named: the admin asked for this one, and it cannot be done.
        row(volume, path, (all_ ? "skipped: " : "refused: ") + why, 0);
        if (!all_) io.Error("volume " + volume + " not trimmed: " + why);
        failed = failed || !all_;
        continue;
      }
      auto trimmed = TrimVolume(*options.host, *record, table);
      if (!trimmed.ok()) {
        row(volume, path, "failed: " + trimmed.status().message(), 0);
        io.Error(trimmed.status().ToString());
        failed = true;
        continue;
      }
      row(volume, path, "trimmed", *trimmed);
    }
    out.Print(io.out, options.format());
    return failed ? kExitProblems : kExitOk;
  }

 private:
  // The volumes to trim, in order: every record's under --all, else those
  // named that have one (a row saying so for the others).
  template <typename Row>
  std::vector<std::string> Selected(const std::vector<AttachRecord>& records, const Io& io, Row& row, bool& failed) {
    std::vector<std::string> out;
    if (all_) {
      for (const auto& r : records) out.push_back(r.volume_id);
      return out;
    }
    for (const auto& volume : volumes_) {
      bool known = false;
      for (const auto& r : records) known = known || r.volume_id == volume;
      if (known) {
        out.push_back(volume);
        continue;
      }
      row(volume, "", "failed: not attached to this node (no attach record)", 0);
      io.Error("volume " + volume + " is not attached to this node (no attach record in the state dir)");
      failed = true;
    }
    return out;
  }

  std::vector<std::string> volumes_;
  bool all_ = false;
};

BLOCKCTL_REGISTER_VERB(TrimVerb);

}  // namespace
}  // namespace blockcsi::cli
