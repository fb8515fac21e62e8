// The pool's test ImageFiles (backend/local/image_files.h): real files in a
// test's temp dir, plus what a test must control or see — the file
// system's size (instead of filling a real one), a step that fails, and the
// order of every step that changes the pool, paths relative to the pool
// ("write-record volumes/vol-1.json", "sync-dir images").
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/local/image_files.h"

namespace blockcsi::testing {

class RecordingImageFiles final : public HostImageFiles {
 public:
  explicit RecordingImageFiles(std::string pool_dir) : pool_dir_(std::move(pool_dir)) {}

  // The size Space() reports instead of the real file system's.
  void SetSpace(uint64_t total_bytes, uint64_t available_bytes) {
    std::lock_guard lock(mu_);
    space_ = PoolSpace{total_bytes, available_bytes};
  }
  // The next step whose record starts with `prefix` ("create", "sync-dir
  // images") fails with INTERNAL, doing nothing.
  void FailNext(std::string prefix) {
    std::lock_guard lock(mu_);
    fail_ = std::move(prefix);
  }
  // The steps so far, then forgotten.
  std::vector<std::string> TakeSteps() {
    std::lock_guard lock(mu_);
    return std::exchange(steps_, {});
  }

  StatusOr<PoolSpace> Space(const std::string& dir) override {
    {
      std::lock_guard lock(mu_);
      if (space_) return *space_;
    }
    return HostImageFiles::Space(dir);
  }
  Status SyncDirectory(const std::string& dir) override {
    BLOCKCSI_RETURN_IF_ERROR(Step("sync-dir", dir));
    return HostImageFiles::SyncDirectory(dir);
  }
  Status Create(const std::string& path, uint64_t size_bytes) override {
    BLOCKCSI_RETURN_IF_ERROR(Step("create", path));
    return HostImageFiles::Create(path, size_bytes);
  }
  Status Clone(const std::string& from, const std::string& to, uint64_t size_bytes, CopyMethod* method) override {
    BLOCKCSI_RETURN_IF_ERROR(Step("clone", to));
    return HostImageFiles::Clone(from, to, size_bytes, method);
  }
  Status Resize(const std::string& path, uint64_t size_bytes) override {
    BLOCKCSI_RETURN_IF_ERROR(Step("resize", path));
    return HostImageFiles::Resize(path, size_bytes);
  }
  Status Rename(const std::string& from, const std::string& to) override {
    BLOCKCSI_RETURN_IF_ERROR(Step("rename", from, to));
    return HostImageFiles::Rename(from, to);
  }
  Status Remove(const std::string& path) override {
    BLOCKCSI_RETURN_IF_ERROR(Step("remove", path));
    return HostImageFiles::Remove(path);
  }
  Status WriteRecord(const std::string& path, std::string_view contents) override {
    BLOCKCSI_RETURN_IF_ERROR(Step("write-record", path));
    return HostImageFiles::WriteRecord(path, contents);
  }
  Status RemoveDurably(const std::string& path) override {
    BLOCKCSI_RETURN_IF_ERROR(Step("remove-durably", path));
    return HostImageFiles::RemoveDurably(path);
  }

 private:
  std::string Relative(const std::string& path) const {
    return path.rfind(pool_dir_ + "/", 0) == 0 ? path.substr(pool_dir_.size() + 1) : path;
  }
  Status Step(const std::string& op, const std::string& path, const std::string& to = "") {
    std::string step = op + " " + Relative(path) + (to.empty() ? "" : " " + Relative(to));
    std::lock_guard lock(mu_);
    if (!fail_.empty() && step.rfind(fail_, 0) == 0) {
      fail_.clear();
      return Internal("injected failure of " + step);
    }
    steps_.push_back(step);
    return OkStatus();
  }

  const std::string pool_dir_;
  std::mutex mu_;
  std::optional<PoolSpace> space_;  // guarded by mu_
  std::string fail_;                // guarded by mu_
  std::vector<std::string> steps_;  // guarded by mu_
};

}  // namespace blockcsi::testing
