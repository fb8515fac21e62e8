// A VolumeAttacher for real-component tests: each "volume" is a sparse
// image file under a directory, attached as a real loop device (losetup),
// with its record kept as a JSON file beside it so that a second instance
// (a "restarted plugin", or the parent after a forked child was killed)
// finds what the first one attached. mkfs, mount, bind and xfs_growfs then
// run for real. Needs root. Thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "attach/volume_attacher.h"
#include "common/executor.h"

namespace blockcsi::testing {

class LoopAttacher final : public VolumeAttacher {
 public:
  explicit LoopAttacher(std::string dir, uint64_t default_size = 512ULL << 20);

  std::string ImagePath(const std::string& volume_id) const { return dir_ + "/" + volume_id + ".img"; }
  // Creates the sparse image now (tests write signatures into it first).
  void CreateImage(const std::string& volume_id, uint64_t size);
  // Detaches every loop device backed by an image of ours. For teardown.
  void DetachAll();
  // Loop devices currently backed by the volume's image.
  std::vector<std::string> LoopsOf(const std::string& volume_id);

  using VolumeAttacher::Attach;
  StatusOr<AttachRecord> Attach(const AttachSpec& spec, const std::optional<AttachRecord>& earlier) override;
  Status Detach(const std::string& volume_id) override;
  StatusOr<AttachRecord> Get(const std::string& volume_id) override;
  StatusOr<std::vector<AttachRecord>> List() override;
  Status Annotate(const std::string& volume_id, const std::string& key, const std::string& value) override;
  StatusOr<uint64_t> Rescan(const std::string& volume_id) override;
  AttachHealth Check(const std::string& volume_id) override;

 private:
  std::string RecordPath(const std::string& volume_id) const { return dir_ + "/" + volume_id + ".json"; }
  StatusOr<AttachRecord> Load(const std::string& volume_id);
  Status Save(const AttachRecord& record);

  const std::string dir_;
  const uint64_t default_size_;
  std::unique_ptr<Executor> exec_ = MakeProcessExecutor();
  std::mutex mu_;
};

}  // namespace blockcsi::testing
