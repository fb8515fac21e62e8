#include "common/fs_minimums.h"

#include <cctype>
#include <chrono>

#include "common/logging.h"
#include "common/random.h"

namespace blockcsi {
namespace {

// The number right after `marker` in `text`, 0 when absent.
uint64_t NumberAfter(std::string_view text, std::string_view marker) {
  size_t at = text.find(marker);
  if (at == std::string_view::npos) return 0;
  uint64_t value = 0;
  bool any = false;
  for (size_t i = at + marker.size(); i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    value = value * 10 + static_cast<uint64_t>(text[i] - '0');
    any = true;
  }
  return any ? value : 0;
}

// A directory only this probe uses, removed with what mkfs left in it. Its
// name is random (64 bits): nobody can make it in advance in a shared parent
// such as /tmp, so one that is already there is never used.
class ScratchDir {
 public:
  ScratchDir(const Host& host, const std::string& parent) : host_(host) {
    std::string path = parent + "/blockcsi-fsmin-" + std::to_string(RandomU64());
    if (host_.Kind(path) == PathKind::kMissing && host_.MakeDirectory(path, 0700).ok()) path_ = path;
  }
  ~ScratchDir() {
    if (path_.empty()) return;
    if (Status st = host_.RemoveTree(path_); !st.ok()) {
      LogWarn("cannot remove the mkfs probe's scratch directory", {{"error", st.ToString()}});
    }
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  const Host& host_;
  std::string path_;
};

}  // namespace

uint64_t ParseXfsMinimum(std::string_view text) {
  uint64_t mib = NumberAfter(text, "must be larger than ");
  if (mib == 0 || text.find("MB", text.find("must be larger than ")) == std::string_view::npos) return 0;
  return mib << 20;
}

uint64_t ParseBtrfsMinimum(std::string_view text) {
  return NumberAfter(text, "minimum size for each btrfs device is ");
}

FilesystemMinimums::FilesystemMinimums(std::shared_ptr<Executor> executor, std::shared_ptr<const Host> host,
                                       std::string scratch_parent)
    : executor_(std::move(executor)), scratch_parent_(std::move(scratch_parent)), host_(std::move(host)) {}

uint64_t FilesystemMinimums::MinimumBytes(const std::string& fs_type) {
  if (fs_type != "xfs" && fs_type != "btrfs") return 0;
  MutexLock lock(mu_);
  auto it = known_.find(fs_type);
  if (it != known_.end()) return it->second;
  uint64_t bytes = Probe(fs_type);
  const uint64_t fallback = fs_type == "xfs" ? kXfsMinimumBytesFallback : kBtrfsMinimumBytesFallback;
  LogInfo("filesystem minimum size",
          {{"fs_type", fs_type},
           {"bytes", std::to_string(bytes != 0 ? bytes : fallback)},
           {"source", bytes != 0 ? "mkfs on this host" : "Debian 12 figure (mkfs did not tell)"}});
  if (bytes == 0) bytes = fallback;
  known_[fs_type] = bytes;
  return bytes;
}

uint64_t FilesystemMinimums::Probe(const std::string& fs_type) {
  ScratchDir scratch(*host_, scratch_parent_);
  if (scratch.path().empty()) return 0;
  const std::string image = scratch.path() + "/probe.img";
  const std::string image_for_mkfs = host_->Resolve(image);
  Command cmd("mkfs." + fs_type);
  if (fs_type == "xfs") {
    // -N: print what would be made, write nothing; a 16 MiB data section
    // is below any xfs minimum, so mkfs answers with the minimum.
    cmd.Arg("-N").Arg("-d").Arg("file=1,name=" + image_for_mkfs + ",size=16m");
  } else {
    // mkfs.btrfs checks the size before writing anything; 1 MiB is below
    // any btrfs minimum.
    if (!host_->OverwriteFile(image, std::string(size_t{1} << 20, '\0')).ok()) return 0;
    cmd.Arg(image_for_mkfs);
  }
  cmd.Timeout(std::chrono::seconds(20));
  auto r = executor_->Run(cmd);
  if (!r.ok()) return 0;  // the program is missing here: the fallback serves
  const std::string text = r->stderr_text + "\n" + r->stdout_text;
  return fs_type == "xfs" ? ParseXfsMinimum(text) : ParseBtrfsMinimum(text);
}

}  // namespace blockcsi
