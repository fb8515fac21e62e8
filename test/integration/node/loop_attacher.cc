#include "integration/node/loop_attacher.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/atomic_file.h"

namespace blockcsi::testing {

LoopAttacher::LoopAttacher(std::string dir, uint64_t default_size) : dir_(std::move(dir)), default_size_(default_size) {
  std::filesystem::create_directories(dir_);
}

void LoopAttacher::CreateImage(const std::string& volume_id, uint64_t size) {
  int fd = ::open(ImagePath(volume_id).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) {
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      // Reported by the next losetup.
    }
    ::close(fd);
  }
}

std::vector<std::string> LoopAttacher::LoopsOf(const std::string& volume_id) {
  std::vector<std::string> loops;
  auto r = exec_->Run(Command("losetup").Arg("-j").Arg(ImagePath(volume_id)).Arg("-O").Arg("NAME").Arg("-n"));
  if (!r.ok()) return loops;
  std::istringstream lines(r->stdout_text);
  std::string line;
  while (std::getline(lines, line)) {
    // Older util-linux ignores -O with -j and prints "/dev/loopN: []: (file)".
    std::string name = line.substr(0, line.find(':'));
    if (!name.empty()) loops.push_back(name);
  }
  return loops;
}

void LoopAttacher::DetachAll() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    if (entry.path().extension() != ".img") continue;
    for (const auto& loop : LoopsOf(entry.path().stem().string())) {
      (void)exec_->Run(Command("losetup").Arg("-d").Arg(loop));
    }
  }
}

namespace {

nlohmann::json ToJson(const AttachRecord& r) {
  return {{"volume_id", r.volume_id},   {"state", r.state},         {"device_path", r.device_path},
          {"size_bytes", r.size_bytes}, {"read_only", r.read_only}, {"annotations", r.annotations}};
}

AttachRecord FromJson(const nlohmann::json& j) {
  AttachRecord r;
  r.volume_id = j.at("volume_id");
  r.connector = "loop";
  r.state = j.at("state");
  r.device_path = j.at("device_path");
  r.size_bytes = j.at("size_bytes");
  r.read_only = j.at("read_only");
  r.annotations = j.at("annotations").get<std::map<std::string, std::string>>();
  return r;
}

StatusOr<uint64_t> DeviceSize(const std::string& device) {
  int fd = ::open(device.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open " + device);
  uint64_t size = 0;
  int rc = ::ioctl(fd, BLKGETSIZE64, &size);
  ::close(fd);
  if (rc != 0) return Internal("BLKGETSIZE64 " + device);
  return size;
}

}  // namespace

StatusOr<AttachRecord> LoopAttacher::Load(const std::string& volume_id) {
  auto text = ReadFileToString(RecordPath(volume_id));
  if (!text.ok()) return NotFound("no attach record for volume " + volume_id);
  return FromJson(nlohmann::json::parse(*text));
}

Status LoopAttacher::Save(const AttachRecord& record) {
  return WriteFileAtomically(RecordPath(record.volume_id), ToJson(record).dump());
}

StatusOr<AttachRecord> LoopAttacher::Attach(const AttachSpec& spec, const std::optional<AttachRecord>&) {
  std::lock_guard lock(mu_);
  auto existing = Load(spec.volume_id);
  AttachRecord record;
  if (existing.ok()) record = *existing;
  record.volume_id = spec.volume_id;
  record.read_only = spec.read_only;
  // Like the real attacher: the record says "attaching" before the device
  // exists, so a crash in between leaves a trace to adopt.
  if (record.state != "attached") {
    record.state = "attaching";
    BLOCKCSI_RETURN_IF_ERROR(Save(record));
  }
  std::string image = ImagePath(spec.volume_id);
  if (::access(image.c_str(), F_OK) != 0) CreateImage(spec.volume_id, default_size_);
  std::vector<std::string> loops = LoopsOf(spec.volume_id);
  if (!loops.empty()) {
    record.device_path = loops.front();
  } else {
    Command cmd("losetup");
    cmd.Arg("-f").Arg("--show");
    if (spec.read_only) cmd.Arg("-r");
    cmd.Arg(image);
    BLOCKCSI_ASSIGN_OR_RETURN(CommandResult r, RunChecked(*exec_, cmd));
    std::string dev = r.stdout_text.substr(0, r.stdout_text.find('\n'));
    record.device_path = dev;
  }
  BLOCKCSI_ASSIGN_OR_RETURN(record.size_bytes, DeviceSize(record.device_path));
  record.state = "attached";
  for (const auto& [key, value] : spec.annotations) record.annotations[key] = value;
  BLOCKCSI_RETURN_IF_ERROR(Save(record));
  return record;
}

Status LoopAttacher::Detach(const std::string& volume_id) {
  std::lock_guard lock(mu_);
  for (const auto& loop : LoopsOf(volume_id)) {
    BLOCKCSI_RETURN_IF_ERROR(RunChecked(*exec_, Command("losetup").Arg("-d").Arg(loop)).status());
  }
  // losetup -d on a device another process has open (a parallel test's
  // libblkid probe of every loop device) only marks it autoclear: the
  // kernel lets go of the image at the last close. A detach is done when it
  // has, so the caller's "nothing left" check sees the truth, not the race.
  for (int tries = 0; !LoopsOf(volume_id).empty(); ++tries) {
    if (tries == 500) return Internal("loop device of " + volume_id + " still attached 5 s after losetup -d");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return RemoveFileDurably(RecordPath(volume_id));
}

StatusOr<AttachRecord> LoopAttacher::Get(const std::string& volume_id) {
  std::lock_guard lock(mu_);
  return Load(volume_id);
}

StatusOr<std::vector<AttachRecord>> LoopAttacher::List() {
  std::lock_guard lock(mu_);
  std::vector<AttachRecord> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    if (entry.path().extension() != ".json") continue;
    auto r = Load(entry.path().stem().string());
    if (r.ok()) out.push_back(*r);
  }
  return out;
}

Status LoopAttacher::Annotate(const std::string& volume_id, const std::string& key, const std::string& value) {
  std::lock_guard lock(mu_);
  BLOCKCSI_ASSIGN_OR_RETURN(AttachRecord r, Load(volume_id));
  if (value.empty()) {
    r.annotations.erase(key);
  } else {
    r.annotations[key] = value;
  }
  return Save(r);
}

StatusOr<uint64_t> LoopAttacher::Rescan(const std::string& volume_id) {
  std::lock_guard lock(mu_);
  BLOCKCSI_ASSIGN_OR_RETURN(AttachRecord r, Load(volume_id));
  BLOCKCSI_RETURN_IF_ERROR(RunChecked(*exec_, Command("losetup").Arg("-c").Arg(r.device_path)).status());
  BLOCKCSI_ASSIGN_OR_RETURN(r.size_bytes, DeviceSize(r.device_path));
  BLOCKCSI_RETURN_IF_ERROR(Save(r));
  return r.size_bytes;
}

AttachHealth LoopAttacher::Check(const std::string& volume_id) {
  std::lock_guard lock(mu_);
  auto r = Load(volume_id);
  if (!r.ok()) return {true, "no attach record"};
  struct stat st {};
  if (::stat(r->device_path.c_str(), &st) != 0 || !S_ISBLK(st.st_mode)) {
    return {true, "device " + r->device_path + " is gone"};
  }
  // The loop must still be backed by this volume's image: a detached and
  // reused loop number would be another volume's data.
  std::string name = r->device_path.substr(r->device_path.rfind('/') + 1);
  auto backing = ReadFileToString("/sys/block/" + name + "/loop/backing_file");
  if (!backing.ok() || backing->rfind(ImagePath(volume_id), 0) != 0) {
    return {true, "device " + r->device_path + " is no longer backed by volume " + volume_id};
  }
  return {};
}

}  // namespace blockcsi::testing
