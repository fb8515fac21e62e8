#include "common/filesystem.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "common/atomic_file.h"

namespace blockcsi {
namespace {

class RootedFilesystem final : public Filesystem {
 public:
  explicit RootedFilesystem(std::string root) : root_(std::move(root)) {
    while (!root_.empty() && root_.back() == '/') root_.pop_back();
  }

  StatusOr<std::string> ReadFile(const std::string& path) const override { return ReadFileToString(Resolve(path)); }

  Status WriteFile(const std::string& path, const std::string& contents) const override {
    // sysfs attributes want one write(2) of the whole value, no temp files.
    std::string real = Resolve(path);
    int fd = ::open(real.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, "open " + real + " for writing");
    ssize_t n = ::write(fd, contents.data(), contents.size());
    int err = errno;
    ::close(fd);
    if (n < 0) return ErrnoToStatus(err, "write " + real);
    return OkStatus();
  }

  Status ReplaceFile(const std::string& path, const std::string& contents) const override {
    AtomicWriteOptions options;
    options.mode = 0600;
    return WriteFileAtomically(Resolve(path), contents, options);
  }

  StatusOr<std::vector<std::string>> ListDir(const std::string& path) const override {
    std::error_code ec;
    std::vector<std::string> names;
    std::string real = Resolve(path);
    for (const auto& entry : std::filesystem::directory_iterator(real, ec)) {
      names.push_back(entry.path().filename().string());
    }
    if (ec) return ErrnoToStatus(ec.value(), "list " + real);
    std::sort(names.begin(), names.end());
    return names;
  }

  StatusOr<std::string> ReadLink(const std::string& path) const override {
    std::string real = Resolve(path);
    char buf[4096];
    ssize_t n = ::readlink(real.c_str(), buf, sizeof buf - 1);
    if (n < 0) return ErrnoToStatus(errno, "readlink " + real);
    return std::string(buf, static_cast<size_t>(n));
  }

  bool Exists(const std::string& path) const override { return ::access(Resolve(path).c_str(), F_OK) == 0; }

  std::string Resolve(const std::string& path) const override { return root_ + path; }

 private:
  std::string root_;
};

}  // namespace

std::unique_ptr<Filesystem> MakeRootedFilesystem(std::string root) {
  return std::make_unique<RootedFilesystem>(std::move(root));
}

StatusOr<std::string> ReadTrimmed(const Filesystem& fs, const std::string& path) {
  BLOCKCSI_ASSIGN_OR_RETURN(std::string text, fs.ReadFile(path));
  auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return std::string();
  auto end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

}  // namespace blockcsi
