#include "common/fs_minimums.h"

#include <stdlib.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/logging.h"

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

// A directory only this probe uses, removed with what mkfs left in it.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& parent) {
    std::string pattern = parent + "/blockcsi-fsmin-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
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

FilesystemMinimums::FilesystemMinimums(std::shared_ptr<Executor> executor, std::string scratch_parent)
    : executor_(std::move(executor)), scratch_parent_(std::move(scratch_parent)) {}

uint64_t FilesystemMinimums::MinimumBytes(const std::string& fs_type) {
  if (fs_type != "xfs" && fs_type != "btrfs") return 0;
  std::lock_guard<std::mutex> lock(mu_);
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
  ScratchDir scratch(scratch_parent_);
  if (scratch.path().empty()) return 0;
  const std::string image = scratch.path() + "/probe.img";
  Command cmd("mkfs." + fs_type);
  if (fs_type == "xfs") {
    // -N: print what would be made, write nothing; a 16 MiB data section
    // is below any xfs minimum, so mkfs answers with the minimum.
    cmd.Arg("-N").Arg("-d").Arg("file=1,name=" + image + ",size=16m");
  } else {
    // mkfs.btrfs checks the size before writing anything.
    std::error_code ec;
    { std::ofstream touch(image); }
    std::filesystem::resize_file(image, uint64_t{1} << 20, ec);
    if (ec) return 0;
    cmd.Arg(image);
  }
  cmd.Timeout(std::chrono::seconds(20));
  auto r = executor_->Run(cmd);
  if (!r.ok()) return 0;  // the program is missing here: the fallback serves
  const std::string text = r->stderr_text + "\n" + r->stdout_text;
  return fs_type == "xfs" ? ParseXfsMinimum(text) : ParseBtrfsMinimum(text);
}

}  // namespace blockcsi
